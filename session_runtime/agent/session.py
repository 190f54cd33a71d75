"""``Session``: one workspace, one conversation, its runs, events, hooks and lifecycle.

Owned by ``session_runtime.agent``; created by ``Agent.session``/``Agent.resume_session`` and
driven by callers (the session pod's server, tests, the demo). Implements the A3S Python SDK
session surface (RUNTIME-CONTRACT "Public API"): synchronous methods run on the agent's background
loop; each has an ``*_async`` twin that runs on the caller's loop.

Seams used here: ``SessionOptions.session_store`` (``store.base.SessionStore``), a
``ToolExecutor`` (direct, a ``LaneQueue`` built from ``queue_config``, or one injected by the
host) and the event emitter handed to the lane queue.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import itertools
import logging
import os
import queue
import threading
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine, Iterator
from typing import TYPE_CHECKING, Any, TypeVar

from session_runtime.agent.budget import GuardCaller
from session_runtime.agent.hooks import HookHandler, HookRegistry
from session_runtime.agent.loop import (
    AgentLoop,
    Passivation,
    PassivationStop,
    RunControl,
    RunState,
    assistant_message,
    tool_message,
)
from session_runtime.agent.options import SessionOptions, SessionRetentionLimits
from session_runtime.agent.queue_api import QueueApi
from session_runtime.agent.results import AgentResult, BtwResult
from session_runtime.agent.resume import (
    ensure_loadable,
    ensure_session,
    last_user_prompt,
    pending_calls,
    settle_pending,
)
from session_runtime.agent.runs import RunLog, RunRecord
from session_runtime.agent.tasks import wait_task
from session_runtime.errors import (
    ResumeError,
    RunCancelledError,
    RunPassivatedError,
    SessionBusyError,
    SessionClosedError,
)
from session_runtime.events import IDENTITY_FIELDS, Event, validate_host_event
from session_runtime.hostenv import HostEnv
from session_runtime.llm.client import LlmClient
from session_runtime.store.base import PendingRound
from session_runtime.tools.base import ToolContext, ToolExecutor
from session_runtime.tools.executor import DirectExecutor
from session_runtime.tools.schemas import tool_definitions

if TYPE_CHECKING:
    from session_runtime.agent.bridge import LoopThread

log = logging.getLogger(__name__)
T = TypeVar("T")

DEFAULT_SYSTEM_PROMPT = (
    "You are a coding agent working in a workspace directory. Use the tools to read, search, "
    "edit and run code there. Paths are relative to the workspace. Be concise."
)
_END = object()
_ZERO_USAGE = {"prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0}


class Session(QueueApi):
    """An agent session bound to one workspace (A3S ``Session``). Create it with
    ``Agent.session``; see the module docstring for threading rules.

    Errors: ``SessionClosedError`` after ``close()``; ``SessionBusyError`` for a second operation
    while one runs; run failures raise the errors of ``session_runtime.errors``.
    """

    def __init__(
        self,
        *,
        session_id: str,
        workspace: str,
        options: SessionOptions,
        llm: LlmClient,
        bridge: LoopThread,
        executor: ToolExecutor | None = None,
        restored: dict[str, Any] | None = None,
        on_close: Callable[[str], None] | None = None,
        owns_llm: bool = False,
    ) -> None:
        options.validate()
        self._owns_llm = owns_llm
        self._id = session_id
        self._workspace = os.path.realpath(workspace)
        if not os.path.isdir(self._workspace):
            raise ValueError(f"workspace {workspace!r} is not a directory")
        self.options = options
        self._env = options.host_env or HostEnv()
        self._llm = llm
        self._bridge = bridge
        self._on_close = on_close
        self._runs = RunLog(SessionRetentionLimits.from_value(options.retention_limits))
        self._hooks = HookRegistry()
        self._subscribers: list[Callable[[Event], None]] = []
        self._seq = itertools.count(1)
        self._lock = threading.Lock()
        self._closed = False
        self._active = False
        self._task: asyncio.Task[Any] | None = None
        self._task_loop: asyncio.AbstractEventLoop | None = None
        self._run_state: RunState | None = None
        self._control: RunControl | None = None
        self._cancel_reason: str | None = None
        self._passivation_result: dict[str, Any] | None = None
        self._passivating = False
        self._last_error: str | None = None
        self._last_checkpoint: dict[str, Any] | None = None
        self._usage = dict(_ZERO_USAGE)
        self._tool_calls_count = 0
        self._turn = 0
        self._guard: GuardCaller | None = None
        #: Usage and tool calls the running run started with (carried forward on resume).
        self._carried: tuple[dict[str, int], int] = (dict(_ZERO_USAGE), 0)
        if options.budget_guard is not None:
            self.set_budget_guard(options.budget_guard)
        self._direct = DirectExecutor()
        self._executor: ToolExecutor = executor or self._build_executor()
        bind = getattr(executor, "bind", None)
        if callable(bind):
            # An injected lane queue (built by the session pod with its Redis transport before
            # the session existed) gets the session's event sink now.
            bind(emit=self._emit_event)
        system = options.system_prompt or DEFAULT_SYSTEM_PROMPT
        self._messages: list[dict[str, Any]] = [{"role": "system", "content": system}]
        if restored:
            self._restore(restored)
        self._loop = AgentLoop(
            session_id=session_id,
            workspace=self._workspace,
            options=options,
            llm=llm,
            executor=lambda: self._executor,
            tools=tool_definitions(),
            emit=self._emit,
            gate=self._gate,
            guard=lambda: self._guard,
            host_env=self._env,
        )

    # ---- construction helpers ----------------------------------------------------------

    def _build_executor(self) -> ToolExecutor:
        if self.options.queue_config is None:
            return self._direct
        from session_runtime.lanes import LaneQueue  # lazy: lanes are optional

        env = self._env
        lane_queue: ToolExecutor = LaneQueue(
            self.options.queue_config,
            emit=self._emit_event,
            runner=self._direct,
            clock=env.now_ms,  # ids and time through HostEnv (replay)
            task_ids=lambda: f"task-{env.new_id()}",
        )
        return lane_queue

    def _restore(self, data: dict[str, Any]) -> None:
        messages = data.get("messages")
        if isinstance(messages, list) and messages:
            self._messages = [dict(m) for m in messages]
        self._runs.load(list(data.get("runs") or []))
        self._usage = {**_ZERO_USAGE, **(data.get("usage") or {})}
        self._tool_calls_count = int(data.get("tool_calls_count", 0))
        self._turn = int(data.get("turn", 0))
        self._last_checkpoint = data.get("last_checkpoint")

    # ---- identity ----------------------------------------------------------------------

    @property
    def session_id(self) -> str:
        """The session id."""
        return self._id

    @property
    def workspace(self) -> str:
        """The absolute, resolved workspace directory."""
        return self._workspace

    @property
    def tenant_id(self) -> str | None:
        """Identity label (opaque; propagated to events, hooks and the store)."""
        return self.options.tenant_id

    @property
    def principal(self) -> str | None:
        """Identity label: the user or service that triggered the session."""
        return self.options.principal

    @property
    def agent_template_id(self) -> str | None:
        """Identity label: the agent template the session came from."""
        return self.options.agent_template_id

    @property
    def correlation_id(self) -> str | None:
        """Identity label: distributed-trace correlation id."""
        return self.options.correlation_id

    def identity(self) -> dict[str, str | None]:
        """The four identity labels."""
        return self.options.identity()

    def history(self) -> list[dict[str, Any]]:
        """A copy of the conversation (OpenAI chat format, system message first)."""
        return [dict(m) for m in self._messages]

    # ---- events and hooks --------------------------------------------------------------

    def _stamp(self, event: Event) -> Event:
        seq = next(self._seq)  # atomic: host events may come from another thread
        state = self._run_state
        event["session_id"] = self._id
        event.setdefault("run_id", state.run_id if state is not None and self._active else None)
        for key in IDENTITY_FIELDS:
            event[key] = getattr(self.options, key)
        event["seq"] = seq
        event["ts_ms"] = self._env.now_ms()
        return event

    async def _deliver(self, event: Event) -> str | None:
        self._runs.record_event(event)
        for sub in list(self._subscribers):
            sub(event)
        return await self._hooks.fire(event)

    async def _emit(self, etype: str, **fields: Any) -> Event:
        event = self._stamp({"type": etype, **fields})
        await self._deliver(event)
        return event

    async def _gate(self, etype: str, **fields: Any) -> str | None:
        return await self._deliver(self._stamp({"type": etype, **fields}))

    async def _emit_event(self, event: Event) -> None:
        """Emitter handed to the lane queue: stamps and delivers an event dict."""
        await self._deliver(self._stamp(dict(event)))

    def register_hook(
        self,
        hook_id: str,
        event_type: str,
        handler: HookHandler,
        matcher: dict[str, str] | None = None,
    ) -> None:
        """Register ``handler(event)`` for ``event_type`` (or ``"*"``); see ``agent.hooks``.

        For ``pre_tool_use`` a handler returning ``{"action": "block", "reason": ...}`` stops the
        call; the model gets the reason as an error result.
        """
        self._hooks.register(hook_id, event_type, handler, matcher)

    def unregister_hook(self, hook_id: str) -> bool:
        """Remove a hook; True if it was registered."""
        return self._hooks.unregister(hook_id)

    async def emit_host_event_async(self, event: Event) -> Event:
        """Inject a cluster event (``budget_threshold_hit``, ``passivation_requested``,
        ``peer_invocation``) so stream consumers and hooks observe it. Raises ValueError for other
        types or missing fields. Returns the stamped event."""
        validate_host_event(event)
        stamped = self._stamp(dict(event))
        await self._deliver(stamped)
        return stamped

    def emit_host_event(self, event: Event) -> Event:
        """Synchronous twin of :meth:`emit_host_event_async`."""
        return self._sync(self.emit_host_event_async(event))

    # ---- budget ------------------------------------------------------------------------

    def set_budget_guard(self, guard: Any) -> None:
        """Install (or clear with None) the budget guard (A3S ``set_budget_guard``)."""
        self._guard = (
            None
            if guard is None
            else GuardCaller(
                guard, self.options.budget_failure_mode, self.options.budget_guard_timeout_ms
            )
        )

    # ---- operation bookkeeping ---------------------------------------------------------

    def _sync(self, coro: Coroutine[Any, Any, T]) -> T:
        return self._bridge.run(coro)

    def _begin_operation(self) -> None:
        with self._lock:
            if self._closed:
                raise SessionClosedError(self._id)
            if self._active:
                raise SessionBusyError(self._id)
            self._active = True

    def _end_operation(self) -> None:
        with self._lock:
            self._active = False
            self._task = None
            self._task_loop = None
            self._control = None
            self._cancel_reason = None

    def is_closed(self) -> bool:
        """True after ``close()``."""
        return self._closed

    # ---- send / stream -----------------------------------------------------------------

    async def send_async(self, prompt: str) -> AgentResult:
        """Run the agent on ``prompt`` until it answers; returns an AgentResult.

        Raises SessionClosedError, SessionBusyError, BudgetExhaustedError, CircuitOpenError,
        LlmError, MaxToolRoundsError, ParseRetriesExceededError, RunCancelledError,
        RunPassivatedError, FencedError.
        """
        self._begin_operation()
        return await self._run_started(self._start_prompt_run(prompt))

    def send(self, prompt: str) -> AgentResult:
        """Synchronous twin of :meth:`send_async`."""
        self._begin_operation()
        return self._sync(self._run_started(self._start_prompt_run(prompt)))

    async def stream_async(self, prompt: str) -> AsyncIterator[Event]:
        """Run like ``send`` and yield every event of the session while the run lasts, in order.
        After the last event, the run's error (if any) is raised."""
        self._begin_operation()
        events: asyncio.Queue[Any] = asyncio.Queue()
        self._subscribers.append(events.put_nowait)
        task = asyncio.ensure_future(self._run_started(self._start_prompt_run(prompt)))
        task.add_done_callback(lambda _t: events.put_nowait(_END))
        try:
            while True:
                item = await events.get()
                if item is _END:
                    break
                yield item
            task.result()
        finally:
            self._subscribers.remove(events.put_nowait)
            if not task.done():
                task.cancel()

    def stream(self, prompt: str) -> Iterator[Event]:
        """Synchronous twin of :meth:`stream_async` (a blocking iterator)."""
        self._begin_operation()
        events: queue.Queue[Any] = queue.Queue()
        self._subscribers.append(events.put)
        try:
            future = self._bridge.submit(self._run_started(self._start_prompt_run(prompt)))
        except BaseException:
            self._subscribers.remove(events.put)
            self._end_operation()
            raise
        future.add_done_callback(lambda _f: events.put(_END))
        try:
            while True:
                item = events.get()
                if item is _END:
                    break
                yield item
            future.result()
        finally:
            self._subscribers.remove(events.put)
            if not future.done():
                future.cancel()  # the consumer stopped early: cancel the run

    def _fresh_run_id(self) -> str:
        """A run id from HostEnv that no run of this session has used, in memory or in the store.

        A resumed process starts a new (replay) id generator, which would otherwise hand out
        ``run-r-0`` again and overwrite the run being resumed; the A3S contract keeps it intact.
        """
        store = self.options.session_store
        while True:
            run_id = self._env.new_run_id()
            if self._runs.get(run_id) is not None:
                continue
            if store is not None and store.load_checkpoint(self._id, run_id) is not None:
                continue
            return run_id

    def _start_prompt_run(self, prompt: str) -> Callable[[], Awaitable[tuple[RunRecord, RunState]]]:
        async def start() -> tuple[RunRecord, RunState]:
            run_id = self._fresh_run_id()
            record = RunRecord(id=run_id, prompt=prompt, started_ms=self._env.now_ms())
            self._messages.append({"role": "user", "content": prompt})
            state = RunState(
                run_id=run_id, messages=self._messages, turn=self._turn, start_turn=self._turn
            )
            return record, state

        return start

    async def _run_started(
        self,
        start: Callable[[], Awaitable[tuple[RunRecord, RunState]]],
        prelude: Callable[[RunState, RunControl], Awaitable[None]] | None = None,
        initial_commit: bool = True,
    ) -> AgentResult:
        """Drive a run whose operation slot is already taken; always releases it. The run gets a
        task of its own, so cancel_run/close/passivate act on the run, not on the caller."""
        try:
            record, state = await start()
            return await asyncio.ensure_future(self._drive(record, state, prelude, initial_commit))
        finally:
            self._end_operation()

    async def _drive(
        self,
        record: RunRecord,
        state: RunState,
        prelude: Callable[[RunState, RunControl], Awaitable[None]] | None,
        initial_commit: bool,
    ) -> AgentResult:
        control = RunControl()
        carried = dict(state.usage)
        carried_calls = state.tool_calls_count
        self._carried = (carried, carried_calls)
        with self._lock:
            self._task = asyncio.current_task()
            self._task_loop = asyncio.get_running_loop()
            self._control = control
            self._run_state = state
            self._passivation_result = None
        self._runs.add(record)
        self._save_quietly()
        try:
            if initial_commit:
                await self._loop.commit(state)
                self._last_checkpoint = state.last_checkpoint
            if prelude is not None:
                await prelude(state, control)
            text = await self._loop.run(state, control)
        except PassivationStop:
            self._finish(record, state, carried, carried_calls, "passivated")
            self._passivation_result = {
                "outcome": "passivated",
                "run_id": record.id,
                "turn": state.turn,
            }
            raise RunPassivatedError(record.id, state.turn, "passivated") from None
        except asyncio.CancelledError:
            if control.passivation is not None:
                # Cut mid-round: the last committed round is what stands.
                durable = state.committed[0] if state.committed is not None else state.start_turn
                self._finish(record, state, carried, carried_calls, "passivated", turn=durable)
                self._passivation_result = {
                    "outcome": "timeout",
                    "run_id": record.id,
                    "turn": durable,
                }
                raise RunPassivatedError(record.id, durable, "timeout") from None
            self._finish(
                record,
                state,
                carried,
                carried_calls,
                "cancelled",
                error=f"cancelled ({self._cancel_reason or 'external'})",
            )
            if self._cancel_reason is not None:
                raise RunCancelledError(record.id) from None
            raise
        except Exception as exc:
            self._finish(record, state, carried, carried_calls, "failed", error=str(exc))
            await self._emit("error", message=str(exc), run_id=record.id)
            raise
        self._finish(record, state, carried, carried_calls, "completed", text=text)
        await self._emit("agent_end", text=text, usage=dict(state.usage), run_id=record.id)
        return AgentResult(
            text=text,
            prompt_tokens=state.usage["prompt_tokens"],
            completion_tokens=state.usage["completion_tokens"],
            total_tokens=state.usage["total_tokens"],
            tool_calls_count=state.tool_calls_count,
            run_id=record.id,
            turn=state.turn,
        )

    def _finish(
        self,
        record: RunRecord,
        state: RunState,
        carried: dict[str, int],
        carried_calls: int,
        status: Any,
        *,
        text: str | None = None,
        error: str | None = None,
        turn: int | None = None,
    ) -> None:
        for key in self._usage:
            self._usage[key] += state.usage.get(key, 0) - carried.get(key, 0)
        self._tool_calls_count += state.tool_calls_count - carried_calls
        self._turn = state.turn if turn is None else turn
        if state.last_checkpoint is not None:
            self._last_checkpoint = state.last_checkpoint
        record.status = status
        record.ended_ms = self._env.now_ms()
        record.result_text = text
        record.error = error
        record.usage = dict(state.usage)
        record.tool_calls_count = state.tool_calls_count
        record.turn = self._turn
        if error is not None:
            self._last_error = error
        self._run_state = None
        self._save_quietly()

    # ---- persistence -------------------------------------------------------------------

    def session_data(self) -> dict[str, Any]:
        """What ``save()`` stores: metadata, identity, options without live objects or keys,
        history, run records, cumulative usage. JSON-able."""
        return {
            "session_id": self._id,
            "workspace": self._workspace,
            "identity": self.identity(),
            "options": self.options.to_persisted(),
            "messages": self.history(),
            "runs": [r.snapshot() for r in self._runs.records()],
            "usage": dict(self._usage),
            "tool_calls_count": self._tool_calls_count,
            "turn": self._turn,
            "last_checkpoint": self._last_checkpoint,
            "saved_ms": self._env.now_ms(),
        }

    def save(self) -> None:
        """Persist session metadata and run records now. Raises ResumeError without a store,
        StoreError/FencedError from the store."""
        store = self.options.session_store
        if store is None:
            raise ResumeError("save requires a session_store")
        store.save_session(self._id, self.session_data())

    async def save_async(self) -> None:
        """Async twin of :meth:`save` (the store is synchronous; this runs it inline)."""
        self.save()

    def _save_quietly(self) -> None:
        store = self.options.session_store
        if store is None:
            return
        from session_runtime.errors import FencedError, StoreError

        try:
            store.save_session(self._id, self.session_data())
        except FencedError:
            raise
        except StoreError as exc:
            log.warning("saving session %s failed: %s", self._id, exc)

    # ---- runs --------------------------------------------------------------------------

    def runs(self) -> list[dict[str, Any]]:
        """Snapshots of the retained runs, oldest first."""
        return [r.snapshot() for r in self._runs.records()]

    def run_snapshot(self, run_id: str) -> dict[str, Any] | None:
        """Snapshot of one run, or None if not retained."""
        rec = self._runs.get(run_id)
        return None if rec is None else rec.snapshot()

    def run_events(self, run_id: str) -> list[Event]:
        """Retained events of one run, oldest first."""
        return self._runs.events(run_id)

    def current_run(self) -> dict[str, Any] | None:
        """The running run's snapshot, or None when idle."""
        state = self._run_state
        if state is None or not self._active:
            return None
        return self.run_snapshot(state.run_id)

    def _cancel_task(self, reason: str) -> bool:
        with self._lock:
            task, loop = self._task, self._task_loop
            if task is None or loop is None or task.done():
                return False
            self._cancel_reason = reason
        if loop.is_closed():
            return False
        loop.call_soon_threadsafe(task.cancel)
        return True

    def cancel_run(self, run_id: str) -> bool:
        """Request cancellation of the running run ``run_id``; True if it was running. The
        operation then raises RunCancelledError and the run's status becomes ``cancelled``."""
        state = self._run_state
        if state is None or state.run_id != run_id:
            return False
        return self._cancel_task("cancel_run")

    async def cancel_run_async(self, run_id: str) -> bool:
        """Async twin of :meth:`cancel_run`."""
        return self.cancel_run(run_id)

    # ---- resume ------------------------------------------------------------------------

    async def resume_run_async(self, run_id: str) -> AgentResult:
        """Continue run ``run_id`` from its last checkpoint under a new run id (A3S resume_run).

        Usage and tool-call counts carry forward; the original run record is kept. An unfinished
        round is completed without running any tool twice (recorded result, else
        ``executor.recover``, else re-run if query-lane, else an "interrupted" error result).
        Raises ResumeError ("resume_run requires a session_store", "no loop checkpoint found for
        run '<id>'"), CheckpointError (newer schema, another session's checkpoint), and every
        error of ``send``.
        """
        self._begin_operation()
        return await self._run_started(*self._prepare_resume(run_id))

    def resume_run(self, run_id: str) -> AgentResult:
        """Synchronous twin of :meth:`resume_run_async`."""
        self._begin_operation()
        return self._sync(self._run_started(*self._prepare_resume(run_id)))

    def _prepare_resume(
        self, run_id: str
    ) -> tuple[
        Callable[[], Awaitable[tuple[RunRecord, RunState]]],
        Callable[[RunState, RunControl], Awaitable[None]],
        bool,
    ]:
        pending_box: list[PendingRound | None] = [None]

        async def start() -> tuple[RunRecord, RunState]:
            store = self.options.session_store
            if store is None:
                raise ResumeError("resume_run requires a session_store")
            checkpoint = store.load_checkpoint(self._id, run_id)
            if checkpoint is None:
                raise ResumeError(f"no loop checkpoint found for run '{run_id}'")
            ensure_loadable(checkpoint)
            ensure_session(checkpoint, self._id)
            pending = store.load_pending_round(self._id, run_id)
            if pending is not None and pending.turn == checkpoint.turn + 1:
                pending_box[0] = pending
            original = self._runs.get(run_id)
            new_id = self._fresh_run_id()
            record = RunRecord(
                id=new_id,
                prompt=original.prompt if original is not None else last_user_prompt(checkpoint),
                started_ms=self._env.now_ms(),
                resumed_from=run_id,
            )
            self._messages = [dict(m) for m in checkpoint.messages]
            state = RunState(
                run_id=new_id,
                messages=self._messages,
                turn=checkpoint.turn,
                usage={**_ZERO_USAGE, **checkpoint.total_usage},
                tool_calls_count=checkpoint.tool_calls_count,
                start_turn=checkpoint.turn,
            )
            return record, state

        async def prelude(state: RunState, control: RunControl) -> None:
            await self._emit("run_resumed", from_run_id=run_id, turn=state.turn)
            pending = pending_box[0]
            if pending is not None:
                await self._finish_pending(state, control, pending)
            else:
                await self._loop.commit(state)

        return start, prelude, False

    async def _finish_pending(
        self, state: RunState, control: RunControl, pending: PendingRound
    ) -> None:
        """Complete an interrupted round without running any tool twice behind the model's
        back (see ``agent.resume``), then commit it under the new run id."""
        amsg = dict(pending.assistant_message)
        raw, calls = pending_calls(amsg)
        state.turn += 1
        turn = state.turn
        ctx = ToolContext(
            self._id, self._workspace, state.run_id, turn, self.options.tool_timeout_ms
        )
        settled = await settle_pending(pending, calls, self._executor, ctx)
        store = self.options.session_store
        await self._loop.persist(
            "begin_round",
            lambda: store.begin_round(self._id, state.run_id, turn, amsg),
            fatal=True,
        )
        results = await self._loop.execute_calls(state, control, calls, settled)
        state.tool_calls_count += len(calls)
        state.messages.append(assistant_message(str(amsg.get("content") or ""), raw))
        state.messages.extend(tool_message(r) for r in results)
        await self._loop.commit(state)
        await self._emit("turn_end", turn=turn, usage=dict(state.usage))

    # ---- btw ---------------------------------------------------------------------------

    async def btw_async(self, question: str) -> BtwResult:
        """Ask a side question: one LLM call over a snapshot of the history, no tools, history
        untouched. Raises ValueError for an empty question, SessionClosedError, LlmError,
        BudgetExhaustedError."""
        if not question or not question.strip():
            raise ValueError("btw question must not be empty")
        if self._closed:
            raise SessionClosedError(self._id)
        messages = [*self.history(), {"role": "user", "content": question}]
        if self._guard is not None:
            from session_runtime.agent.compaction import estimate_tokens
            from session_runtime.errors import BudgetExhaustedError

            decision = await self._guard.check_before_llm(self._id, estimate_tokens(messages))
            if decision.kind == "deny":
                raise BudgetExhaustedError(decision.resource, decision.reason)
        response = await self._llm.complete(messages, None)
        if self._guard is not None:
            await self._guard.record_after_llm(self._id, response.usage)
        return BtwResult(response.text, dict(response.usage))

    def btw(self, question: str) -> BtwResult:
        """Synchronous twin of :meth:`btw_async`."""
        return self._sync(self.btw_async(question))

    # ---- passivation -------------------------------------------------------------------

    async def passivate_async(self, reason: str, deadline_ms: int | None = None) -> dict[str, Any]:
        """Reach a durable boundary so the pod can go (Berth; A3S PassivationRequested).

        Emits ``passivation_requested {reason, deadline_ms}``, starts no new LLM call (an
        in-flight one is abandoned; it has no side effects), lets running tools finish until
        ``deadline_ms`` (epoch ms, from the HostEnv clock; None = wait), commits the checkpoint
        and ends the run with status ``passivated``. Returns ``{"outcome": "passivated" |
        "timeout", "run_id", "turn"}``; ``timeout`` means tools were cut off and the last durable
        round stands. Idempotent: a repeated call returns the same outcome.
        """
        if self._passivation_result is not None and not self._active:
            return dict(self._passivation_result)
        request = Passivation(reason, deadline_ms)
        await self._emit("passivation_requested", reason=reason, deadline_ms=deadline_ms)
        with self._lock:
            task, loop, control = self._task, self._task_loop, self._control
            self._passivating = True
        try:
            if task is None or loop is None or control is None or task.done():
                self._save_quietly()
                result = {
                    "outcome": "passivated",
                    "run_id": self._last_run_id(),
                    "turn": self._turn,
                }
                self._passivation_result = result
                return dict(result)
            control.passivation = request

            def poke() -> None:
                if control.llm_task is not None:
                    control.llm_task.cancel()

            loop.call_soon_threadsafe(poke)
            timeout = None
            if deadline_ms is not None:
                timeout = max(deadline_ms - self._env.now_ms(), 0) / 1000
            await wait_task(task, loop, timeout)
            if not task.done():
                loop.call_soon_threadsafe(task.cancel)
                await wait_task(task, loop, None)
            result = self._passivation_result or {
                "outcome": "passivated",
                "run_id": self._last_run_id(),
                "turn": self._turn,
            }
            self._passivation_result = dict(result)
            return dict(result)
        finally:
            self._passivating = False

    def passivate(self, reason: str, deadline_ms: int | None = None) -> dict[str, Any]:
        """Synchronous twin of :meth:`passivate_async`."""
        return self._sync(self.passivate_async(reason, deadline_ms))

    def _last_run_id(self) -> str | None:
        records = self._runs.records()
        return records[-1].id if records else None

    # ---- state -------------------------------------------------------------------------

    def state(self) -> dict[str, Any]:
        """JSON-able state for the session pod's ``/v1/state``: ``state`` (idle | running |
        passivating | passivated | closed), ``run_id``, ``turn``, ``usage``, ``tool_calls_count``,
        ``last_checkpoint`` ({run_id, turn, tool_calls_count, at_ms} or None), ``last_error``."""
        run = self._run_state if self._active else None
        usage = dict(self._usage)
        calls = self._tool_calls_count
        if run is not None:  # add what the running run used so far
            carried, carried_calls = self._carried
            for key in usage:
                usage[key] += run.usage.get(key, 0) - carried.get(key, 0)
            calls += run.tool_calls_count - carried_calls
        if self._closed:
            name = "closed"
        elif self._passivating:
            name = "passivating"
        elif run is not None:
            name = "running"
        elif self._passivation_result is not None:
            name = "passivated"
        else:
            name = "idle"
        checkpoint = self._last_checkpoint
        if run is not None and run.last_checkpoint is not None:
            checkpoint = run.last_checkpoint
        return {
            "state": name,
            "run_id": run.run_id if run is not None else self._last_run_id(),
            "turn": run.turn if run is not None else self._turn,
            "usage": usage,
            "tool_calls_count": calls,
            "last_checkpoint": None if checkpoint is None else dict(checkpoint),
            "last_error": self._last_error,
        }

    # ---- close -------------------------------------------------------------------------

    async def close_async(self) -> None:
        """Close the session (idempotent): later send/stream fail with SessionClosedError; the
        active run is cancelled and awaited; the executor's ``aclose``/``close`` is called."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            task, loop = self._task, self._task_loop
        if task is not None and loop is not None:
            self._cancel_task("close")
            with contextlib.suppress(Exception):
                await wait_task(task, loop, 10.0)
        closer = getattr(self._executor, "aclose", None) or getattr(self._executor, "close", None)
        if closer is not None and self._executor is not self._direct:
            with contextlib.suppress(Exception):
                value = closer()
                if inspect.isawaitable(value):
                    await value
        llm_closer = getattr(self._llm, "aclose", None) if self._owns_llm else None
        if llm_closer is not None:
            with contextlib.suppress(Exception):
                closing = llm_closer()
                if inspect.isawaitable(closing):
                    await closing
        if self._on_close is not None:
            self._on_close(self._id)

    def close(self) -> None:
        """Synchronous twin of :meth:`close_async`."""
        if self._closed:
            return
        if self._bridge.in_loop_thread():
            raise RuntimeError("use close_async on the session loop")
        self._sync(self.close_async())
