"""``Session``: one workspace, one conversation, its runs, events, hooks and lifecycle.

Owned by ``session_runtime.agent``; created by ``Agent.session``/``Agent.resume_session`` and
driven by callers (the session pod's server, tests, the demo). Implements the A3S Python SDK
session surface (docs/architecture.md §10 "Public API"): synchronous methods run on the agent's
background loop; each has an ``*_async`` twin that runs on the caller's loop.

The class is a facade: the operation slot is a :class:`~.run_slot.RunSlot`, runs are started,
resumed and driven by a :class:`~.run_driver.RunDriver` over the :class:`~.run_driver.Conversation`,
and passivation is :func:`~.passivation.passivate`.

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
from collections.abc import AsyncIterator, Callable, Coroutine, Iterator
from typing import TYPE_CHECKING, Any, TypeVar

from session_runtime.agent.budget import BudgetGuard, GuardCaller
from session_runtime.agent.hooks import HookHandler, HookRegistry
from session_runtime.agent.loop import AgentLoop
from session_runtime.agent.options import SessionOptions, SessionRetentionLimits
from session_runtime.agent.passivation import passivate
from session_runtime.agent.queue_api import QueueApi
from session_runtime.agent.results import AgentResult, BtwResult
from session_runtime.agent.run_driver import Conversation, RunDriver
from session_runtime.agent.run_slot import RunSlot
from session_runtime.agent.runs import RunLog
from session_runtime.agent.tasks import wait_task
from session_runtime.errors import ResumeError, SessionClosedError
from session_runtime.events import IDENTITY_FIELDS, AgentEvent, Event, validate_host_event
from session_runtime.hostenv import HostEnv
from session_runtime.llm.client import LlmClient
from session_runtime.tools.base import ToolExecutor
from session_runtime.tools.executor import DirectExecutor
from session_runtime.tools.host import HostToolExecutor
from session_runtime.tools.schemas import tool_definitions

if TYPE_CHECKING:
    from session_runtime.agent.bridge import LoopThread
    from session_runtime.lanes.queue import LaneQueue

log = logging.getLogger(__name__)
T = TypeVar("T")

DEFAULT_SYSTEM_PROMPT = (
    "You are a coding agent working in a workspace directory. Use the tools to read, search, "
    "edit and run code there. Paths are relative to the workspace. Be concise."
)
_END = object()


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
        self._slot = RunSlot(session_id)
        self._guard: GuardCaller | None = None
        if options.budget_guard is not None:
            self.set_budget_guard(options.budget_guard)
        self._direct = DirectExecutor()
        self._queue = self._lane_queue(executor)
        self._executor: ToolExecutor = executor or self._queue or self._direct
        if executor is not None and self._queue is not None:  # the pod's, built before us
            self._queue.bind(emit=self._emit_event)
        if options.host_tools:
            self._executor = HostToolExecutor(self._executor, options.host_tools)
        system = options.system_prompt or DEFAULT_SYSTEM_PROMPT
        self._conv = Conversation(messages=[{"role": "system", "content": system}])
        if restored:
            self._conv.restore(restored)
            self._runs.load(list(restored.get("runs") or []))
        self._driver = self._make_driver(llm)

    # ---- construction helpers ----------------------------------------------------------

    def _make_driver(self, llm: LlmClient) -> RunDriver:
        """The agent loop over this session's events, guard and executor, and its run driver."""
        loop = AgentLoop(
            session_id=self._id,
            workspace=self._workspace,
            options=self.options,
            llm=llm,
            executor=lambda: self._executor,
            tools=tool_definitions() + [t.definition for t in self.options.host_tools],
            emit=self._emit,
            gate=self._gate,
            guard=lambda: self._guard,
            host_env=self._env,
        )
        return RunDriver(
            session_id=self._id,
            workspace=self._workspace,
            options=self.options,
            env=self._env,
            conversation=self._conv,
            runs=self._runs,
            slot=self._slot,
            loop=loop,
            emit=self._emit,
            save=self.save,
            executor=lambda: self._executor,
        )

    def _lane_queue(self, executor: ToolExecutor | None) -> LaneQueue | None:
        """``executor`` if a lane queue (the pod's), else one from ``queue_config``, or None."""
        if executor is not None:
            from session_runtime.lanes.queue import LaneQueue  # loaded already if injected

            return executor if isinstance(executor, LaneQueue) else None
        if self.options.queue_config is None:
            return None
        from session_runtime.lanes import LaneQueue  # lazy: lanes are optional

        env = self._env
        return LaneQueue(
            self.options.queue_config,
            emit=self._emit_event,
            runner=self._direct,
            clock=env.now_ms,  # ids and time through HostEnv (replay)
            task_ids=lambda: f"task-{env.new_id()}",
        )

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
        return [dict(m) for m in self._conv.messages]

    # ---- events and hooks --------------------------------------------------------------

    def _stamp(self, fields: Event) -> AgentEvent:
        event = AgentEvent(fields)
        seq = next(self._seq)  # atomic: host events may come from another thread
        state = self._conv.run_state
        event["session_id"] = self._id
        active = state is not None and self._slot.active
        event.setdefault("run_id", state.run_id if state is not None and active else None)
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

    def set_budget_guard(self, guard: BudgetGuard | None) -> None:
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

    def is_closed(self) -> bool:
        """True after ``close()``."""
        return self._slot.closed

    # ---- send / stream -----------------------------------------------------------------

    async def send_async(
        self,
        prompt: str,
        *,
        message_id: str | None = None,
        invoked_by: dict[str, Any] | None = None,
    ) -> AgentResult:
        """Run the agent on ``prompt`` until it answers; returns an AgentResult.

        *Berth* keywords (recorded on the run, see ``RunRecord``): ``message_id`` of the front
        door's message that started the run, ``invoked_by`` the ``peer_invocation`` of a run
        another session asked for (emitted as the run starts, before its first model call).

        Raises SessionClosedError, SessionBusyError, BudgetExhaustedError, CircuitOpenError,
        LlmError, MaxToolRoundsError, ParseRetriesExceededError, RunCancelledError,
        RunPassivatedError, FencedError.
        """
        self._slot.begin()
        start = self._driver.prompt_run(prompt, message_id, invoked_by)
        if invoked_by is None:
            return await self._driver.run_started(start)
        peer = dict(invoked_by)

        async def announce(_state: Any, _control: Any) -> None:
            # inside the run, before its first model call: hooks and the run's own events see
            # the peer_invocation however fast the run then ends
            await self.emit_host_event_async({"type": "peer_invocation", **peer})

        return await self._driver.run_started(start, announce)

    def send(self, prompt: str) -> AgentResult:
        """Synchronous twin of :meth:`send_async`."""
        self._slot.begin()
        return self._sync(self._driver.run_started(self._driver.prompt_run(prompt)))

    async def stream_async(self, prompt: str) -> AsyncIterator[Event]:
        """Run like ``send`` and yield every event of the session while the run lasts, in order.
        After the last event, the run's error (if any) is raised."""
        self._slot.begin()
        events: asyncio.Queue[Any] = asyncio.Queue()
        self._subscribers.append(events.put_nowait)
        task = asyncio.ensure_future(self._driver.run_started(self._driver.prompt_run(prompt)))
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
        self._slot.begin()
        events: queue.Queue[Any] = queue.Queue()
        self._subscribers.append(events.put)
        try:
            future = self._bridge.submit(self._driver.run_started(self._driver.prompt_run(prompt)))
        except BaseException:
            self._subscribers.remove(events.put)
            self._slot.end()
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
            "usage": dict(self._conv.usage),
            "tool_calls_count": self._conv.tool_calls_count,
            "turn": self._conv.turn,
            "last_checkpoint": self._conv.last_checkpoint,
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

    # ---- runs --------------------------------------------------------------------------

    @property
    def quiescent(self) -> bool:
        """No operation holds the session: no run is in flight or being started (a closed
        session whose run was cancelled and has ended is quiescent)."""
        return not self._slot.active

    def runs(self) -> list[dict[str, Any]]:
        """Snapshots of the retained runs, oldest first."""
        return [r.snapshot() for r in self._runs.records()]

    def run_snapshot(self, run_id: str) -> dict[str, Any] | None:
        """Snapshot of one run, or None if not retained."""
        rec = self._runs.get(run_id)
        return None if rec is None else rec.snapshot()

    def runs_of_message(self, message_id: str) -> list[dict[str, Any]]:
        """*Berth*: snapshots of the retained runs started by message ``message_id`` or resumed
        from such a run, oldest first ([] when none is retained)."""
        return [r.snapshot() for r in self._runs.records() if r.message_id == message_id]

    def run_events(self, run_id: str) -> list[Event]:
        """Retained events of one run, oldest first."""
        return self._runs.events(run_id)

    def current_run(self) -> dict[str, Any] | None:
        """The running run's snapshot, or None when idle."""
        state = self._conv.run_state
        if state is None or not self._slot.active:
            return None
        return self.run_snapshot(state.run_id)

    def cancel_run(self, run_id: str) -> bool:
        """Request cancellation of the running run ``run_id``; True if it was running. The
        operation then raises RunCancelledError and the run's status becomes ``cancelled``."""
        state = self._conv.run_state
        if state is None or state.run_id != run_id:
            return False
        return self._slot.cancel("cancel_run")

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
        self._slot.begin()
        return await self._driver.run_started(*self._driver.resumed_run(run_id))

    def resume_run(self, run_id: str) -> AgentResult:
        """Synchronous twin of :meth:`resume_run_async`."""
        self._slot.begin()
        return self._sync(self._driver.run_started(*self._driver.resumed_run(run_id)))

    # ---- btw ---------------------------------------------------------------------------

    async def btw_async(self, question: str) -> BtwResult:
        """Ask a side question: one LLM call over a snapshot of the history, no tools, history
        untouched. Raises ValueError for an empty question, SessionClosedError, LlmError,
        BudgetExhaustedError."""
        if not question or not question.strip():
            raise ValueError("btw question must not be empty")
        if self._slot.closed:
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
        "timeout", "run_id", "turn"}`` (:class:`~.passivation.PassivationResult`); ``timeout``
        means tools were cut off and the last durable round stands. Idempotent: a repeated call
        returns the same outcome.
        """
        return (await passivate(self._driver, reason, deadline_ms)).as_dict()

    def passivate(self, reason: str, deadline_ms: int | None = None) -> dict[str, Any]:
        """Synchronous twin of :meth:`passivate_async`."""
        return self._sync(self.passivate_async(reason, deadline_ms))

    # ---- state -------------------------------------------------------------------------

    def state(self) -> dict[str, Any]:
        """JSON-able state for the session pod's ``/v1/state``: ``state`` (idle | running |
        passivating | passivated | closed), ``run_id``, ``turn``, ``usage``, ``tool_calls_count``,
        ``last_checkpoint`` ({run_id, turn, tool_calls_count, at_ms} or None), ``last_error``."""
        conv, slot = self._conv, self._slot
        run = conv.run_state if slot.active else None
        usage = dict(conv.usage)
        calls = conv.tool_calls_count
        if run is not None:  # add what the running run used so far
            carried, carried_calls = conv.carried
            for key in usage:
                usage[key] += run.usage.get(key, 0) - carried.get(key, 0)
            calls += run.tool_calls_count - carried_calls
        if slot.closed:
            name = "closed"
        elif slot.passivating:
            name = "passivating"
        elif run is not None:
            name = "running"
        elif self._driver.passivation is not None:
            name = "passivated"
        else:
            name = "idle"
        checkpoint = conv.last_checkpoint
        if run is not None and run.last_checkpoint is not None:
            checkpoint = run.last_checkpoint
        return {
            "state": name,
            "run_id": run.run_id if run is not None else self._driver.last_run_id(),
            "turn": run.turn if run is not None else conv.turn,
            "usage": usage,
            "tool_calls_count": calls,
            "last_checkpoint": None if checkpoint is None else dict(checkpoint),
            "last_error": conv.last_error,
        }

    # ---- close -------------------------------------------------------------------------

    async def close_async(self) -> None:
        """Close the session (idempotent): later send/stream fail with SessionClosedError; the
        active run is cancelled and awaited; the executor's ``aclose``/``close`` is called."""
        first, task, loop = self._slot.close()
        if not first:
            return
        if task is not None and loop is not None:
            self._slot.cancel("close")
            with contextlib.suppress(Exception):
                await wait_task(task, loop, 10.0)
        if self._queue is not None:
            with contextlib.suppress(Exception):
                await self._queue.aclose()
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
        if self._slot.closed:
            return
        if self._bridge.in_loop_thread():
            raise RuntimeError("use close_async on the session loop")
        self._sync(self.close_async())
