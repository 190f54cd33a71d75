"""Shapes shared by the agent loop, the tools and the lane queue.

This module owns the *seam* between the agent loop (``session_runtime.agent``) and whatever runs
tool calls: the built-in direct executor (``session_runtime.tools``) or the lane queue
(``session_runtime.lanes``), which may send execute-lane calls to LaneWorker pods over Redis.

The loop does every pre-execution check (hooks, budget guard, argument parsing) *before* it hands
calls to a :class:`ToolExecutor`; an executor only runs what it is given.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

Lane = Literal["control", "query", "execute", "generate"]

#: Tool name -> lane, from the A3S lane-queue contract: read-only tools go to ``query``; every
#: other tool (bash, write, edit, ...) goes to ``execute``; LLM calls are ``generate``.
QUERY_TOOLS: frozenset[str] = frozenset({"read", "glob", "ls", "grep", "list_files", "search"})


def lane_for_tool(name: str) -> Lane:
    """Return the lane a tool call runs in (A3S contract: query tools vs. everything else)."""
    return "query" if name in QUERY_TOOLS else "execute"


@dataclass(frozen=True, slots=True)
class ToolCall:
    """One tool call the model asked for, after argument parsing.

    ``id`` is the model's ``tool_call_id``; ``arguments`` are the parsed JSON arguments exactly as
    the model sent them (A3S ExternalTask ``payload``).
    """

    id: str
    name: str
    arguments: dict[str, Any]

    @property
    def lane(self) -> Lane:
        """The lane this call runs in (:func:`lane_for_tool`, the A3S contract)."""
        return lane_for_tool(self.name)


@dataclass(frozen=True, slots=True)
class ToolResult:
    """The outcome of one tool call as the model will see it.

    ``output`` is the text given back to the model; ``exit_code`` is 0 on success (bash: the
    process exit code). ``is_error`` marks a refused or failed call (path escape, timeout, budget
    deny, interrupted). ``metadata`` carries transport details (worker name, timings) and is never
    shown to the model.
    """

    tool_call_id: str
    name: str
    output: str
    exit_code: int = 0
    is_error: bool = False
    metadata: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class ToolContext:
    """What an executor needs to know about the caller: the session, its workspace and the run.

    ``workspace`` is an absolute, resolved directory; tools must refuse paths outside it.
    ``timeout_ms`` is the per-tool timeout from ``SessionOptions.tool_timeout_ms`` (None = none).
    """

    session_id: str
    workspace: str
    run_id: str
    turn: int
    timeout_ms: int | None = None


#: Called by an executor as each result arrives (before the whole batch is done), so the store can
#: journal it at once (docs/architecture.md §6, "each tool result is journaled as it arrives").
ResultCallback = Callable[[ToolResult], Awaitable[None]]


class ToolExecutor(Protocol):
    """Runs a batch of approved tool calls of one model turn.

    Contract (A3S lane queue): query-lane calls of one batch may run in parallel, all other calls
    run in the order given. Returns one result per call, in the order of ``calls``. Never raises for
    a tool's own failure: that becomes a :class:`ToolResult` with ``is_error=True``.
    """

    async def execute(
        self, calls: Sequence[ToolCall], ctx: ToolContext, on_result: ResultCallback
    ) -> list[ToolResult]:
        """Run ``calls`` (see the class docstring for order and errors); ``on_result`` is awaited
        with each result as it arrives. Returns one result per call, in the order of ``calls``."""
        ...

    async def recover(self, call: ToolCall, ctx: ToolContext) -> ToolResult | None:
        """Return a result delivered for ``call`` while this process was not running (for example
        a LaneWorker reply found on the session's reply stream after resume), or None."""
        ...
