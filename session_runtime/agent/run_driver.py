"""Runs of a session: start one from a prompt or resume one from its checkpoint, drive it to its
end, and account for it (A3S ``send``/``stream``/``resume_run`` semantics).

Owned by ``session_runtime.agent``; the :class:`~session_runtime.agent.session.Session` facade
holds one :class:`RunDriver` and one :class:`Conversation`. The driver never takes the operation
slot itself: the facade takes it (``RunSlot.begin``) and :meth:`RunDriver.run_started` always
releases it. Each run gets an asyncio task of its own, so cancel/close/passivate act on the run,
not on the caller.

Accounting: a run's usage and tool calls are added to the conversation's totals when it ends
(``finish``), minus what it carried forward from the run it resumed, so a resumed run is never
counted twice.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from berth_contract.tracing import RUN_STATUS
from berth_telemetry.logs import bind
from berth_telemetry.tracing import traceparent
from session_runtime.agent.loop import (
    AgentLoop,
    PassivationStop,
    RunControl,
    RunState,
    assistant_message,
    tool_message,
)
from session_runtime.agent.options import SessionOptions
from session_runtime.agent.passivation import PassivationResult
from session_runtime.agent.results import AgentResult
from session_runtime.agent.resume import (
    ensure_loadable,
    ensure_session,
    last_user_prompt,
    pending_calls,
    settle_pending,
)
from session_runtime.agent.run_slot import RunSlot
from session_runtime.agent.runs import RunLog, RunRecord, RunStatus
from session_runtime.errors import (
    FencedError,
    ResumeError,
    RunCancelledError,
    RunNotDurableError,
    RunPassivatedError,
    StoreError,
)
from session_runtime.hostenv import HostEnv
from session_runtime.store.base import PendingRound
from session_runtime.tools.base import ToolContext, ToolExecutor
from session_runtime.tracing import active

log = logging.getLogger(__name__)

ZERO_USAGE: dict[str, int] = {"prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0}

Start = Callable[[], Awaitable[tuple[RunRecord, RunState]]]
"""Builds the run record and loop state of a run (inside the operation)."""
Prelude = Callable[[RunState, RunControl], Awaitable[None]]
"""Runs before the loop (a resumed run's event and its unfinished round)."""


@dataclass(slots=True)
class Conversation:
    """The session's conversation and cumulative totals over finished runs.

    ``messages``: OpenAI chat messages, system first (replaced by a checkpoint's on resume);
    ``usage`` (token counts), ``tool_calls_count``, ``turn`` (completed tool rounds of the last
    run); ``last_checkpoint`` ({run_id, turn, tool_calls_count, at_ms}); ``last_error``;
    ``run_state`` of the run in flight and what it ``carried`` forward (usage, tool calls)."""

    messages: list[dict[str, Any]]
    usage: dict[str, int] = field(default_factory=lambda: dict(ZERO_USAGE))
    tool_calls_count: int = 0
    turn: int = 0
    last_checkpoint: dict[str, Any] | None = None
    last_error: str | None = None
    run_state: RunState | None = None
    carried: tuple[dict[str, int], int] = field(default_factory=lambda: (dict(ZERO_USAGE), 0))

    def restore(self, data: dict[str, Any]) -> None:
        """Take the conversation and totals of a saved session (``Session.session_data``)."""
        messages = data.get("messages")
        if isinstance(messages, list) and messages:
            self.messages = [dict(m) for m in messages]
        self.usage = {**ZERO_USAGE, **(data.get("usage") or {})}
        self.tool_calls_count = int(data.get("tool_calls_count", 0))
        self.turn = int(data.get("turn", 0))
        self.last_checkpoint = data.get("last_checkpoint")


class RunDriver:
    """Starts, resumes and drives the runs of one session (module docstring).

    ``emit(type, **fields)`` stamps and delivers an event; ``save()`` persists the session
    (``Session.save``: raises the store's errors; the driver logs them, except fencing and a
    completed run's end, see :meth:`save_session`); ``executor()`` is the session's tool
    executor."""

    def __init__(
        self,
        *,
        session_id: str,
        workspace: str,
        options: SessionOptions,
        env: HostEnv,
        conversation: Conversation,
        runs: RunLog,
        slot: RunSlot,
        loop: AgentLoop,
        emit: Callable[..., Awaitable[Any]],
        save: Callable[[], None],
        executor: Callable[[], ToolExecutor],
    ) -> None:
        self.session_id = session_id
        self.workspace = workspace
        self.options = options
        self.env = env
        self.conv = conversation
        self.runs = runs
        self.slot = slot
        self.loop = loop
        self.emit = emit
        self.save = save
        self.executor = executor
        #: How the last run ended on passivation (None: it did not, or no run yet).
        self.passivation: PassivationResult | None = None

    # ---- starting a run ------------------------------------------------------------------

    def fresh_run_id(self) -> str:
        """A run id from HostEnv that no run of this session has used, in memory or in the store.

        A resumed process starts a new (replay) id generator, which would otherwise hand out
        ``run-r-0`` again and overwrite the run being resumed; the A3S contract keeps it intact.
        """
        store = self.options.session_store
        while True:
            run_id = self.env.new_run_id()
            if self.runs.get(run_id) is not None:
                continue
            if store is not None and store.load_checkpoint(self.session_id, run_id) is not None:
                continue
            return run_id

    def prompt_run(
        self,
        prompt: str,
        message_id: str | None = None,
        invoked_by: dict[str, Any] | None = None,
    ) -> Start:
        """A new run of ``prompt`` in the conversation; ``message_id`` and ``invoked_by`` go to
        its record (see :class:`RunRecord`)."""

        async def start() -> tuple[RunRecord, RunState]:
            run_id = self.fresh_run_id()
            record = RunRecord(
                id=run_id,
                prompt=prompt,
                started_ms=self.env.now_ms(),
                message_id=message_id,
                invoked_by=invoked_by,
            )
            self.conv.messages.append({"role": "user", "content": prompt})
            turn = self.conv.turn
            state = RunState(run_id=run_id, messages=self.conv.messages, turn=turn, start_turn=turn)
            return record, state

        return start

    def resumed_run(self, run_id: str) -> tuple[Start, Prelude, bool]:
        """(start, prelude, initial_commit) of a run continuing ``run_id`` from its checkpoint
        under a new run id. ``start`` raises ``ResumeError`` (no store, no checkpoint) and
        ``CheckpointError`` (newer schema, another session's checkpoint)."""
        pending_box: list[PendingRound | None] = [None]

        async def start() -> tuple[RunRecord, RunState]:
            store = self.options.session_store
            if store is None:
                raise ResumeError("resume_run requires a session_store")
            checkpoint = store.load_checkpoint(self.session_id, run_id)
            if checkpoint is None:
                raise ResumeError(f"no loop checkpoint found for run '{run_id}'")
            ensure_loadable(checkpoint)
            ensure_session(checkpoint, self.session_id)
            pending = store.load_pending_round(self.session_id, run_id)
            if pending is not None and pending.turn == checkpoint.turn + 1:
                pending_box[0] = pending
            original = self.runs.get(run_id)
            new_id = self.fresh_run_id()
            record = RunRecord(
                id=new_id,
                prompt=original.prompt if original is not None else last_user_prompt(checkpoint),
                started_ms=self.env.now_ms(),
                resumed_from=run_id,
                message_id=original.message_id if original is not None else None,
                invoked_by=original.invoked_by if original is not None else None,
            )
            self.conv.messages = [dict(m) for m in checkpoint.messages]
            state = RunState(
                run_id=new_id,
                messages=self.conv.messages,
                turn=checkpoint.turn,
                usage={**ZERO_USAGE, **checkpoint.total_usage},
                tool_calls_count=checkpoint.tool_calls_count,
                start_turn=checkpoint.turn,
            )
            return record, state

        async def prelude(state: RunState, control: RunControl) -> None:
            await self.emit("run_resumed", from_run_id=run_id, turn=state.turn)
            pending = pending_box[0]
            if pending is not None:
                await self._finish_pending(state, control, pending)
            else:
                await self.loop.commit(state)

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
            self.session_id, self.workspace, state.run_id, turn, self.options.tool_timeout_ms
        )
        settled = await settle_pending(pending, calls, self.executor(), ctx)
        store = self.options.session_store
        if store is None:  # a pending round is only ever read from a store
            raise ResumeError("resume_run requires a session_store")
        await self.loop.persist(
            "begin_round",
            lambda: store.begin_round(self.session_id, state.run_id, turn, amsg),
            fatal=True,
        )
        results = await self.loop.execute_calls(state, control, calls, settled)
        state.tool_calls_count += len(calls)
        state.messages.append(assistant_message(str(amsg.get("content") or ""), raw))
        state.messages.extend(tool_message(r) for r in results)
        await self.loop.commit(state)
        await self.emit("turn_end", turn=turn, usage=dict(state.usage))

    # ---- driving it ----------------------------------------------------------------------

    async def run_started(
        self, start: Start, prelude: Prelude | None = None, initial_commit: bool = True
    ) -> AgentResult:
        """Drive a run whose operation slot is already taken; always releases it.

        The run has a span (``session_runtime.tracing``): a resumed run's is a child of the
        span of the run it resumes (same trace, across pods), another's a child of the
        caller's current span (the front door's ``traceparent``), else a new trace's root."""
        try:
            record, state = await start()
            resumed = self.runs.get(record.resumed_from) if record.resumed_from else None
            parent = resumed.traceparent if resumed is not None else None
            span = self.loop.tracing.run(record.id, record.resumed_from, parent)
            record.traceparent = traceparent(span) or None
            with active(span, quiet=(RunPassivatedError, RunCancelledError)):
                try:
                    drive = self._drive(record, state, prelude, initial_commit)
                    return await asyncio.ensure_future(drive)
                finally:
                    span.set_attribute(RUN_STATUS, record.status)
        finally:
            self.slot.end()

    async def _drive(
        self,
        record: RunRecord,
        state: RunState,
        prelude: Prelude | None,
        initial_commit: bool,
    ) -> AgentResult:
        control = RunControl()
        bind(run_id=record.id)  # on every log record of this run's task (berth_telemetry.logs)
        self.conv.carried = (dict(state.usage), state.tool_calls_count)
        self.slot.bind(control)
        with self.slot.lock:
            self.conv.run_state = state
            self.passivation = None
        self.runs.add(record)
        self.save_session()
        try:
            if initial_commit:
                await self.loop.commit(state)
                self.conv.last_checkpoint = state.last_checkpoint
            if prelude is not None:
                await prelude(state, control)
            text = await self.loop.run(state, control)
        except PassivationStop:
            self._finish(record, state, "passivated")
            self.passivation = PassivationResult("passivated", record.id, state.turn)
            raise RunPassivatedError(record.id, state.turn, "passivated") from None
        except asyncio.CancelledError:
            self._cancelled(record, state, control)
            raise
        except Exception as exc:
            self._finish(record, state, "failed", error=str(exc))
            await self.emit("error", message=str(exc), run_id=record.id)
            raise
        try:
            self._finish(record, state, "completed", text=text, durable=True)
        except RunNotDurableError as exc:
            await self.emit("persistence_failed", operation="end_run", message=str(exc))
            raise
        await self.emit("agent_end", text=text, usage=dict(state.usage), run_id=record.id)
        return AgentResult(
            text=text,
            prompt_tokens=state.usage["prompt_tokens"],
            completion_tokens=state.usage["completion_tokens"],
            total_tokens=state.usage["total_tokens"],
            tool_calls_count=state.tool_calls_count,
            run_id=record.id,
            turn=state.turn,
        )

    def _cancelled(self, record: RunRecord, state: RunState, control: RunControl) -> None:
        """The run's task was cancelled: by a passivation deadline (the last committed round
        stands; raises ``RunPassivatedError``), by cancel_run/close (``RunCancelledError``), or
        from outside (returns; the caller re-raises the cancellation)."""
        if control.passivation is not None:
            durable = state.committed[0] if state.committed is not None else state.start_turn
            self._finish(record, state, "passivated", turn=durable)
            self.passivation = PassivationResult("timeout", record.id, durable)
            raise RunPassivatedError(record.id, durable, "timeout") from None
        reason = self.slot.cancel_reason
        self._finish(record, state, "cancelled", error=f"cancelled ({reason or 'external'})")
        if reason is not None:
            raise RunCancelledError(record.id) from None

    def _finish(
        self,
        record: RunRecord,
        state: RunState,
        status: RunStatus,
        *,
        text: str | None = None,
        error: str | None = None,
        turn: int | None = None,
        durable: bool = False,
    ) -> None:
        """Close ``record`` with ``status`` and add the run's own usage to the totals.
        ``durable``: the end must reach the store, else RunNotDurableError
        (:meth:`save_session`)."""
        conv = self.conv
        carried, carried_calls = conv.carried
        for key in conv.usage:
            conv.usage[key] += state.usage.get(key, 0) - carried.get(key, 0)
        conv.tool_calls_count += state.tool_calls_count - carried_calls
        conv.turn = state.turn if turn is None else turn
        if state.last_checkpoint is not None:
            conv.last_checkpoint = state.last_checkpoint
        record.status = status
        record.ended_ms = self.env.now_ms()
        record.result_text = text
        record.error = error
        record.usage = dict(state.usage)
        record.tool_calls_count = state.tool_calls_count
        record.turn = conv.turn
        if error is not None:
            conv.last_error = error
        conv.run_state = None
        self.save_session(record if durable else None)

    def save_session(self, durable: RunRecord | None = None) -> None:
        """Persist the session (no store: nothing to do). FencedError always propagates; other
        StoreErrors are logged, unless ``durable`` names a run whose end must be saved: then
        the record is marked ``interrupted`` in memory (as the store still holds it unfinished)
        and RunNotDurableError is raised, so a full volume never reports a run completed that a
        replacement would find running."""
        if self.options.session_store is None:
            return
        try:
            self.save()
        except FencedError:
            raise
        except StoreError as exc:
            if durable is None:
                log.warning("saving session %s failed: %s", self.session_id, exc)
                return
            durable.status = "interrupted"
            durable.error = str(exc)
            raise RunNotDurableError(durable.id, exc) from exc

    def last_run_id(self) -> str | None:
        """The id of the newest retained run, or None."""
        records = self.runs.records()
        return records[-1].id if records else None
