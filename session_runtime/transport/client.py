"""Session side of the lane-task transport over Redis Streams (docs/architecture.md §7).

Owned by ``session_runtime.transport``; built by the session pod (``berth-session``) and handed
to :class:`~session_runtime.lanes.queue.LaneQueue` as its ``transport``. It implements the
:class:`~session_runtime.lanes.external.ExternalTransport` seam:

- ``publish``: ``XADD`` the task to ``berth:<ns>:lw:{<laneworker>}:tasks`` of the LaneWorker that
  serves the task's lane;
- ``start``: a reader that ``XREAD``\\ s the session's reply stream
  ``berth:<ns>:s:{<uid>}:results`` from its beginning and hands every reply to the queue (replies
  for tasks this process did not publish are kept in memory for ``find_reply``);
- ``settle``: ``XDEL`` a reply once the session has journaled its result (the stream keeps every
  reply until then, so a resumed session finds results delivered while it was passivated), in
  the background, off the tool call's path;
- ``find_reply``: look a reply up by tool call id (memory, then ``XRANGE`` over the stream).

When several replies exist for one tool call (a worker's reply and a "worker lost" answer racing
it), the first one on the stream wins, which is the one the live queue used too.

Authentication (:mod:`berth_contract.taskauth`): with a ``task_key`` every task is signed
with it and every reply must carry a valid MAC under it; a reply that does not (forged by anyone
who can write the stream) is deleted from the stream, counted through ``on_rejected`` and never
delivered. A reply must also answer a task of this session (its task id names this session's
uid) — others are dropped the same way. Replies kept in memory for ``find_reply`` are capped
(:data:`MAX_KEPT_REPLIES`, oldest dropped).

Errors: ``publish`` raises ``redis.exceptions.RedisError`` (the queue turns it into a tool
failure); the reader logs and retries connection errors every second and skips malformed replies.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import time
from collections.abc import Callable, Mapping
from typing import Any

from redis.asyncio import Redis
from redis.exceptions import RedisError

from berth_contract import names
from berth_contract.taskauth import sign_fields, verify_fields
from session_runtime.lanes.external import ExternalReply, ExternalTask, ReplySink
from session_runtime.tools.base import Lane, ToolContext
from session_runtime.tracing import tool_span, trace_fields
from session_runtime.transport.codec import MalformedMessage, ReplyMessage, TaskMessage, as_text
from session_runtime.transport.connect import connect, retrying

log = logging.getLogger(__name__)

PUBLISH_RETRY_SECONDS = 10.0
"""How long a task's publish is sent again after transient Redis errors before the call is
answered as not published (a Cluster slot migration or a failover takes well under this)."""
SETTLE_DELAY_SECONDS = 0.05
"""How long settled replies wait to be deleted together (one XDEL per batch, not per call)."""

MAX_KEPT_REPLIES = 10_000
"""Replies held in memory for ``find_reply`` at most (a flood of unknown replies cannot grow it)."""


class RedisTaskTransport:
    """Publishes a session's external tasks and reads its replies.

    Arguments: ``redis`` (``redis.asyncio.Redis``; the caller owns it unless built with
    :meth:`from_url`), ``namespace``, ``session_name`` (``AgentSession`` name), ``session_uid``,
    ``epoch`` (placement epoch), ``lane_workers`` (lane -> LaneWorker name, from
    ``spec.lanes.<lane>.laneWorkerRef``) and/or ``task_streams`` (lane -> task stream name as the
    operator rendered it; wins over ``lane_workers``), ``reply_stream`` (optional; checked against
    the name §7 fixes), ``shared_root`` (the shared volume mount in this pod:
    when given, the workspace is sent relative to it, ``.`` for the root itself, so workers build
    the path from the session they serve), ``task_key`` (the session's 32-byte task key: sign
    tasks, verify replies; None = unauthenticated, for local runs and tests only),
    ``on_rejected`` (called with a reason for every dropped reply: ``mac``, ``malformed``),
    ``reply_grace_ms`` (how long past a task's timeout the queue waits for the worker's own
    deadline/"worker lost" answer; default 10000 ms), ``block_ms`` (reader block time, ms),
    ``labels`` (the session's identity labels, sent with every task for the worker's spans).
    Every task carries the W3C trace context of its tool call's span
    (:func:`session_runtime.tracing.tool_span`), signed with the rest.
    """

    def __init__(
        self,
        redis: Redis[Any],
        *,
        namespace: str,
        session_name: str,
        session_uid: str,
        epoch: int,
        lane_workers: Mapping[Lane, str] | None = None,
        task_streams: Mapping[Lane, str] | None = None,
        reply_stream: str | None = None,
        shared_root: str | None = None,
        task_key: bytes | None = None,
        on_rejected: Callable[[str], None] | None = None,
        reply_grace_ms: int = 10_000,
        block_ms: int = 1_000,
        clock: Callable[[], int] | None = None,
        labels: Mapping[str, str | None] | None = None,
    ) -> None:
        self._redis = redis
        self._ns = names.namespace(namespace)
        self._session = f"{namespace}/{session_name}"
        self._uid = session_uid
        self._epoch = epoch
        self._streams = {
            lane: names.task_stream(namespace, lw) for lane, lw in (lane_workers or {}).items()
        }
        self._streams.update(task_streams or {})
        self._reply_stream = names.reply_stream(namespace, session_uid)
        if reply_stream is not None and reply_stream != self._reply_stream:
            raise ValueError(
                f"reply stream {reply_stream!r} is not this session's ({self._reply_stream!r})"
            )
        self._shared_root = os.path.realpath(shared_root) if shared_root else None
        self._key = task_key
        self._on_rejected = on_rejected or (lambda _reason: None)
        self.reply_grace_ms = reply_grace_ms
        self._block_ms = block_ms
        self._clock = clock or (lambda: int(time.time() * 1000))
        self._sink: ReplySink | None = None
        self._reader: asyncio.Task[None] | None = None
        self._seen: dict[str, ExternalReply] = {}
        self._last_id = "0-0"
        self._owns_client = False
        self._unsettled: list[str] = []
        self._relative: dict[str, str] = {}  # workspace -> as sent (realpath once, not per task)
        self._deleter: asyncio.Task[None] | None = None
        self._labels = {k: v for k, v in (labels or {}).items() if v}

    @classmethod
    def from_url(cls, url: str, **kwargs: Any) -> RedisTaskTransport:
        """Build with its own client from a ``redis://`` URL (closed by :meth:`close`)."""
        transport = cls(connect(url), **kwargs)
        transport._owns_client = True
        return transport

    @property
    def reply_stream(self) -> str:
        """This session's reply stream, ``berth:<ns>:s:{<uid>}:results`` (berth_contract.names)."""
        return self._reply_stream

    def task_stream(self, lane: Lane) -> str:
        """The task stream serving ``lane``; KeyError if no LaneWorker is configured for it."""
        return self._streams[lane]

    def _workspace(self, workspace: str) -> str:
        if self._shared_root is None:
            return workspace
        if workspace in self._relative:
            return self._relative[workspace]
        relative = self._relative[workspace] = self._resolve(workspace)
        if len(self._relative) > 64:  # a session has one workspace; never grow without bound
            self._relative.pop(next(iter(self._relative)))
        return relative

    def _resolve(self, workspace: str) -> str:
        assert self._shared_root is not None
        real = os.path.realpath(workspace)
        if real == self._shared_root or real.startswith(self._shared_root + os.sep):
            return os.path.relpath(real, self._shared_root)
        return workspace  # outside the volume: the worker will refuse it, with a clear reason

    # -- ExternalTransport -------------------------------------------------------------------

    async def start(self, sink: ReplySink) -> None:
        """Deliver replies to ``sink`` from a reader task that reads the reply stream from its
        beginning (idempotent: a running reader is kept, only the sink is replaced)."""
        self._sink = sink
        if self._reader is None or self._reader.done():
            self._reader = asyncio.get_running_loop().create_task(self._read_replies())

    async def publish(self, task: ExternalTask, ctx: ToolContext) -> None:
        """``XADD`` ``task`` (signed when a task key is set) to its lane's task stream, sent
        again after a transient error for up to :data:`PUBLISH_RETRY_SECONDS`. Raises
        ``RedisError``, also when no LaneWorker is configured for the lane."""
        stream = self._streams.get(task.lane)
        if stream is None:
            raise RedisError(f"no LaneWorker is configured for the {task.lane} lane")
        message = TaskMessage(
            task_id=task.task_id,
            session=self._session,
            session_uid=self._uid,
            epoch=self._epoch,
            run_id=ctx.run_id,
            tool_call_id=task.tool_call_id,
            lane=task.lane,
            command_type=task.command_type,
            payload=task.payload,
            workspace=self._workspace(ctx.workspace),
            deadline_ms=task.deadline_ms,
            reply_to=self._reply_stream,
            labels=self._labels,
            **trace_fields(tool_span(task.tool_call_id)),
        )
        fields = message.to_fields()
        if self._key is not None:
            fields = sign_fields(self._key, fields)
        # Sent again on a transient error (a slot migrating, a failover): a task published
        # twice runs once, its id claimed by the worker that takes it.
        await retrying(
            lambda: self._redis.xadd(stream, fields),  # type: ignore[arg-type,unused-ignore]
            PUBLISH_RETRY_SECONDS,
        )

    async def settle(self, reply: ExternalReply) -> None:
        """Forget ``reply`` (journaled by the session): drop it from memory and ``XDEL`` its
        stream entry (``reply.ref``) soon, off the caller's path: entries settled within
        :data:`SETTLE_DELAY_SECONDS` go in one ``XDEL`` by a background task (:meth:`close`
        waits for it). A reply left on the
        stream by a crash or a failed delete is harmless: recovery prefers the journal."""
        self._seen.pop(reply.tool_call_id, None)
        if reply.ref:
            self._unsettled.append(reply.ref)
            if self._deleter is None or self._deleter.done():
                self._deleter = asyncio.get_running_loop().create_task(self._delete_settled())

    async def _delete_settled(self) -> None:
        await asyncio.sleep(SETTLE_DELAY_SECONDS)  # gather the replies settled meanwhile
        while self._unsettled:
            refs, self._unsettled = self._unsettled, []
            try:
                await self._redis.xdel(self._reply_stream, *refs)
            except RedisError:
                log.warning("could not delete %d settled replies", len(refs), exc_info=True)

    async def find_reply(self, tool_call_id: str) -> ExternalReply | None:
        """The first reply for ``tool_call_id``: from memory, else by ``XRANGE`` over the reply
        stream in pages of 500 (forged or malformed entries met on the way are deleted), or None.
        """
        if tool_call_id in self._seen:
            return self._seen[tool_call_id]
        start = "-"
        while True:
            page = await self._redis.xrange(self._reply_stream, min=start, max="+", count=500)
            if not page:
                return None
            for entry_id, fields in page:
                reply = await self._accept(as_text(entry_id), fields)
                if reply is not None and reply.tool_call_id == tool_call_id:
                    return reply
            start = f"({as_text(page[-1][0])}"

    async def close(self) -> None:
        """Cancel the reply reader and, when built by :meth:`from_url`, close the Redis client."""
        if self._deleter is not None:
            with contextlib.suppress(Exception):
                await self._deleter
        if self._reader is not None:
            self._reader.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._reader
            self._reader = None
        if self._owns_client:
            client: Any = self._redis  # aclose() is newer than the redis stubs
            await client.aclose()

    async def delete_replies(self) -> None:
        """Drop the whole reply stream (the session completed; nothing is left to recover)."""
        await self._redis.delete(self._reply_stream)

    # -- internals ---------------------------------------------------------------------------

    async def _accept(self, entry_id: str, fields: Any) -> ExternalReply | None:
        """The reply in a stream entry, or None after dropping a forged or malformed one."""
        raw = {as_text(k): as_text(v) for k, v in fields.items()}
        reason = None
        if self._key is not None and not verify_fields(self._key, raw):
            reason = "mac"
        else:
            try:
                return ReplyMessage.from_fields(raw).to_external(ref=entry_id)
            except MalformedMessage as exc:
                log.warning("dropping malformed reply %s: %s", entry_id, exc.reason)
                reason = "malformed"
        if reason == "mac":
            log.warning("dropping reply %s on %s: bad or missing MAC", entry_id, self._reply_stream)
        self._on_rejected(reason)
        with contextlib.suppress(RedisError):
            await self._redis.xdel(self._reply_stream, entry_id)
        return None

    def _keep(self, reply: ExternalReply) -> None:
        if reply.tool_call_id not in self._seen and len(self._seen) >= MAX_KEPT_REPLIES:
            self._seen.pop(next(iter(self._seen)))
        self._seen.setdefault(reply.tool_call_id, reply)

    async def _read_replies(self) -> None:  # noqa: C901
        me = asyncio.current_task()
        while True:
            if me is not None and me.cancelling():
                # A client that swallowed the cancellation of a blocking read must not make
                # the reader block again: a cancelled reader always ends.
                raise asyncio.CancelledError
            try:
                batches = await self._redis.xread(
                    {self._reply_stream: self._last_id}, count=100, block=self._block_ms
                )
            except asyncio.CancelledError:
                raise
            except RedisError:
                if me is not None and me.cancelling():
                    raise asyncio.CancelledError from None  # redis-py wraps a cancelled read
                log.warning("reading %s failed; retrying", self._reply_stream, exc_info=True)
                await asyncio.sleep(1)
                continue
            for _stream, entries in batches or []:
                for entry_id, fields in entries:
                    self._last_id = as_text(entry_id)
                    reply = await self._accept(self._last_id, fields)
                    if reply is None:
                        continue
                    self._keep(reply)
                    if self._sink is not None:
                        try:
                            await self._sink(reply)
                        except Exception:
                            log.warning("reply sink failed on %s", reply.task_id, exc_info=True)
