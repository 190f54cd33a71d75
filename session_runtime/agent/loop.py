"""The agent loop: LLM call -> tool calls -> results -> next round, with the contract's limits.

Owned by ``session_runtime.agent``; ``Session`` builds one :class:`AgentLoop` per session and
calls :meth:`AgentLoop.run` for each run (send, stream, resume_run). The loop owns no I/O of its
own beyond its collaborators: the LLM client, the tool executor, the store and the event emitter.

Per LLM turn: passivation check -> auto-compaction -> budget ``check_before_llm`` -> LLM call
(transient failures go through the circuit breaker with backoff) -> ``record_after_llm``. A reply
with tool calls is one *tool round*: parse arguments (malformed ones are fed back to the model, at
most ``max_parse_retries`` times per run) -> ``store.begin_round`` (intent before action) -> hooks
and ``check_before_tool`` per call -> executor (``store.record_tool_result`` as each result
arrives) -> ``store.commit_round`` with the ``LoopCheckpoint``. A reply cut at the output limit
(``finish_reason == "length"``) gets up to ``max_continuation_turns`` continuation turns. More
than ``max_tool_rounds`` rounds in one run stops it.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from session_runtime.agent.breaker import CircuitBreaker
from session_runtime.agent.budget import GuardCaller, threshold_event_fields
from session_runtime.agent.compaction import compact_messages, estimate_tokens, should_compact
from session_runtime.agent.options import SessionOptions
from session_runtime.errors import (
    BudgetExhaustedError,
    CircuitOpenError,
    FencedError,
    LlmTransientError,
    MaxToolRoundsError,
    ParseRetriesExceededError,
    StoreError,
)
from session_runtime.events import Event
from session_runtime.hostenv import HostEnv
from session_runtime.llm.client import LlmClient, LlmResponse, RawToolCall
from session_runtime.store.base import LoopCheckpoint, SessionStore
from session_runtime.tools.base import ToolCall, ToolContext, ToolExecutor, ToolResult
from session_runtime.tracing import LoopTracing, active

Emit = Callable[..., Awaitable[Event]]
#: Emits an event and returns the block reason a hook gave (pre_tool_use), or None.
Gate = Callable[..., Awaitable[str | None]]

CONTINUATION_PROMPT = "Continue exactly where your previous reply stopped."


@dataclass(slots=True)
class RunState:
    """Mutable state of one run. ``turn`` counts completed tool rounds (cumulative across a
    resume); ``usage`` and ``tool_calls_count`` are cumulative too (A3S carry-forward)."""

    run_id: str
    messages: list[dict[str, Any]]
    turn: int = 0
    usage: dict[str, int] = field(
        default_factory=lambda: {"prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0}
    )
    tool_calls_count: int = 0
    start_turn: int = 0
    parse_failures: int = 0
    continuations: int = 0
    last_checkpoint: dict[str, Any] | None = None
    #: (turn, message count) of the last commit, to skip committing an unchanged state twice.
    committed: tuple[int, int] | None = None
    #: ``messages[:synced]`` are, unmodified, the messages of the run's last stored checkpoint
    #: (0: unknown). Set after a commit the store accepted; reset by anything that rewrites the
    #: list rather than appending to it (auto-compaction). Handed to the store as
    #: ``LoopCheckpoint.known_prefix``, so a commit costs only the new messages.
    synced: int = 0


@dataclass(slots=True)
class Passivation:
    """A pending passivation request: ``reason`` and ``deadline_ms`` (epoch ms or None)."""

    reason: str
    deadline_ms: int | None


class PassivationStop(Exception):
    """Internal: the loop stopped at a durable boundary because passivation was requested."""


@dataclass(slots=True)
class RunControl:
    """What the session may poke while a run is in flight."""

    passivation: Passivation | None = None
    phase: str = "idle"  # idle | llm | tools
    llm_task: asyncio.Task[LlmResponse] | None = None


def parse_tool_calls(raw: list[RawToolCall]) -> tuple[list[ToolCall], dict[str, str]]:
    """Parse raw arguments; returns (calls with parsed arguments, {call_id: parse error})."""
    calls: list[ToolCall] = []
    errors: dict[str, str] = {}
    for rc in raw:
        try:
            args = json.loads(rc.arguments) if rc.arguments.strip() else {}
            if not isinstance(args, dict):
                raise ValueError("arguments must be a JSON object")
            calls.append(ToolCall(rc.id, rc.name, args))
        except ValueError as exc:
            errors[rc.id] = str(exc)
            calls.append(ToolCall(rc.id, rc.name, {}))
    return calls, errors


def assistant_message(text: str, raw: list[RawToolCall]) -> dict[str, Any]:
    """The OpenAI-format assistant message for a reply (raw arguments kept verbatim)."""
    msg: dict[str, Any] = {"role": "assistant", "content": text or None}
    if raw:
        msg["tool_calls"] = [
            {"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.arguments}}
            for c in raw
        ]
    return msg


def tool_message(result: ToolResult) -> dict[str, Any]:
    """The OpenAI-format tool message the model sees for a result."""
    return {"role": "tool", "tool_call_id": result.tool_call_id, "content": result.output}


def result_record(result: ToolResult) -> dict[str, Any]:
    """The journal shape of a result (``PendingRound.results`` values)."""
    return {"output": result.output, "exit_code": result.exit_code, "is_error": result.is_error}


class AgentLoop:
    """The loop of one session; stateless between runs except the circuit breaker."""

    def __init__(
        self,
        *,
        session_id: str,
        workspace: str,
        options: SessionOptions,
        llm: LlmClient,
        executor: Callable[[], ToolExecutor],
        tools: list[dict[str, Any]],
        emit: Emit,
        gate: Gate,
        guard: Callable[[], GuardCaller | None],
        host_env: HostEnv,
    ) -> None:
        self.session_id = session_id
        self.workspace = workspace
        self.options = options
        self.llm = llm
        self._executor = executor
        self.tools = tools
        self.emit = emit
        self.gate = gate
        self._guard = guard
        self.env = host_env
        self.tracing = LoopTracing(session_id, options.identity())
        self.breaker = CircuitBreaker(
            options.circuit_breaker_threshold,
            options.llm_backoff_ms,
            options.llm_circuit_cooldown_ms,
        )

    # ---- persistence helpers -------------------------------------------------------------

    @property
    def store(self) -> SessionStore | None:
        """The session store (``SessionOptions.session_store``) or None."""
        return self.options.session_store

    async def persist(self, operation: str, fn: Callable[[], None], *, fatal: bool = False) -> None:
        """Run a store write; FencedError always propagates; other StoreErrors emit
        ``persistence_failed`` and propagate only when ``fatal`` (intent before action)."""
        try:
            fn()
        except FencedError:
            raise
        except StoreError as exc:
            await self.emit("persistence_failed", operation=operation, message=str(exc))
            if fatal:
                raise

    async def commit(self, state: RunState) -> None:
        """Persist the LoopCheckpoint of ``state`` (if a store is set) and remember it.

        The checkpoint hands the store ``state.messages`` itself (no copy; the store copies what
        it keeps during the call) and ``known_prefix=state.synced``, so the cost does not grow
        with the history. ``synced`` moves only when the store accepted the checkpoint; a
        failed commit leaves it at the previous checkpoint's length, which the store still
        holds."""
        mark = (state.turn, len(state.messages))
        if state.committed == mark:
            return
        state.committed = mark
        now = self.env.now_ms()
        info = {
            "run_id": state.run_id,
            "turn": state.turn,
            "tool_calls_count": state.tool_calls_count,
            "at_ms": now,
        }
        if (store := self.store) is not None:
            cp = LoopCheckpoint(
                run_id=state.run_id,
                session_id=self.session_id,
                turn=state.turn,
                messages=state.messages,
                total_usage=dict(state.usage),
                tool_calls_count=state.tool_calls_count,
                checkpoint_ms=now,
                known_prefix=state.synced,
            )

            def write() -> None:
                store.commit_round(cp)
                state.synced = mark[1]

            await self.persist("commit_round", write)
        state.last_checkpoint = info

    # ---- the loop ------------------------------------------------------------------------

    async def run(self, state: RunState, control: RunControl) -> str:
        """Run until the model answers without tools; return the final text.

        Raises BudgetExhaustedError, CircuitOpenError, LlmError, MaxToolRoundsError,
        ParseRetriesExceededError, FencedError, PassivationStop (internal), CancelledError.
        """
        text_parts: list[str] = []
        while True:
            if control.passivation is not None:
                await self.commit(state)
                raise PassivationStop()
            with active(self.tracing.turn(state.turn + 1), quiet=(PassivationStop,)):
                done = await self._turn(state, control, text_parts)
            if done:
                return "".join(text_parts)

    async def _turn(self, state: RunState, control: RunControl, text_parts: list[str]) -> bool:
        """One model turn (and its tool round); True when the run's answer is complete."""
        await self._maybe_compact(state)
        await self._check_llm_budget(state)
        await self.emit("turn_start", turn=state.turn + 1)
        response = await self._call_llm_controlled(state, control)
        self._add_usage(state, response.usage)
        guard = self._guard()
        if guard is not None:
            await guard.record_after_llm(self.session_id, response.usage)
        if response.tool_calls:
            await self._tool_round(state, control, response)
            text_parts.clear()
            return False
        state.messages.append(assistant_message(response.text, []))
        text_parts.append(response.text)
        if (
            response.finish_reason == "length"
            and self.options.continuation_enabled
            and state.continuations < self.options.max_continuation_turns
        ):
            state.continuations += 1
            state.messages.append({"role": "user", "content": CONTINUATION_PROMPT})
            await self.emit("continuation", turn=state.turn, count=state.continuations)
            return False
        # The answering turn is numbered like its turn_start (one past the completed rounds).
        await self.emit("turn_end", turn=state.turn + 1, usage=dict(state.usage))
        return True

    def _add_usage(self, state: RunState, usage: dict[str, int]) -> None:
        for key in ("prompt_tokens", "completion_tokens", "total_tokens"):
            state.usage[key] = state.usage.get(key, 0) + int(usage.get(key, 0))

    async def _maybe_compact(self, state: RunState) -> None:
        if not self.options.auto_compact:
            return
        before = estimate_tokens(state.messages, self.tools)
        window = self.options.context_window_tokens
        threshold = self.options.auto_compact_threshold
        if not should_compact(before, window, threshold):
            return
        new, removed = compact_messages(state.messages, self.tools, int(window * threshold / 2))
        if removed:
            state.messages[:] = new
            state.synced = 0  # rewritten, not appended to: the store must compare
            after = estimate_tokens(state.messages, self.tools)
            await self.emit(
                "context_compacted",
                before_tokens=before,
                after_tokens=after,
                removed_messages=removed,
            )

    async def _check_llm_budget(self, state: RunState) -> None:
        guard = self._guard()
        if guard is None:
            return
        decision = await guard.check_before_llm(
            self.session_id, estimate_tokens(state.messages, self.tools)
        )
        if decision.kind == "soft":
            await self.emit("budget_threshold_hit", **threshold_event_fields(decision, "soft"))
        elif decision.kind == "deny":
            await self.emit("budget_threshold_hit", **threshold_event_fields(decision, "hard"))
            raise BudgetExhaustedError(decision.resource, decision.reason)

    async def _call_llm_controlled(self, state: RunState, control: RunControl) -> LlmResponse:
        """The LLM call as a sub-task, so passivation can cancel it (it has no side effects)."""
        if control.passivation is not None:  # requested while compacting / asking the guard
            await self.commit(state)
            raise PassivationStop()
        control.phase = "llm"
        task = asyncio.ensure_future(self._call_llm(state))
        control.llm_task = task
        try:
            return await task
        except asyncio.CancelledError:
            if control.passivation is not None and task.cancelled():
                current = asyncio.current_task()
                if current is None or not current.cancelling():
                    await self.commit(state)
                    raise PassivationStop() from None
            raise
        finally:
            task.cancel()
            control.llm_task = None
            control.phase = "idle"

    async def _call_llm(self, state: RunState) -> LlmResponse:
        async def on_text(delta: str) -> None:
            await self.emit("text_delta", text=delta)

        while True:
            if not self.breaker.allows(time.monotonic()):
                raise CircuitOpenError(self.breaker.failures, self.breaker.last_error)
            try:
                with active(self.tracing.llm(self.llm.model)) as span:
                    response = await self.llm.complete(state.messages, self.tools, on_text)
                    self.tracing.llm_done(span, response.usage, response.finish_reason)
            except LlmTransientError as exc:
                delay_ms = self.breaker.record_failure(time.monotonic(), str(exc))
                if delay_ms is None:
                    raise CircuitOpenError(self.breaker.failures, str(exc)) from exc
                await self.emit(
                    "llm_retry", attempt=self.breaker.failures, delay_ms=delay_ms, message=str(exc)
                )
                await asyncio.sleep(delay_ms / 1000)
                continue
            self.breaker.record_success()
            return response

    async def _tool_round(
        self, state: RunState, control: RunControl, response: LlmResponse
    ) -> None:
        calls, parse_errors = parse_tool_calls(response.tool_calls)
        amsg = assistant_message(response.text, response.tool_calls)
        if parse_errors:
            state.parse_failures += 1
            detail = "; ".join(f"{cid}: {err}" for cid, err in parse_errors.items())
            if state.parse_failures > self.options.max_parse_retries:
                raise ParseRetriesExceededError(self.options.max_parse_retries, detail)
            state.messages.append(amsg)
            for call in calls:
                err = parse_errors.get(call.id)
                content = (
                    f"Error: the arguments of this {call.name} call are not valid JSON ({err}). "
                    "Send the call again with a valid JSON object."
                    if err
                    else "Not executed: another tool call of this reply had malformed arguments."
                )
                state.messages.append({"role": "tool", "tool_call_id": call.id, "content": content})
            await self.emit("parse_retry", attempt=state.parse_failures, message=detail)
            return
        if state.turn - state.start_turn >= self.options.max_tool_rounds:
            raise MaxToolRoundsError(self.options.max_tool_rounds)
        state.turn += 1
        turn = state.turn
        if (store := self.store) is not None:
            await self.persist(
                "begin_round",
                lambda: store.begin_round(self.session_id, state.run_id, turn, amsg),
                fatal=True,
            )
        results = await self.execute_calls(state, control, calls)
        state.tool_calls_count += len(calls)
        state.messages.append(amsg)
        state.messages.extend(tool_message(r) for r in results)
        await self.commit(state)
        await self.emit("turn_end", turn=turn, usage=dict(state.usage))

    async def execute_calls(
        self,
        state: RunState,
        control: RunControl,
        calls: list[ToolCall],
        prefilled: dict[str, ToolResult] | None = None,
    ) -> list[ToolResult]:
        """Pre-checks (hooks, budget) then the executor; returns results in call order.

        ``prefilled`` results (resume: recorded/recovered/interrupted) are journaled and emitted
        but not run. Every result is journaled with ``record_tool_result`` as it arrives.
        """
        turn = state.turn
        results: dict[str, ToolResult] = dict(prefilled or {})

        spans = self.tracing.tools([(c.id, c.name, c.lane) for c in calls])

        async def on_result(res: ToolResult) -> None:
            results[res.tool_call_id] = res
            worker = res.metadata.get("worker")
            self.tracing.tool_done(spans.get(res.tool_call_id), res.exit_code, res.is_error, worker)
            if (store := self.store) is not None:
                record = result_record(res)
                await self.persist(
                    "record_tool_result",
                    lambda: store.record_tool_result(
                        self.session_id, state.run_id, turn, res.tool_call_id, record
                    ),
                )
            await self.emit(
                "tool_end",
                id=res.tool_call_id,
                name=res.name,
                output=res.output,
                exit_code=res.exit_code,
            )

        with self.tracing.round(spans):
            await self._run_calls(state, control, calls, results, on_result)
        return [results[c.id] for c in calls]

    async def _run_calls(
        self,
        state: RunState,
        control: RunControl,
        calls: list[ToolCall],
        results: dict[str, ToolResult],
        on_result: Callable[[ToolResult], Awaitable[None]],
    ) -> None:
        """Pre-check the calls without a result yet, then run the approved ones."""
        turn = state.turn
        approved: list[ToolCall] = []
        refused: list[ToolResult] = []
        for call in calls:
            if call.id in results:
                continue
            refusal = await self._precheck(call)
            if refusal is None:
                approved.append(call)
            else:
                refused.append(ToolResult(call.id, call.name, refusal, exit_code=1, is_error=True))
        for call in calls:
            await self.emit("tool_start", id=call.id, name=call.name)
        for res in [*(results[c.id] for c in calls if c.id in results), *refused]:
            await on_result(res)
        if approved:
            ctx = ToolContext(
                self.session_id, self.workspace, state.run_id, turn, self.options.tool_timeout_ms
            )
            control.phase = "tools"
            try:
                await self._executor().execute(approved, ctx, on_result)
            finally:
                control.phase = "idle"

    async def _precheck(self, call: ToolCall) -> str | None:
        """Hooks then budget guard; the refusal text for the model, or None to run it."""
        blocked = await self.gate(
            "pre_tool_use", id=call.id, name=call.name, arguments=call.arguments
        )
        if blocked is not None:
            return blocked
        guard = self._guard()
        if guard is None:
            return None
        decision = await guard.check_before_tool(self.session_id, call.name)
        if decision.kind == "soft":
            await self.emit("budget_threshold_hit", **threshold_event_fields(decision, "soft"))
        elif decision.kind == "deny":
            await self.emit("budget_threshold_hit", **threshold_event_fields(decision, "hard"))
            return str(BudgetExhaustedError(decision.resource, decision.reason))
        return None
