"""Resume decisions: checkpoint checks and how each call of an unfinished round is settled.

Owned by ``session_runtime.agent``; ``Session.resume_run`` uses it. docs/architecture.md §6 "intent
before action": on resume, a call of the pending round takes, in order,

1. its result recorded in the journal (``journal``);
2. a result the executor recovers, e.g. a LaneWorker reply that arrived while the session was
   down (``recovered``);
3. a re-run, if it is a query-lane (read-only) tool (``rerun``);
4. otherwise an error result telling the model the call was interrupted and its side effects are
   unknown (``interrupted``).

No tool ever runs twice behind the model's back.
"""

from __future__ import annotations

import json
from typing import Any, Literal

from session_runtime.errors import CheckpointError
from session_runtime.llm.client import RawToolCall
from session_runtime.store.base import LOOP_CHECKPOINT_SCHEMA_VERSION, LoopCheckpoint, PendingRound
from session_runtime.tools.base import (
    ToolCall,
    ToolContext,
    ToolExecutor,
    ToolResult,
    lane_for_tool,
)

Settlement = Literal["journal", "recovered", "rerun", "interrupted"]

INTERRUPTED_OUTPUT = (
    "Error: this tool call was interrupted (the session stopped while it was running) and its "
    "side effects are unknown. Inspect the workspace before deciding whether to run it again."
)


def ensure_loadable(checkpoint: LoopCheckpoint) -> None:
    """Reject a checkpoint of a newer schema (the store's ``ensure_loadable`` if it has one).
    Raises CheckpointError with the contract's message."""
    check = getattr(checkpoint, "ensure_loadable", None)
    if callable(check):
        check()
        return
    if checkpoint.schema_version > LOOP_CHECKPOINT_SCHEMA_VERSION:
        raise CheckpointError(
            f"loop checkpoint for run {checkpoint.run_id} has schema version "
            f"{checkpoint.schema_version} but this build supports at most "
            f"{LOOP_CHECKPOINT_SCHEMA_VERSION}; upgrade the runtime to resume it"
        )


def ensure_session(checkpoint: LoopCheckpoint, session_id: str) -> None:
    """Refuse another session's checkpoint (the store's ``ensure_session`` if it has one)."""
    check = getattr(checkpoint, "ensure_session", None)
    if callable(check):
        check(session_id)
        return
    if checkpoint.session_id != session_id:
        raise CheckpointError(
            f"loop checkpoint for run {checkpoint.run_id} belongs to session "
            f"'{checkpoint.session_id}', not '{session_id}'"
        )


def last_user_prompt(checkpoint: LoopCheckpoint) -> str:
    """The newest user message of a checkpoint ('' if none): the prompt of a resumed run whose
    original record is gone."""
    for msg in reversed(checkpoint.messages):
        if msg.get("role") == "user":
            return str(msg.get("content") or "")
    return ""


def pending_calls(assistant_message: dict[str, Any]) -> tuple[list[RawToolCall], list[ToolCall]]:
    """The raw and parsed tool calls of a journaled assistant message (bad JSON -> ``{}``)."""
    raw = [
        RawToolCall(
            str(c.get("id")),
            str(c.get("function", {}).get("name")),
            str(c.get("function", {}).get("arguments", "")),
        )
        for c in assistant_message.get("tool_calls") or []
    ]
    calls: list[ToolCall] = []
    for rc in raw:
        try:
            args = json.loads(rc.arguments) if rc.arguments.strip() else {}
        except ValueError:
            args = {}
        calls.append(ToolCall(rc.id, rc.name, args if isinstance(args, dict) else {}))
    return raw, calls


def decide(call: ToolCall, recorded: bool, recovered: bool) -> Settlement:
    """How one pending call is settled (see the module docstring for the order)."""
    if recorded:
        return "journal"
    if recovered:
        return "recovered"
    return "rerun" if lane_for_tool(call.name) == "query" else "interrupted"


async def settle_pending(
    pending: PendingRound, calls: list[ToolCall], executor: ToolExecutor, ctx: ToolContext
) -> dict[str, ToolResult]:
    """Results for the calls that must not run again (journal, recovered, interrupted); the
    calls missing from the returned dict are to be re-run. ``executor.recover`` is asked only for
    calls without a journaled result."""
    settled: dict[str, ToolResult] = {}
    for call in calls:
        rec = pending.results.get(call.id)
        recovered = None if rec is not None else await executor.recover(call, ctx)
        how = decide(call, rec is not None, recovered is not None)
        if how == "journal" and rec is not None:
            settled[call.id] = ToolResult(
                call.id,
                call.name,
                str(rec.get("output", "")),
                exit_code=int(rec.get("exit_code", 0)),
                is_error=bool(rec.get("is_error")),
                metadata={"recovered": "journal"},
            )
        elif how == "recovered" and recovered is not None:
            settled[call.id] = recovered
        elif how == "interrupted":
            settled[call.id] = ToolResult(
                call.id,
                call.name,
                INTERRUPTED_OUTPUT,
                exit_code=1,
                is_error=True,
                metadata={"recovered": "interrupted"},
            )
    return settled
