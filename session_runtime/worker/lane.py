"""The Redis stream consumer: :class:`LaneWorker` reads tasks of its LaneWorker pool, runs them,
answers and acknowledges them, keeps itself alive and reclaims the tasks of lost workers (the
rules are in :mod:`session_runtime.worker`)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from typing import Any

from redis.asyncio import Redis
from redis.exceptions import RedisError, ResponseError

from berth_contract import names
from berth_contract.taskauth import derive_session_key, read_key_file, sign_fields
from berth_contract.taskauth import verify_fields as mac_ok
from session_runtime.tools import ToolResult, run_tool
from session_runtime.transport.codec import MalformedMessage, ReplyMessage, TaskMessage, as_text
from session_runtime.worker.metrics import WorkerMetrics
from session_runtime.worker.scripts import TaskScripts
from session_runtime.worker.settings import WorkerSettings
from session_runtime.worker.tasks import (
    MAX_TASK_BYTES,
    WORKER_LOST,
    TaskRejected,
    WorkspaceRefused,
    execution_span,
    now_ms,
    resolve_workspace,
    task_reply,
)

log = logging.getLogger("berth.worker")

#: ``run_tool(name, arguments, workspace, call_id) -> ToolResult`` (the runtime's built-in tools).
ToolRunner = Callable[[str, dict[str, Any], str, str], Awaitable[ToolResult]]

DEAD_LETTER_MAXLEN = 10_000
RECLAIM_PAGE = 200
"""Pending entries read per XPENDING call of a reclaim scan (the scan pages through all)."""


class LaneWorker:
    """One worker process's loop (consumer ``settings.pod_name`` of group ``workers``).

    ``tool_runner`` defaults to the runtime's :func:`run_tool`; benchmarks inject a no-op.
    """

    def __init__(
        self,
        settings: WorkerSettings,
        redis: Redis[Any],
        *,
        tool_runner: ToolRunner | None = None,
        metrics: WorkerMetrics | None = None,
    ) -> None:
        self.settings = settings
        self.redis = redis
        self.metrics = metrics or WorkerMetrics()
        self.metrics.capacity.set(settings.concurrency)
        self._run_tool: ToolRunner = tool_runner or run_tool
        self._stopping = asyncio.Event()
        self._inflight: dict[str, asyncio.Task[None]] = {}
        self._stream = settings.task_stream
        self._master = read_key_file(settings.master_key_file)
        self._me = settings.pod_name
        self._started_ms = now_ms()
        self._scripts = TaskScripts(redis, self._stream, settings.reply_ttl_seconds)

    # ------------------------------------------------------------------ life cycle

    def stop(self) -> None:
        """Take no new task; :meth:`run` returns once the held ones are answered."""
        if not self._stopping.is_set():
            log.info("stop requested; finishing %d held task(s)", len(self._inflight))
        self._stopping.set()

    async def run(self, ready: Callable[[], object] | None = None) -> None:
        """Serve until :meth:`stop`; then drain and remove the liveness key. ``ready`` is
        called once the worker is in its consumer group and alive, before the first read."""
        await self._ensure_group()
        await self._heartbeat_once()
        if ready is not None:
            ready()
        side = [
            asyncio.create_task(self._heartbeat_loop(), name="heartbeat"),
            asyncio.create_task(self._reclaim_loop(), name="reclaim"),
        ]
        try:
            await self._consume()
            if self._inflight:
                await asyncio.gather(*self._inflight.values(), return_exceptions=True)
        finally:
            for task in side:
                task.cancel()
            for task in side:
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await task
            with contextlib.suppress(RedisError):
                await self.redis.delete(self.settings.alive_key(self._me))
                await self._forget_consumer(self._me)
        log.info("stopped")

    async def _ensure_group(self) -> None:
        try:
            await self.redis.xgroup_create(self._stream, names.GROUP, id="0", mkstream=True)
        except ResponseError as exc:
            if "BUSYGROUP" not in str(exc):
                raise

    # ------------------------------------------------------------------ consuming

    async def _consume(self) -> None:
        stop_wait = asyncio.create_task(self._stopping.wait())
        try:
            while not self._stopping.is_set():
                free = self.settings.concurrency - len(self._inflight)
                if free <= 0:
                    await asyncio.wait(
                        [stop_wait, *self._inflight.values()], return_when=asyncio.FIRST_COMPLETED
                    )
                    continue
                try:
                    batches = await self.redis.xreadgroup(
                        names.GROUP,
                        self._me,
                        {self._stream: ">"},
                        count=free,
                        block=self.settings.block_ms,
                    )
                except ResponseError as exc:
                    if "NOGROUP" in str(exc):
                        await self._ensure_group()
                        continue
                    if "UNBLOCKED" in str(exc):  # the stream's slot moved: read it again at once
                        continue
                    log.warning("XREADGROUP failed: %s", exc)
                    await self._pause(1.0)
                    continue
                except RedisError as exc:
                    log.warning("Redis unavailable (%s); retrying", exc)
                    await self._pause(1.0)
                    continue
                # Entries delivered by a read that was already waiting when SIGTERM came are ours
                # now: they are run, not abandoned (abandoning would turn them into "worker lost").
                for _stream, entries in batches or []:
                    for entry_id, fields in entries:
                        self._spawn(as_text(entry_id), fields)
        finally:
            stop_wait.cancel()

    async def _pause(self, seconds: float) -> None:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._stopping.wait(), seconds)

    def _spawn(self, entry_id: str, fields: Any) -> None:
        task = asyncio.create_task(self._handle(entry_id, fields))
        self._inflight[entry_id] = task
        self.metrics.busy.set(len(self._inflight))

        def done(_: asyncio.Task[None]) -> None:
            self._inflight.pop(entry_id, None)
            self.metrics.busy.set(len(self._inflight))

        task.add_done_callback(done)

    async def _handle(self, entry_id: str, fields: Any) -> None:
        """Run one task; every path acknowledges the entry (Redis gone: left to the reclaimer)."""
        try:
            await self._handle_inner(entry_id, fields)
        except Exception:
            log.exception("task entry %s: unexpected failure", entry_id)
            self.metrics.finished("unknown", "error")

    def session_key(self, raw: Mapping[str, str]) -> bytes:
        """The key of the session a task names, after checking the task is signed with it and
        the session is of this worker's namespace. Raises :class:`TaskRejected`."""
        size = sum(len(k) + len(v) for k, v in raw.items())
        if size > MAX_TASK_BYTES:
            raise TaskRejected("oversize", f"task entry of {size} bytes (limit {MAX_TASK_BYTES})")
        ns, _, name = raw.get("session", "").partition("/")
        if ns != self.settings.namespace or not name:
            raise TaskRejected("namespace", f"session {raw.get('session')!r} is not of {ns!r}")
        key = derive_session_key(self._master, ns, name)
        if not mac_ok(key, raw):
            raise TaskRejected("mac", "missing or wrong MAC")
        return key

    async def _reject(self, entry_id: str, fields: Any, exc: TaskRejected) -> None:
        log.warning("dropping task entry %s unrun: %s (%s)", entry_id, exc.reason, exc)
        self.metrics.rejected.labels(reason=exc.reason).inc()
        if exc.reason == "duplicate":
            await self.redis.xack(self._stream, names.GROUP, entry_id)  # type: ignore[no-untyped-call,unused-ignore]
            return
        await self._dead_letter(entry_id, fields, f"rejected: {exc.reason}: {exc}", {})

    async def _handle_inner(self, entry_id: str, fields: Any) -> None:
        started_ms = now_ms()
        if (admitted := await self._admit(entry_id, fields)) is not None:
            task, ns, key = admitted
            with execution_span(task):  # a child of the session's tool-call span
                await self._execute(entry_id, task, ns, key, started_ms)

    async def _admit(self, entry_id: str, fields: Any) -> tuple[TaskMessage, str, bytes] | None:
        """(task, namespace, session key) of a task this worker may run, after its signature,
        shape, reply stream and one-time claim are checked; None after rejecting or
        dead-lettering it."""
        raw = {as_text(k): as_text(v) for k, v in dict(fields).items()}
        try:
            key = self.session_key(raw)
        except TaskRejected as exc:
            await self._reject(entry_id, fields, exc)
            return None
        try:
            task = TaskMessage.from_fields(raw)
            ns, uid = names.parse_reply_stream(task.reply_to)
        except (MalformedMessage, ValueError) as exc:
            partial = exc.partial if isinstance(exc, MalformedMessage) else {}
            reason = exc.reason if isinstance(exc, MalformedMessage) else str(exc)
            await self._dead_letter(entry_id, fields, reason, partial, key)
            self.metrics.finished(partial.get("lane", "unknown"), "malformed")
            return None
        if (ns, uid) != (self.settings.namespace, task.session_uid):
            await self._reject(entry_id, fields, TaskRejected("reply_to", "not its session's"))
            return None
        claim = names.task_claim_key(ns, task.session_uid, task.task_id)
        outcome = await self._scripts.claim(task.reply_to, claim, entry_id)
        if outcome == "duplicate":
            await self._reject(entry_id, fields, TaskRejected("duplicate", f"task {task.task_id}"))
            return None
        if outcome != "claimed":  # its reply could never be delivered: do not run it
            await self._reject(entry_id, fields, TaskRejected("reply_to", f"is a {outcome}"))
            return None
        return task, ns, key

    async def _execute(
        self, entry_id: str, task: TaskMessage, ns: str, key: bytes, started_ms: int
    ) -> None:
        """Run an admitted task in its workspace within its deadline and answer it once."""

        async def fail(error: str, outcome: str, seconds: float | None = None) -> None:
            message = task_reply(task, self._me, started_ms, False, error=error)
            await self._answer(entry_id, task.reply_to, message, key)
            self.metrics.finished(task.lane, outcome, seconds)

        try:
            session_name = task.session.partition("/")[2]
            workspace = resolve_workspace(
                self.settings.workspaces_root, ns, session_name, task.workspace
            )
        except WorkspaceRefused as exc:
            await fail(str(exc), "refused")
            return
        budget_ms = min(task.deadline_ms - started_ms, self.settings.task_timeout_seconds * 1000)
        if budget_ms <= 0:
            await fail("deadline passed before the task started; it was not run", "expired")
            return
        t0 = time.monotonic()
        try:
            result = await asyncio.wait_for(
                self._run_tool(task.command_type, task.payload, workspace, task.tool_call_id),
                budget_ms / 1000,
            )
        except TimeoutError:
            error = f"task deadline exceeded after {int(budget_ms)} ms; the tool was stopped"
            await fail(error, "timeout", time.monotonic() - t0)
            return
        except Exception as exc:  # a tool must not raise; if it does, report it, do not crash
            log.exception("tool %s raised", task.command_type)
            error = f"worker error: {type(exc).__name__}: {exc}"
            await fail(error, "error", time.monotonic() - t0)
            return
        message = task_reply(
            task, self._me, started_ms, True, result.output, result.exit_code, result.is_error
        )
        await self._answer(entry_id, task.reply_to, message, key)
        outcome = "tool_error" if result.is_error else "ok"
        self.metrics.finished(task.lane, outcome, time.monotonic() - t0)

    async def _answer(
        self, entry_id: str, reply_to: str, message: ReplyMessage, key: bytes
    ) -> None:
        """Reply (signed with the session's key) and acknowledge with the answer script
        (:mod:`session_runtime.worker.scripts`): a task gets one reply whoever answers it, and
        an acknowledged task always has its reply. A reply stream turned into another type
        takes no reply; that case is counted in ``berth_worker_replies_undeliverable_total`` and
        the signed reply kept on the dead-letter stream instead."""
        fields = sign_fields(key, message.to_fields())
        ns, uid = names.parse_reply_stream(reply_to)
        claim = names.task_claim_key(ns, uid, message.task_id)
        outcome = await self._scripts.answer(reply_to, claim, fields, entry_id)
        if outcome in ("replied", "duplicate"):
            return
        self.metrics.undeliverable.inc()
        await self._dead_letter(
            entry_id, fields, f"reply not delivered: {reply_to} is a {outcome}, not a stream", {}
        )

    async def _dead_letter(
        self,
        entry_id: str,
        fields: Any,
        reason: str,
        partial: Mapping[str, str],
        key: bytes | None = None,
    ) -> None:
        """Record the entry on the dead-letter stream and acknowledge it; with the session's
        ``key`` (an authenticated task that does not parse) first answer it with the reason (the
        reply stream is in the session's slot, the dead-letter and task streams in the pool's:
        two transactions; a worker lost between them leaves the entry for the reclaimer, which
        dead-letters it again)."""
        raw = {as_text(k): as_text(v)[:4096] for k, v in dict(fields or {}).items()}
        log.warning("dead-lettering task entry %s: %s", entry_id, reason)
        task_id, reply_to = partial.get("task_id"), partial.get("reply_to", "")
        if key and task_id and reply_to.startswith(f"berth:{self.settings.namespace}:s:"):
            with contextlib.suppress(ValueError, ResponseError):
                names.parse_reply_stream(reply_to)
                failure = ReplyMessage(
                    task_id=task_id,
                    tool_call_id=partial.get("tool_call_id", ""),
                    success=False,
                    error=f"malformed task message: {reason}",
                    worker=self._me,
                    started_ms=now_ms(),
                    ended_ms=now_ms(),
                )
                signed = sign_fields(key, failure.to_fields())
                async with self.redis.pipeline(transaction=True) as pipe:
                    pipe.xadd(reply_to, signed)  # type: ignore[arg-type,unused-ignore]
                    pipe.expire(reply_to, self.settings.reply_ttl_seconds)
                    await pipe.execute()
        record = {
            "entry_id": entry_id,
            "reason": reason[:1000],
            "worker": self._me,
            "at_ms": str(now_ms()),
            "fields": json.dumps(raw)[:65536],
        }
        async with self.redis.pipeline(transaction=True) as pipe:
            pipe.xadd(
                self.settings.dead_letter_stream,
                record,  # type: ignore[arg-type,unused-ignore]
                maxlen=DEAD_LETTER_MAXLEN,
                approximate=True,
            )
            pipe.xack(self._stream, names.GROUP, entry_id)
            await pipe.execute()

    # ------------------------------------------------------------------ liveness and reclaim

    async def _heartbeat_once(self) -> None:
        ttl_ms = int(self.settings.heartbeat_seconds * 1000)
        await self.redis.set(self.settings.alive_key(self._me), self.settings.pod_ip, px=ttl_ms)

    async def _heartbeat_loop(self) -> None:
        while True:
            await asyncio.sleep(self.settings.heartbeat_seconds / 3)
            try:
                await self._heartbeat_once()
            except RedisError as exc:
                log.warning("heartbeat failed: %s", exc)

    async def _reclaim_loop(self) -> None:
        while True:
            try:
                await self.reclaim_once()
            except RedisError as exc:
                log.warning("reclaim scan failed: %s", exc)
            except Exception:
                log.exception("reclaim scan failed")
            await asyncio.sleep(self.settings.reclaim_interval_seconds)

    async def reclaim_once(self) -> int:
        """Answer "worker lost" for tasks held by dead workers; returns how many were answered.

        A holder is dead when its liveness key is gone, or when it is this worker's own name and
        the entry was delivered before this process started (a restarted container keeps its pod
        name). A task is
        also taken from a live holder once it is idle longer than the task timeout plus two
        heartbeats (the holder's own deadline enforcement failed).
        """
        answered = 0
        alive: dict[str, bool] = {}
        async for entry in self._pending_entries():
            try:
                answered += await self._reclaim_entry(entry, alive)
            except (ValueError, KeyError, TypeError) as exc:  # one odd entry never stops the scan
                log.warning("reclaim: skipping pending entry %r: %s", entry, exc)
        for holder, is_alive in alive.items():
            if not is_alive:
                await self._forget_consumer(holder)
        return answered

    async def _pending_entries(self) -> AsyncIterator[dict[str, Any]]:
        """Every entry of the group's pending list, oldest first, read in pages of
        ``RECLAIM_PAGE`` (exclusive ranges, Redis >= 6.2), so old entries never hide newer ones."""
        start = "-"
        while True:
            page = await self.redis.xpending_range(
                self._stream, names.GROUP, min=start, max="+", count=RECLAIM_PAGE
            )
            for entry in page:
                yield entry
            if len(page) < RECLAIM_PAGE:
                return
            start = "(" + as_text(page[-1]["message_id"])

    async def _reclaim_entry(self, entry: Mapping[str, Any], alive: dict[str, bool]) -> int:
        """Answer one pending entry if its holder is dead or hung; returns 1 if answered.

        ``alive`` caches liveness per holder for one scan. A holder whose name is not a valid
        consumer name cannot be a Berth worker and is treated as dead.
        """
        entry_id = as_text(entry["message_id"])
        holder = as_text(entry["consumer"])
        idle = int(entry["time_since_delivered"])
        hung_ms = (self.settings.task_timeout_seconds + 2 * self.settings.heartbeat_seconds) * 1000
        if holder == self._me:
            # Ours, but delivered to an earlier process with this pod name (a restarted
            # container)? Entries delivered to this process are in _inflight, or were
            # delivered after it started (a read not yet handed to _spawn).
            incarnation_ms = now_ms() - self._started_ms
            dead = entry_id not in self._inflight and idle > incarnation_ms + 1000
        else:
            if holder not in alive:
                try:
                    key = names.alive_key(self.settings.namespace, self.settings.laneworker, holder)
                except ValueError:
                    alive[holder] = False
                else:
                    alive[holder] = bool(await self.redis.exists(key))
            dead = not alive[holder] or idle > hung_ms
        if not dead:
            return 0
        untyped: Any = self.redis  # XCLAIM/XACK are untyped in the redis stubs
        claimed = await untyped.xclaim(
            self._stream,
            names.GROUP,
            self._me,
            min_idle_time=max(1, idle // 2),
            message_ids=[entry_id],
        )
        answered = 0
        for claimed_id, fields in claimed or []:
            if fields is None:  # deleted from the stream meanwhile
                await untyped.xack(self._stream, names.GROUP, claimed_id)
                continue
            await self._answer_lost(as_text(claimed_id), fields, holder)
            answered += 1
        return answered

    async def _forget_consumer(self, consumer: str) -> None:
        """Remove ``consumer`` from the group once it holds nothing (a departed pod must not stay
        in ``per_consumer_pending`` forever). DELCONSUMER would drop held entries, so it is only
        issued for a consumer with no pending entry."""
        held = await self.redis.xpending_range(
            self._stream, names.GROUP, min="-", max="+", count=1, consumername=consumer
        )
        if not held:
            untyped: Any = self.redis  # XGROUP DELCONSUMER is untyped in the redis stubs
            await untyped.xgroup_delconsumer(self._stream, names.GROUP, consumer)

    async def _answer_lost(self, entry_id: str, fields: Any, holder: str) -> None:
        raw = {as_text(k): as_text(v) for k, v in dict(fields).items()}
        try:
            key = self.session_key(raw)
        except TaskRejected as exc:
            await self._reject(entry_id, fields, exc)
            return
        try:
            task = TaskMessage.from_fields(raw)
            names.parse_reply_stream(task.reply_to)
        except (MalformedMessage, ValueError) as exc:
            partial = exc.partial if isinstance(exc, MalformedMessage) else {}
            await self._dead_letter(entry_id, fields, f"reclaimed: {exc}", partial, key)
            self.metrics.finished(partial.get("lane", "unknown"), "malformed")
            return
        log.warning("task %s was held by lost worker %s; answering failure", task.task_id, holder)
        now = now_ms()
        message = ReplyMessage(
            task_id=task.task_id,
            tool_call_id=task.tool_call_id,
            success=False,
            error=(
                f"{WORKER_LOST}: {holder} stopped while holding the task; it was not re-run "
                "and its side effects are unknown"
            ),
            worker=self._me,
            started_ms=now,
            ended_ms=now,
        )
        await self._answer(entry_id, task.reply_to, message, key)
        self.metrics.finished(task.lane, "lost")
