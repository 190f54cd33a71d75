"""``berth-worker``: a LaneWorker pod's process. Runs sessions' execute-lane tools from Redis.

Owned by the lane-queue/transport layer; started by the LaneWorker Deployment the operator owns
(console script ``berth-worker``: ``session_runtime.launch.worker``, then :func:`main`). Talks only
to Redis and the shared volume (ARCHITECTURE §2, §4, §7).

Loop: read tasks from ``berth:{ns}:lw:{laneworker}:tasks`` as consumer ``POD_NAME`` of group
``workers`` (at most ``BERTH_WORKER_CONCURRENCY`` at once), run each tool with the runtime's own
tool implementations (:func:`session_runtime.tools.run_tool`) in the session's workspace on the
shared volume, then reply to the task's ``reply_to`` stream and ``XACK`` in one ``MULTI``.

Rules:

- At most once. A worker refreshes a liveness key (TTL ``BERTH_WORKER_HEARTBEAT_SECONDS``); every
  worker scans the group's pending entries and claims (``XCLAIM`` with a min-idle time, so only
  one claimer wins) the tasks of a consumer whose key is gone, or of one that holds a task far past
  its deadline, and answers them ``success=false`` "worker lost". Such a task is never re-run.
  (§7 names XAUTOCLAIM; claiming entry by entry after checking the owner's liveness keeps a live,
  busy worker's tasks where they are.)
- Deadline: a task not started before ``deadline_ms`` is answered "deadline passed"; a running
  tool is stopped at ``min(deadline, BERTH_TASK_TIMEOUT_SECONDS)`` and answered ``success=false``.
  A tool that ran and failed is ``success=true`` with the failure in ``output``.
- Bound to its session (the Berth security contract): a task must carry a MAC under the key of the
  session it names (derived from the namespace master in ``BERTH_TASK_MASTER_KEY_FILE``; see
  :mod:`session_runtime.transport.auth`), name a session of this worker's namespace and reply to
  that session's own stream. Anything else — forged, unsigned, oversized — is dead-lettered,
  acknowledged and counted in ``berth_worker_tasks_rejected_total{reason}``; it is never run and
  never answered. The workspace is built, never taken from the message:
  ``<BERTH_WORKSPACES_ROOT>/<namespace>/<session>/<relative workspace>`` (no ``..``, no absolute
  path, no symlinked directory), so a task can only touch its own session's files; replies are
  signed with the same session key.
- A task id runs once: before running, the worker sets ``berth:{ns}:task:{uid}:{task_id}``
  (``SET NX``); a redelivery finds it and is acknowledged without running or answering.
- Bad input: a signed message that does not parse is moved to ``berth:{ns}:lw:{lw}:dead`` with a
  reason and acknowledged (and answered with the reason). Nothing a message says crashes the
  worker.
- SIGTERM/SIGINT: read no new task, finish the held ones (they end by their deadlines), remove
  the liveness key, leave the consumer group, exit 0. A lost worker is removed from the group by
  the worker that answered its tasks.

Configuration (env, each overridable by ``--flag``): ``BERTH_REDIS_URL``, ``BERTH_NAMESPACE``,
``BERTH_LANEWORKER``, ``POD_NAME``, ``POD_IP``, ``BERTH_WORKER_CONCURRENCY`` (default 1),
``BERTH_WORKSPACES_ROOT`` (the ``workspaces`` directory of the shared volume),
``BERTH_TASK_MASTER_KEY_FILE``, ``BERTH_TASK_TIMEOUT_SECONDS`` (default 600),
``BERTH_METRICS_PORT`` (default 9090, 0 = no metrics server; bound on ``POD_IP`` or 127.0.0.1;
it answers once the worker has joined its consumer group, and is the readiness probe's),
``BERTH_WORKER_HEARTBEAT_SECONDS`` (default 10), ``BERTH_RECLAIM_INTERVAL_SECONDS`` (default 2),
``BERTH_REPLY_TTL_SECONDS`` (default 604800: a reply stream expires a week after its last reply).

Metrics: ``berth_worker_tasks_total{lane,outcome}`` (outcome: ok, tool_error, timeout, expired,
refused, malformed, lost, error), ``berth_worker_task_duration_seconds{lane}``,
``berth_worker_busy`` (tasks running), ``berth_worker_capacity`` (concurrency).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import logging
import os
import socket
import sys
import threading
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from http.server import ThreadingHTTPServer
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, MetricsHandler
from pydantic import AliasChoices, BaseModel, ConfigDict, Field, ValidationError
from pydantic_core import PydanticUndefined
from redis.asyncio import Redis
from redis.exceptions import RedisError, ResponseError, WatchError

from session_runtime import early_signals, listen
from session_runtime.lanes.config import LANES
from session_runtime.tools import ToolResult, run_tool
from session_runtime.transport import names
from session_runtime.transport.auth import derive_session_key, read_key_file, sign_fields
from session_runtime.transport.auth import verify_fields as mac_ok
from session_runtime.transport.codec import MalformedMessage, ReplyMessage, TaskMessage, as_text

log = logging.getLogger("berth.worker")

#: ``run_tool(name, arguments, workspace, call_id) -> ToolResult`` (the runtime's built-in tools).
ToolRunner = Callable[[str, dict[str, Any], str, str], Awaitable[ToolResult]]

OUTCOMES = ("ok", "tool_error", "timeout", "expired", "refused", "malformed", "lost", "error")
WORKER_LOST = "worker lost"
DEAD_LETTER_MAXLEN = 10_000
RECLAIM_PAGE = 200
"""Pending entries read per XPENDING call of a reclaim scan (the scan pages through all)."""


def _now_ms() -> int:
    return int(time.time() * 1000)


def _reply(
    task: TaskMessage,
    worker: str,
    started_ms: int,
    success: bool,
    output: str = "",
    exit_code: int = 0,
    is_error: bool = False,
    *,
    error: str = "",
) -> ReplyMessage:
    """The reply to ``task`` from ``worker`` (epoch-ms times; a failure carries ``error``)."""
    result = {"output": output, "exit_code": exit_code, "is_error": is_error}
    return ReplyMessage(
        task_id=task.task_id,
        tool_call_id=task.tool_call_id,
        success=success,
        result=result if success else {},
        error=error,
        worker=worker,
        started_ms=started_ms,
        ended_ms=_now_ms(),
    )


class WorkspaceRefused(ValueError):
    """The task's workspace cannot be built inside its own session's workspace root."""


class TaskRejected(ValueError):
    """A task that must not run and must not be answered; ``reason`` is a metric label."""

    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(detail)
        self.reason = reason


#: Largest task entry accepted, in bytes of field names and values (a bigger one is rejected).
MAX_TASK_BYTES = 1024 * 1024
REJECT_REASONS = ("mac", "namespace", "reply_to", "oversize", "duplicate")


def resolve_workspace(workspaces_root: str, namespace: str, session: str, relative: str) -> str:
    """``<workspaces_root>/<namespace>/<session>/<relative>``, checked: the session's own
    directory by construction. ``relative`` is ``.`` or a relative path without ``..``.

    Raises :class:`WorkspaceRefused` for an absolute or escaping ``relative``, a NUL byte, a
    missing directory, or any symlink from the session's root down (a swapped-in link could lead
    elsewhere; directories are opened with ``O_NOFOLLOW`` component by component).
    """
    if "\x00" in relative:
        raise WorkspaceRefused("workspace path contains a NUL byte")
    parts = [p for p in relative.split("/") if p not in ("", ".")]
    if relative.startswith("/") or ".." in parts:
        raise WorkspaceRefused(f"workspace {relative!r} leaves the session's workspace; refused")
    names.namespace(namespace)
    path = os.path.realpath(workspaces_root)
    flags = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        for part in (namespace, session, *parts):
            try:
                nxt = os.open(part, flags, dir_fd=fd)
            except OSError:
                raise WorkspaceRefused(
                    f"workspace {relative!r} of session {namespace}/{session} is not a directory "
                    "(missing, or a symlink)"
                ) from None
            os.close(fd)
            fd = nxt
            path = os.path.join(path, part)
    finally:
        os.close(fd)
    return path


def _env(name: str, default: Any = PydanticUndefined, **bounds: Any) -> Any:
    """A field read from the variable ``name``; keywords still use the field name."""
    return Field(default, validation_alias=AliasChoices(name), **bounds)


class WorkerSettings(BaseModel):
    """``berth-worker`` settings; see the module docstring for the env names and defaults.

    Parsed and bounded by pydantic from the variable each field names; built from keywords
    (field names) in tests and benches."""

    model_config = ConfigDict(frozen=True, populate_by_name=True, extra="ignore")

    redis_url: str = _env("BERTH_REDIS_URL", min_length=1)
    namespace: str = _env("BERTH_NAMESPACE", min_length=1)
    laneworker: str = _env("BERTH_LANEWORKER", min_length=1)
    pod_name: str = _env("POD_NAME", min_length=1)
    workspaces_root: str = _env("BERTH_WORKSPACES_ROOT", min_length=1)
    master_key_file: str = _env("BERTH_TASK_MASTER_KEY_FILE", min_length=1)
    pod_ip: str = _env("POD_IP", "127.0.0.1")
    concurrency: int = _env("BERTH_WORKER_CONCURRENCY", 1, ge=1)
    task_timeout_seconds: float = _env("BERTH_TASK_TIMEOUT_SECONDS", 600.0, gt=0)
    metrics_port: int = _env("BERTH_METRICS_PORT", 9090, ge=0, le=65535)
    heartbeat_seconds: float = _env("BERTH_WORKER_HEARTBEAT_SECONDS", 10.0, gt=0)
    reclaim_interval_seconds: float = _env("BERTH_RECLAIM_INTERVAL_SECONDS", 2.0, gt=0)
    reply_ttl_seconds: int = _env("BERTH_REPLY_TTL_SECONDS", 604_800, ge=1)
    block_ms: int = Field(1_000, ge=1)
    """How long one XREADGROUP blocks (ms); not configurable from the environment."""

    @property
    def task_stream(self) -> str:
        """The LaneWorker's task stream (``transport.names``)."""
        return names.task_stream(self.namespace, self.laneworker)

    @property
    def dead_letter_stream(self) -> str:
        """The LaneWorker's dead-letter stream (``transport.names``)."""
        return names.dead_letter_stream(self.namespace, self.laneworker)

    def alive_key(self, consumer: str) -> str:
        """The liveness key of worker ``consumer`` (``transport.names``)."""
        return names.alive_key(self.namespace, self.laneworker, consumer)

    @classmethod
    def variables(cls) -> dict[str, str]:
        """Field name → the variable it is read from."""
        out: dict[str, str] = {}
        for name, field in cls.model_fields.items():
            if isinstance(field.validation_alias, AliasChoices):
                out[name] = str(field.validation_alias.choices[0])
        return out

    @classmethod
    def from_env(
        cls, env: Mapping[str, str] | None = None, argv: Sequence[str] | None = None
    ) -> WorkerSettings:
        """Read env (default ``os.environ``; empty values count as unset) and ``--flags``
        (``--concurrency 4``; flags win). Raises ``SystemExit`` with a message naming every
        missing or invalid variable."""
        env = os.environ if env is None else env
        variables = cls.variables()
        p = argparse.ArgumentParser(prog="berth-worker", description="Berth LaneWorker process")
        for name, var in variables.items():
            p.add_argument("--" + name.replace("_", "-"), dest=name, help=f"(env {var})")
        flags = vars(p.parse_args(argv))
        raw = {var: env[var] for var in variables.values() if env.get(var, "").strip()}
        raw |= {variables[name]: value for name, value in flags.items() if value is not None}
        try:
            settings = cls.model_validate(raw)
        except ValidationError as exc:
            problems = [f"{e['loc'][0] if e['loc'] else '?'}: {e['msg']}" for e in exc.errors()]
            p.error("invalid settings: " + "; ".join(problems))
        try:
            settings.check_usable()
        except ValueError as exc:
            p.error(str(exc))
        return settings

    def check_usable(self) -> None:
        """Raise ``ValueError`` if these settings cannot run a worker: a relative workspaces
        root, an unreadable or short master key, names Redis keys cannot be built from."""
        if not os.path.isabs(self.workspaces_root):
            raise ValueError("BERTH_WORKSPACES_ROOT must be an absolute path")
        read_key_file(self.master_key_file)  # a clear error now, not at the first task
        self.alive_key(self.pod_name)  # validates namespace, LaneWorker and pod names


class WorkerMetrics:
    """The ``berth_worker_*`` metrics, in their own registry. Labels: lane, outcome (fixed sets)."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry()
        self.tasks = Counter(
            "berth_worker_tasks",
            "Tasks finished by this worker, by lane and outcome.",
            ["lane", "outcome"],
            registry=self.registry,
        )
        self.duration = Histogram(
            "berth_worker_task_duration_seconds",
            "Time from a task's start on this worker to its reply, in seconds.",
            ["lane"],
            buckets=(0.01, 0.05, 0.1, 0.5, 1, 5, 15, 60, 300, 900, 3600),
            registry=self.registry,
        )
        self.rejected = Counter(
            "berth_worker_tasks_rejected",
            "Task entries dropped unrun and unanswered (forged, foreign, oversized, duplicate).",
            ["reason"],
            registry=self.registry,
        )
        self.undeliverable = Counter(
            "berth_worker_replies_undeliverable",
            "Replies that could not be written because the reply key is not a stream (kept on "
            "the dead-letter stream).",
            registry=self.registry,
        )
        self.busy = Gauge("berth_worker_busy", "Tasks running now.", registry=self.registry)
        self.capacity = Gauge(
            "berth_worker_capacity", "Tasks this worker runs at once.", registry=self.registry
        )

    def finished(self, lane: str, outcome: str, seconds: float | None = None) -> None:
        lane = lane if lane in LANES else "unknown"
        self.tasks.labels(lane=lane, outcome=outcome if outcome in OUTCOMES else "error").inc()
        if seconds is not None:
            self.duration.labels(lane=lane).observe(seconds)


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
        self._started_ms = _now_ms()

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
        """Run one task; every path ends with the entry acknowledged (or left for the reclaimer
        if Redis itself is gone)."""
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
        started_ms = _now_ms()
        admitted = await self._admit(entry_id, fields)
        if admitted is not None:
            task, ns, key = admitted
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
        kind = as_text(await self.redis.type(task.reply_to))  # type: ignore[no-untyped-call,unused-ignore]
        if kind not in ("stream", "none"):  # its reply could never be delivered: do not run it
            await self._reject(entry_id, fields, TaskRejected("reply_to", f"is a {kind}"))
            return None
        claim = names.task_claim_key(ns, task.session_uid, task.task_id)
        ttl = self.settings.reply_ttl_seconds
        if not await self.redis.set(claim, entry_id, nx=True, ex=ttl):
            await self._reject(entry_id, fields, TaskRejected("duplicate", f"task {task.task_id}"))
            return None
        return task, ns, key

    async def _execute(
        self, entry_id: str, task: TaskMessage, ns: str, key: bytes, started_ms: int
    ) -> None:
        """Run an admitted task in its workspace within its deadline and answer it once."""

        async def fail(error: str, outcome: str, seconds: float | None = None) -> None:
            message = _reply(task, self._me, started_ms, False, error=error)
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
        message = _reply(
            task, self._me, started_ms, True, result.output, result.exit_code, result.is_error
        )
        await self._answer(entry_id, task.reply_to, message, key)
        outcome = "tool_error" if result.is_error else "ok"
        self.metrics.finished(task.lane, outcome, time.monotonic() - t0)

    async def _answer(
        self, entry_id: str, reply_to: str, message: ReplyMessage, key: bytes
    ) -> None:
        """Reply (signed with the session's key) and acknowledge atomically (MULTI/EXEC under
        WATCH of the reply stream): a reply is never sent twice by this worker and an
        acknowledged task always has its reply. Redis does not roll a transaction back when one
        command fails, so a reply stream turned into another type would take the XACK but drop
        the reply; that case is seen before EXEC, counted in
        ``berth_worker_replies_undeliverable_total`` and the signed reply kept on the
        dead-letter stream instead."""
        fields = sign_fields(key, message.to_fields())
        async with self.redis.pipeline(transaction=True) as pipe:
            while True:
                try:
                    await pipe.watch(reply_to)
                    kind = as_text(await pipe.type(reply_to))
                    if kind not in ("stream", "none"):
                        await pipe.reset()
                        break
                    pipe.multi()
                    pipe.xadd(reply_to, fields)  # type: ignore[arg-type,unused-ignore]
                    pipe.expire(reply_to, self.settings.reply_ttl_seconds)
                    pipe.xack(self._stream, names.GROUP, entry_id)
                    await pipe.execute()
                    return
                except WatchError:
                    continue  # the stream changed between WATCH and EXEC: check again
        self.metrics.undeliverable.inc()
        await self._dead_letter(
            entry_id, fields, f"reply not delivered: {reply_to} is a {kind}, not a stream", {}
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
        ``key`` (an authenticated task that does not parse) also answer it with the reason."""
        raw = {as_text(k): as_text(v)[:4096] for k, v in dict(fields or {}).items()}
        log.warning("dead-lettering task entry %s: %s", entry_id, reason)
        async with self.redis.pipeline(transaction=True) as pipe:
            pipe.xadd(
                self.settings.dead_letter_stream,
                {
                    "entry_id": entry_id,
                    "reason": reason[:1000],
                    "worker": self._me,
                    "at_ms": str(_now_ms()),
                    "fields": json.dumps(raw)[:65536],
                },
                maxlen=DEAD_LETTER_MAXLEN,
                approximate=True,
            )
            task_id, reply_to = partial.get("task_id"), partial.get("reply_to", "")
            if key and task_id and reply_to.startswith(f"berth:{self.settings.namespace}:s:"):
                with contextlib.suppress(ValueError):
                    names.parse_reply_stream(reply_to)
                    failure = ReplyMessage(
                        task_id=task_id,
                        tool_call_id=partial.get("tool_call_id", ""),
                        success=False,
                        error=f"malformed task message: {reason}",
                        worker=self._me,
                        started_ms=_now_ms(),
                        ended_ms=_now_ms(),
                    )
                    signed = sign_fields(key, failure.to_fields())
                    pipe.xadd(reply_to, signed)  # type: ignore[arg-type,unused-ignore]
                    pipe.expire(reply_to, self.settings.reply_ttl_seconds)
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
            incarnation_ms = _now_ms() - self._started_ms
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
        now = _now_ms()
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


class MetricsServer(ThreadingHTTPServer):
    """prometheus-client's ``/metrics`` handler over a socket bound already (possibly long
    before: ``session_runtime.listen``), served from a daemon thread. A client that gave up
    while its request waited in the backlog (a readiness probe past its timeout) is not an
    error worth a traceback."""

    def __init__(self, sock: socket.socket, registry: CollectorRegistry) -> None:
        super().__init__(
            sock.getsockname()[:2], MetricsHandler.factory(registry), bind_and_activate=False
        )
        self.socket.close()
        self.socket = sock
        self.serving = False

    def handle_error(self, request: Any, client_address: Any) -> None:
        log.debug("metrics request from %s failed", client_address, exc_info=True)

    def start(self) -> None:
        """Serve from a daemon thread until :meth:`stop`."""
        self.serving = True
        threading.Thread(target=self.serve_forever, name="metrics", daemon=True).start()

    def stop(self) -> None:
        """Stop serving (when :meth:`start` was called) and close the socket."""
        if self.serving:
            self.shutdown()  # waits for serve_forever, which only a started server runs
        self.server_close()


async def serve(settings: WorkerSettings, listener: socket.socket | None = None) -> None:
    """Run a worker with signal handling and the metrics server until SIGTERM/SIGINT.
    ``listener``: the metrics socket, bound already (else bound here). It listens from the
    start, and is answered from the moment the worker joined its consumer group: the
    readiness probe's connection waits for that instead of being refused."""
    redis: Redis[Any] = Redis.from_url(settings.redis_url)
    metrics = WorkerMetrics()
    server: MetricsServer | None = None
    if settings.metrics_port > 0:
        server = MetricsServer(
            listener or listen.listen(settings.pod_ip, settings.metrics_port), metrics.registry
        )
    elif listener is not None:
        listener.close()
    worker = LaneWorker(settings, redis, metrics=metrics)
    loop = asyncio.get_running_loop()
    for sig in early_signals.STOP_SIGNALS:
        loop.add_signal_handler(sig, worker.stop)
    if early_signals.take() is not None:  # came while the worker started
        worker.stop()
    log.info(
        "serving %s as %s (concurrency %d, workspaces under %s)",
        settings.task_stream,
        settings.pod_name,
        settings.concurrency,
        settings.workspaces_root,
    )
    try:
        await worker.run(ready=server.start if server is not None else None)
    finally:
        client: Any = redis  # aclose() is newer than the redis stubs
        await client.aclose()
        if server is not None:
            server.stop()


def main(argv: Sequence[str] | None = None, listener: socket.socket | None = None) -> int:
    """Run a LaneWorker (``berth-worker``, via ``session_runtime.launch``); returns the exit
    code (0 after a clean stop). ``listener``: the metrics socket, bound before the imports."""
    logging.basicConfig(
        level=os.environ.get("BERTH_LOG_LEVEL", "INFO"),
        format="%(asctime)s %(levelname)s %(name)s %(message)s",
        stream=sys.stderr,
    )
    settings = WorkerSettings.from_env(argv=argv)
    asyncio.run(serve(settings, listener))
    return 0


if __name__ == "__main__":
    sys.exit(main())
