"""The session lane queue: a :class:`ToolExecutor` that schedules tool calls by lane.

Owned by ``session_runtime.lanes``. The Session builds one when ``SessionOptions.queue_config`` is
set (``LaneQueue(config, emit=..., runner=<direct executor>)``) and uses it as its tool executor;
the session pod builds one with a Redis transport and injects it (``executor=``).

Behaviour (A3S lane-queue contract, docs/architecture.md §10 "Lane queue"; docs/architecture.md §7):

- Lanes control 0 > query 1 > execute 2 > generate 3, each with its own concurrency; an optional
  queue-wide cap (``max_total_concurrency``) makes priority decide who gets a free slot.
  :func:`session_runtime.lanes.scheduling.pick_next` is the decision.
- :meth:`LaneQueue.execute`: consecutive query-lane calls of one turn run in parallel, every other
  call runs alone and in order (a read after a write in the same turn sees the write).
- Modes per lane, switchable at run time: ``internal`` (run through ``runner``), ``external``
  (publish an :class:`ExternalTask`, wait for ``complete_external_task`` or a transport reply, time
  out as a tool failure), ``hybrid`` (run here and still announce the task).
- Timeouts: internal commands use ``lane_timeouts[lane]``, else ``default_timeout_ms``, else none;
  external commands use the lane handler's ``timeout_ms``.
- Failures (runner raised, timeout, external ``success=false``) are retried with the configured
  policy on idempotent lanes only; when no retry is left the command is dead-lettered (if the DLQ
  is on) and the model sees the error. Every attempt passes the rate limiter.
- Events (through ``emit``): ``external_task_pending``, ``external_task_completed``,
  ``command_retry``, ``command_dead_lettered``, ``queue_alert``, ``queue_lane_pressure``,
  ``queue_lane_idle``.

Never raises for a tool's failure (the seam's contract); raises ``asyncio.CancelledError`` when
cancelled and whatever ``on_result`` raises (a journal write failure must stop the round).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import time
import uuid
from collections import deque
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from session_runtime.lanes.alerts import (
    AlertLevel,
    alert_level,
    alert_to_emit,
    idle_edge,
    pressure_edge,
)
from session_runtime.lanes.boost import effective_priority
from session_runtime.lanes.config import (
    LANE_PRIORITY,
    LANES,
    HandlerMode,
    LaneHandlerConfig,
    SessionQueueConfig,
)
from session_runtime.lanes.dlq import DeadLetter, DeadLetterQueue
from session_runtime.lanes.external import (
    ExternalReply,
    ExternalTask,
    ExternalTaskResult,
    ExternalTransport,
    completion_of,
)
from session_runtime.lanes.metrics import LaneMetrics
from session_runtime.lanes.ratelimit import RateLimiter
from session_runtime.lanes.retry import should_retry
from session_runtime.lanes.scheduling import Waiting, pick_next
from session_runtime.tools.base import (
    Lane,
    ResultCallback,
    ToolCall,
    ToolContext,
    ToolExecutor,
    ToolResult,
)

log = logging.getLogger(__name__)

#: Async callable taking one event dict (``{"type": ..., ...}``), e.g. the Session's hook bus.
Emit = Callable[[dict[str, Any]], Awaitable[None]]
#: Epoch milliseconds (the session's HostEnv clock).
Clock = Callable[[], int]
IdFactory = Callable[[], str]

EXTERNAL_FAILED = "External task failed"
#: Lookups of a reply delivered while the session was down, before giving it up (``recover``),
#: and the first pause between them in seconds (doubled each time: 0.1 + 0.2 + 0.4 + 0.8 s).
RECOVER_ATTEMPTS = 5
RECOVER_PAUSE_S = 0.1
#: Appended to an external task's timeout: a worker may have run it and its reply been lost
#: (Redis restarted, the reply stream dropped), so the model must not read it as "not run".
TIMEOUT_UNKNOWN = (
    "; a worker may have run it, so its side effects are unknown. Inspect the workspace before "
    "deciding whether to run it again."
)


def _wall_ms() -> int:
    return int(time.time() * 1000)


def _uuid_task_id() -> str:
    return f"task-{uuid.uuid4().hex}"


async def _discard(_: ToolResult) -> None:
    return None


@dataclass(slots=True)
class _Entry:
    """A command waiting for a slot."""

    waiting: Waiting
    grant: asyncio.Future[None]


@dataclass(slots=True)
class _Pending:
    """An external task waiting for its completion."""

    task: ExternalTask
    done: asyncio.Future[ExternalReply]


@dataclass(slots=True)
class _Attempt:
    """Outcome of one attempt: the result, and the error text if it was a (retryable) failure."""

    result: ToolResult
    failure: str | None = None
    reply: ExternalReply | None = None


@dataclass(slots=True)
class _LaneState:
    waiting: int = 0
    active: int = 0
    completed: int = 0
    failed: int = 0
    busy: bool = False
    pressure: bool = False


@dataclass(slots=True)
class _Signals:
    alert: AlertLevel | None = None
    lanes: dict[Lane, _LaneState] = field(
        default_factory=lambda: {lane: _LaneState() for lane in LANES}
    )


class LaneQueue:
    """Priority lanes with concurrency, modes, retries, DLQ, rate limit, boost and metrics.

    Constructor: ``LaneQueue(config, emit=None, runner=None, *, transport=None, clock=None,
    task_ids=None)``.

    - ``config``: :class:`SessionQueueConfig` (copied; ``set_lane_handler`` changes the copy).
    - ``emit``: async callable taking an event dict; None drops events.
    - ``runner``: the :class:`ToolExecutor` that runs internal commands (the direct executor).
    - ``transport``: an :class:`ExternalTransport` (Redis Streams in the session pod); external
      tasks are published on it and its replies complete them. Without one, external tasks wait
      for :meth:`complete_external_task`.
    - ``clock``: epoch-ms clock for deadlines, boost and rate limit (default: system clock).
    - ``task_ids``: task id generator (default ``task-<uuid4 hex>``).
    """

    def __init__(
        self,
        config: SessionQueueConfig | None = None,
        emit: Emit | None = None,
        runner: ToolExecutor | None = None,
        *,
        transport: ExternalTransport | None = None,
        clock: Clock | None = None,
        task_ids: IdFactory | None = None,
    ) -> None:
        base = config if config is not None else SessionQueueConfig()
        self._config = replace(
            base, lane_handlers=dict(base.lane_handlers), lane_timeouts=dict(base.lane_timeouts)
        )
        self._emit_fn = emit
        self._runner = runner
        self._transport = transport
        self._clock: Clock = clock or _wall_ms
        self._task_ids: IdFactory = task_ids or _uuid_task_id
        self._waiting: dict[Lane, deque[_Entry]] = {lane: deque() for lane in LANES}
        self._active: dict[Lane, int] = dict.fromkeys(LANES, 0)
        self._limits = {lane: self._config.max_concurrency(lane) for lane in LANES}
        self._seq = 0
        self._limiter = RateLimiter(self._config.rate_limit)
        self._wake: asyncio.TimerHandle | None = None
        self._external: dict[str, _Pending] = {}
        self._recovered: list[ExternalReply] = []
        self._dlq = DeadLetterQueue(self._config.effective_dlq_max_size())
        self._metrics = LaneMetrics(LANES)
        self._signals = _Signals()
        self._outbox: deque[dict[str, Any]] = deque()
        self._drain: asyncio.Task[None] | None = None
        self._transport_started = False
        self._loop: asyncio.AbstractEventLoop | None = None
        self._loop_thread = 0
        self._closed = False

    # ------------------------------------------------------------------ wiring

    @property
    def config(self) -> SessionQueueConfig:
        """The live configuration (handlers reflect ``set_lane_handler`` calls)."""
        return self._config

    @property
    def transport(self) -> ExternalTransport | None:
        """The external task transport given at construction, or None (external tasks then wait
        for :meth:`complete_external_task`)."""
        return self._transport

    def bind(self, *, emit: Emit | None = None, runner: ToolExecutor | None = None) -> None:
        """Attach the Session's event sink and direct executor to a queue built before it
        (the session pod builds the queue with its Redis transport, then the Session binds it).
        Arguments left None keep their current value."""
        if emit is not None:
            self._emit_fn = emit
        if runner is not None:
            self._runner = runner

    # ------------------------------------------------------------------ A3S API

    def set_lane_handler(self, lane: str, mode: str, timeout_ms: int | None = None) -> None:
        """Switch ``lane`` to ``mode`` (internal|external|hybrid) with a task timeout (ms; None
        keeps the lane's current timeout, 60000 by default).

        Takes effect for the next attempt of any command; commands already running finish as
        they started. Raises ``ConfigError`` for an unknown lane or mode.
        """
        if timeout_ms is None:
            current = self._config.lane_handlers.get(lane)  # type: ignore[call-overload]
            timeout_ms = (
                current.timeout_ms if current is not None else LaneHandlerConfig().timeout_ms
            )
        self._config.set_lane_handler(lane, mode, timeout_ms)

    def pending_external_tasks(self) -> list[dict[str, Any]]:
        """External tasks waiting for completion (A3S ``ExternalTask`` dicts + ``remaining_ms``)."""
        now = self._clock()
        return [p.task.to_dict(now) for p in self._external.values()]

    def complete_external_task(
        self,
        task_id: str,
        success: bool | ExternalTaskResult | dict[str, Any],
        result: dict[str, Any] | None = None,
        error: str | None = None,
    ) -> bool:
        """Complete a pending external task (A3S ``complete_external_task``).

        ``result`` is ``{"output": str, "exit_code": int}``; ``success=False`` is a failure
        (``error`` or "External task failed"). ``success`` may instead be one
        :class:`ExternalTaskResult` or its dict (see :func:`completion_of`; TypeError for an
        ambiguous call). Returns False for an unknown or finished task. Safe to call from
        another thread than the queue's event loop.
        """
        done = completion_of(success, result, error)
        pending = self._external.get(task_id)
        if pending is None:
            return False
        reply = ExternalReply(
            task_id=task_id,
            tool_call_id=pending.task.tool_call_id,
            success=done.success,
            result=dict(done.result or {}),
            error=done.error,
        )
        return self._resolve(pending, reply)

    def queue_stats(self) -> dict[str, Any]:
        """``{total_pending, total_active, external_pending, lanes: {lane: {pending, active,
        max_concurrency, handler_mode, completed, failed}}}`` (A3S SessionQueueStats)."""
        lanes: dict[str, dict[str, Any]] = {}
        for lane in LANES:
            state = self._signals.lanes[lane]
            lanes[lane] = {
                "pending": self._pending_count(lane),
                "active": self._active[lane],
                "max_concurrency": self._config.max_concurrency(lane),
                "handler_mode": self._config.handler(lane).mode,
                "completed": state.completed,
                "failed": state.failed,
            }
        return {
            "total_pending": self._total_waiting(),
            "total_active": sum(self._active.values()),
            "external_pending": len(self._external),
            "lanes": lanes,
        }

    def queue_metrics(self) -> dict[str, Any] | None:
        """Per-lane counters, gauges and latency percentiles (ms); None when metrics are off."""
        if not self._config.enable_metrics:
            return None
        gauges: dict[Lane, dict[str, int]] = {
            lane: {
                "pending": self._pending_count(lane),
                "active": self._active[lane],
                "external_pending": sum(1 for p in self._external.values() if p.task.lane == lane),
            }
            for lane in LANES
        }
        snap = self._metrics.snapshot(gauges)
        snap["dead_letters"] = len(self._dlq)
        return snap

    def dead_letters(self) -> list[dict[str, Any]]:
        """Dead-lettered commands, oldest first (empty when the DLQ is off)."""
        return self._dlq.entries()

    # ------------------------------------------------------------------ ToolExecutor

    async def execute(
        self, calls: Sequence[ToolCall], ctx: ToolContext, on_result: ResultCallback
    ) -> list[ToolResult]:
        """Run one turn's calls: runs of consecutive query-lane calls in parallel, others alone and
        in order. ``on_result`` is awaited as each result arrives. Results in the order of calls."""
        await self._settle_recovered()
        results: list[ToolResult | None] = [None] * len(calls)
        index = 0
        while index < len(calls):
            if calls[index].lane == "query":
                end = index
                while end < len(calls) and calls[end].lane == "query":
                    end += 1
                group = range(index, end)
                done = await asyncio.gather(
                    *(self._run_one(calls[i], ctx, on_result) for i in group)
                )
                for i, result in zip(group, done, strict=True):
                    results[i] = result
                index = end
            else:
                results[index] = await self._run_one(calls[index], ctx, on_result)
                index += 1
        return [r for r in results if r is not None]

    async def recover(self, call: ToolCall, ctx: ToolContext) -> ToolResult | None:
        """A result a worker delivered for ``call`` while this session was not running, or None
        (looked up by tool call id on the transport's reply stream).

        A failing lookup (Redis restarting) is retried :data:`RECOVER_ATTEMPTS` times with a
        growing pause; if the transport stays unreachable the result is None, so the resume
        reports the call as interrupted (side effects unknown) instead of failing as a whole.
        """
        if self._transport is None:
            return None
        reply = None
        for attempt in range(RECOVER_ATTEMPTS):
            try:
                reply = await self._transport.find_reply(call.id)
                break
            except Exception:
                log.warning(
                    "looking up a reply for %s failed (attempt %d of %d)",
                    call.id,
                    attempt + 1,
                    RECOVER_ATTEMPTS,
                    exc_info=True,
                )
                if attempt + 1 < RECOVER_ATTEMPTS:
                    await asyncio.sleep(RECOVER_PAUSE_S * 2**attempt)
        if reply is None:
            return None
        # Dropped from the transport at the next execute(): by then the loop has journaled it.
        self._recovered.append(reply)
        return self._reply_to_result(call, reply, None).result

    async def _settle_recovered(self) -> None:
        while self._recovered and self._transport is not None:
            reply = self._recovered.pop()
            try:
                await self._transport.settle(reply)
            except Exception:  # a leftover reply only costs memory until the stream expires
                log.warning("could not settle recovered reply %s", reply.task_id, exc_info=True)

    async def submit(
        self, call: ToolCall, ctx: ToolContext, lane: Lane | None = None
    ) -> ToolResult:
        """Run one command through its lane (``call.lane`` unless ``lane`` is given) with retries,
        DLQ and all queue features; returns the result the model will see."""
        result, _ = await self._submit(call, ctx, lane or call.lane)
        return result

    async def aclose(self) -> None:
        """Same as :meth:`close` (the Session calls ``aclose`` on its executor)."""
        await self.close()

    async def close(self) -> None:
        """Fail pending external tasks, stop the transport and flush events. Idempotent."""
        if self._closed:
            return
        self._closed = True
        for pending in list(self._external.values()):
            self._resolve(
                pending,
                ExternalReply(
                    pending.task.task_id,
                    pending.task.tool_call_id,
                    success=False,
                    error="lane queue closed",
                ),
            )
        if self._wake is not None:
            self._wake.cancel()
        if self._transport is not None and self._transport_started:
            await self._transport.close()
        if self._drain is not None:
            with contextlib.suppress(Exception):
                await self._drain

    # ------------------------------------------------------------------ command life cycle

    async def _run_one(
        self, call: ToolCall, ctx: ToolContext, on_result: ResultCallback
    ) -> ToolResult:
        result, reply = await self._submit(call, ctx, call.lane)
        await on_result(result)
        if reply is not None and self._transport is not None:
            # Journaled: the reply stream entry is no longer needed for recovery.
            try:
                await self._transport.settle(reply)
            except Exception:  # a leftover reply is harmless; recovery prefers the journal
                log.warning("could not settle reply of task %s", reply.task_id, exc_info=True)
        return result

    async def _submit(
        self, call: ToolCall, ctx: ToolContext, lane: Lane
    ) -> tuple[ToolResult, ExternalReply | None]:
        if self._loop is None:
            self._loop = asyncio.get_running_loop()
            self._loop_thread = threading.get_ident()
        self._metrics.inc(lane, "submitted")
        self._seq += 1
        waiting = Waiting(lane=lane, seq=self._seq, submitted_ms=self._clock())
        attempt = 0
        while True:
            attempt += 1
            await self._acquire(waiting)
            started = time.monotonic()
            try:
                outcome = await self._attempt(call, ctx, lane)
            finally:
                self._release(lane)
                self._metrics.observe_run(lane, (time.monotonic() - started) * 1000)
            state = self._signals.lanes[lane]
            if outcome.failure is None:
                self._metrics.inc(lane, "completed")
                state.completed += 1
                return outcome.result, outcome.reply
            self._metrics.inc(lane, "failed")
            delay = should_retry(self._config.retry_policy, lane, self._config.retry_lanes, attempt)
            if delay is None:
                state.failed += 1
                self._dead_letter(call, lane, outcome.failure, attempt)
                return outcome.result, outcome.reply
            self._metrics.inc(lane, "retried")
            self._post(
                {
                    "type": "command_retry",
                    "command_id": call.id,
                    "command_type": call.name,
                    "lane": lane,
                    "attempt": attempt,
                    "delay_ms": delay,
                    "error": outcome.failure,
                }
            )
            await asyncio.sleep(delay / 1000)
            # A retry re-enters its lane at the back but keeps its submission time, so its
            # priority boost keeps growing from the first submission.
            self._seq += 1
            waiting = replace(waiting, seq=self._seq)

    def _dead_letter(self, call: ToolCall, lane: Lane, error: str, attempts: int) -> None:
        if not self._config.enable_dlq:
            return
        entry = DeadLetter(call.id, call.name, lane, error, attempts, self._clock())
        self._dlq.push(entry)
        self._metrics.inc(lane, "dead_lettered")
        self._post({"type": "command_dead_lettered", **entry.to_dict()})

    # ------------------------------------------------------------------ slots

    async def _acquire(self, waiting: Waiting) -> None:
        lane = waiting.lane
        cap = self._config.max_total_concurrency
        if (
            not self._waiting[lane]
            and self._active[lane] < self._limits[lane]
            and (cap is None or sum(self._active.values()) < cap)
            and not self._limiter.limited
            and not any(self._waiting.values())
        ):
            # Fast path: nothing waits anywhere and the lane has a free slot, so pick_next
            # would choose this command; skip the future and the scheduler round.
            self._active[lane] += 1
            self._metrics.observe_wait(lane, 0.0)
            self._update_signals()
            return
        grant: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        entry = _Entry(waiting, grant)
        self._waiting[waiting.lane].append(entry)
        self._pump()
        try:
            await grant
        except asyncio.CancelledError:
            if grant.done() and not grant.cancelled():
                self._release(waiting.lane)  # granted, then cancelled before running
            else:
                with contextlib.suppress(ValueError):
                    self._waiting[waiting.lane].remove(entry)
                self._pump()
            raise

    def _release(self, lane: Lane) -> None:
        self._active[lane] -= 1
        self._pump()

    def _total_waiting(self) -> int:
        return sum(len(q) for q in self._waiting.values())

    def _pump(self) -> None:
        """Start every command that may start now (scheduling decision + rate limit).

        Lanes are FIFOs, so only each lane's head competes (O(lanes) per decision): within a
        lane, the head has the highest priority (same base, longest wait, most boost).
        """
        cfg = self._config
        limits = self._limits
        while True:
            heads = [q[0] for q in self._waiting.values() if q]
            if not heads:
                break
            now = self._clock()
            index = pick_next(
                [e.waiting for e in heads],
                self._active,
                limits,
                now,
                cfg.priority_boost,
                cfg.max_total_concurrency,
            )
            if index is None:
                break
            lane = heads[index].waiting.lane
            if self._limiter.limited:
                wait = self._limiter.wait_ms(now)
                if wait > 0:
                    self._metrics.inc(lane, "rate_limited")
                    self._schedule_wake(wait)
                    break
                self._limiter.record(now)
            entry = self._waiting[lane].popleft()
            self._active[lane] += 1
            waited = now - entry.waiting.submitted_ms
            self._metrics.observe_wait(lane, float(waited))
            base = LANE_PRIORITY[lane]
            if effective_priority(base, cfg.priority_boost, waited) < base:
                self._metrics.inc(lane, "boosted")
            if not entry.grant.done():
                entry.grant.set_result(None)
        self._update_signals()

    def _schedule_wake(self, wait_ms: int) -> None:
        if self._wake is not None and not self._wake.cancelled():
            return
        loop = asyncio.get_running_loop()

        def wake() -> None:
            self._wake = None
            self._pump()

        self._wake = loop.call_later(wait_ms / 1000, wake)

    def _pending_count(self, lane: Lane) -> int:
        return len(self._waiting[lane])

    # ------------------------------------------------------------------ attempts

    async def _attempt(self, call: ToolCall, ctx: ToolContext, lane: Lane) -> _Attempt:
        handler = self._config.handler(lane)
        mode: HandlerMode = handler.mode
        if mode == "external":
            return await self._attempt_external(call, ctx, lane, handler.timeout_ms)
        if mode == "hybrid":
            task = self._new_task(call, ctx, lane, handler.timeout_ms)
            self._post(self._pending_event(task))
            outcome = await self._attempt_internal(call, ctx, lane)
            self._post(
                {
                    "type": "external_task_completed",
                    "task_id": task.task_id,
                    "session_id": task.session_id,
                    "success": outcome.failure is None,
                }
            )
            return outcome
        return await self._attempt_internal(call, ctx, lane)

    def _internal_timeout_ms(self, lane: Lane) -> int | None:
        return self._config.lane_timeouts.get(lane, self._config.default_timeout_ms)

    async def _attempt_internal(self, call: ToolCall, ctx: ToolContext, lane: Lane) -> _Attempt:
        if self._runner is None:
            return self._failure(call, f"no internal runner for the {lane} lane")
        timeout_ms = self._internal_timeout_ms(lane)
        try:
            async with asyncio.timeout(timeout_ms / 1000 if timeout_ms is not None else None):
                results = await self._runner.execute([call], ctx, _discard)
        except TimeoutError:
            self._metrics.inc(lane, "timed_out")
            return self._failure(call, f"Tool '{call.name}' timed out after {timeout_ms} ms")
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            log.warning("runner failed on %s (%s)", call.name, call.id, exc_info=True)
            return self._failure(call, f"{type(exc).__name__}: {exc}")
        if len(results) != 1:
            return self._failure(call, f"runner returned {len(results)} results for one call")
        return _Attempt(results[0])

    def _new_task(
        self, call: ToolCall, ctx: ToolContext, lane: Lane, timeout_ms: int
    ) -> ExternalTask:
        return ExternalTask(
            task_id=self._task_ids(),
            session_id=ctx.session_id,
            lane=lane,
            command_type=call.name,
            payload=dict(call.arguments),
            timeout_ms=timeout_ms,
            created_ms=self._clock(),
            tool_call_id=call.id,
        )

    @staticmethod
    def _pending_event(task: ExternalTask) -> dict[str, Any]:
        return {
            "type": "external_task_pending",
            "task_id": task.task_id,
            "session_id": task.session_id,
            "lane": task.lane,
            "command_type": task.command_type,
            "payload": task.payload,
            "timeout_ms": task.timeout_ms,
        }

    async def _attempt_external(
        self, call: ToolCall, ctx: ToolContext, lane: Lane, timeout_ms: int
    ) -> _Attempt:
        task = self._new_task(call, ctx, lane, timeout_ms)
        done: asyncio.Future[ExternalReply] = asyncio.get_running_loop().create_future()
        self._external[task.task_id] = _Pending(task, done)
        self._post(self._pending_event(task))
        grace = 0
        try:
            if self._transport is not None:
                grace = self._transport.reply_grace_ms
                if not self._transport_started:
                    self._transport_started = True
                    await self._transport.start(self._deliver)
                await self._transport.publish(task, ctx)
            try:
                reply = await asyncio.wait_for(asyncio.shield(done), (timeout_ms + grace) / 1000)
            except TimeoutError:
                self._metrics.inc(lane, "timed_out")
                reply = ExternalReply(
                    task.task_id,
                    call.id,
                    success=False,
                    error=f"External task timed out after {timeout_ms} ms{TIMEOUT_UNKNOWN}",
                )
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            log.warning("could not publish task %s", task.task_id, exc_info=True)
            reply = ExternalReply(
                task.task_id, call.id, success=False, error=f"could not publish task: {exc}"
            )
        finally:
            self._external.pop(task.task_id, None)
        self._post(
            {
                "type": "external_task_completed",
                "task_id": task.task_id,
                "session_id": task.session_id,
                "success": reply.success,
            }
        )
        return self._reply_to_result(call, reply, task)

    async def _deliver(self, reply: ExternalReply) -> None:
        """Transport sink: complete the pending task the reply answers (late replies are ignored;
        the transport keeps them for :meth:`recover`)."""
        pending = self._external.get(reply.task_id)
        if pending is not None:
            self._resolve(pending, reply)

    def _resolve(self, pending: _Pending, reply: ExternalReply) -> bool:
        loop = self._loop
        if loop is not None and threading.get_ident() != self._loop_thread:
            loop.call_soon_threadsafe(self._resolve, pending, reply)
            return True
        if pending.done.done():
            return False
        pending.done.set_result(reply)
        return True

    def _reply_to_result(
        self, call: ToolCall, reply: ExternalReply, task: ExternalTask | None
    ) -> _Attempt:
        meta: dict[str, Any] = {
            "task_id": reply.task_id,
            "worker": reply.worker,
            "started_ms": reply.started_ms,
            "ended_ms": reply.ended_ms,
            "transport_ref": reply.ref,
        }
        meta = {k: v for k, v in meta.items() if v is not None}
        if not reply.success:
            failed = self._failure(call, reply.error or EXTERNAL_FAILED, meta)
            failed.reply = reply
            return failed
        output = reply.result.get("output", "")
        exit_code = reply.result.get("exit_code", 0)
        exit_code = exit_code if isinstance(exit_code, int) else 1
        is_error = bool(reply.result.get("is_error", exit_code != 0))
        result = ToolResult(
            tool_call_id=call.id,
            name=call.name,
            output=output if isinstance(output, str) else str(output),
            exit_code=exit_code,
            is_error=is_error,
            metadata=meta,
        )
        return _Attempt(result, reply=reply)

    @staticmethod
    def _failure(call: ToolCall, error: str, meta: dict[str, Any] | None = None) -> _Attempt:
        result = ToolResult(
            tool_call_id=call.id,
            name=call.name,
            output=error,
            exit_code=1,
            is_error=True,
            metadata=dict(meta or {}),
        )
        return _Attempt(result, failure=error)

    # ------------------------------------------------------------------ events

    def _update_signals(self) -> None:
        cfg = self._config
        if not cfg.enable_alerts and cfg.pressure_threshold is None:
            return
        if cfg.enable_alerts:
            depth = self._total_waiting()
            level = alert_level(depth, cfg.alert_warning_depth, cfg.alert_critical_depth)
            fire = alert_to_emit(self._signals.alert, level)
            self._signals.alert = level
            if fire is not None:
                self._post(
                    {
                        "type": "queue_alert",
                        "level": fire,
                        "alert_type": "queue_depth",
                        "message": f"{depth} commands pending in the lane queue",
                    }
                )
        for lane in LANES:
            state = self._signals.lanes[lane]
            pending = self._pending_count(lane)
            active = self._active[lane]
            edge = pressure_edge(state.pressure, pending, cfg.pressure_threshold)
            if edge is not None:
                state.pressure = edge
                if edge:
                    self._post(
                        {
                            "type": "queue_lane_pressure",
                            "lane": lane,
                            "pending": pending,
                            "threshold": cfg.pressure_threshold,
                        }
                    )
            if cfg.pressure_threshold is not None and idle_edge(state.busy, pending, active):
                self._post({"type": "queue_lane_idle", "lane": lane})
            state.busy = pending + active > 0

    def _post(self, event: dict[str, Any]) -> None:
        """Queue ``event`` for ``emit``; a single drain task keeps events in order."""
        if self._emit_fn is None:
            return
        self._outbox.append(event)
        if self._drain is None or self._drain.done():
            self._drain = asyncio.get_running_loop().create_task(self._drain_outbox())

    async def _drain_outbox(self) -> None:
        while self._outbox:
            event = self._outbox.popleft()
            emit = self._emit_fn
            if emit is None:
                continue
            try:
                await emit(event)
            except Exception:
                log.warning("event sink failed on %s", event.get("type"), exc_info=True)


__all__ = ["EXTERNAL_FAILED", "Clock", "Emit", "LaneQueue"]
