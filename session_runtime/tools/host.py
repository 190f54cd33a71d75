"""Host tools: tools the embedding host provides, run in the session's own process.

Owned by ``session_runtime.tools``. A *Berth* extension of the A3S tool set: a
:class:`HostTool` is an OpenAI function definition plus a coroutine. The session advertises the
definitions next to the built-in tools and wraps its executor in :class:`HostToolExecutor`,
which runs host-tool calls itself and hands every other call to the inner executor (the direct
executor or the lane queue). A host tool therefore never goes to a LaneWorker: it may use what
only the session process holds (the peer tool uses the session's API token to reach the
operator's front door), and the model never sees those credentials.

Ordering keeps the A3S lane contract: the calls between two host-tool calls go to the inner
executor as one batch, in order; each host-tool call runs alone, in the order the model gave.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any

from session_runtime.tools.base import (
    ResultCallback,
    ToolCall,
    ToolContext,
    ToolExecutor,
    ToolResult,
)

HostToolRun = Callable[[ToolCall, ToolContext], Awaitable[ToolResult]]


@dataclass(frozen=True, slots=True)
class HostTool:
    """``definition``: an OpenAI function tool (``{"type": "function", "function": {"name",
    ...}}``); ``run(call, ctx)``: its implementation, which must turn its own failures into an
    error :class:`ToolResult` rather than raise."""

    definition: dict[str, Any]
    run: HostToolRun

    @property
    def name(self) -> str:
        """The function name the model calls."""
        return str(self.definition["function"]["name"])


class HostToolExecutor:
    """A :class:`~session_runtime.tools.base.ToolExecutor` running ``tools`` here and the rest
    through ``inner`` (see the module docstring). Raises ValueError for a host tool whose name
    is taken twice."""

    def __init__(self, inner: ToolExecutor, tools: Sequence[HostTool]) -> None:
        self.inner = inner
        self.tools = {t.name: t for t in tools}
        if len(self.tools) != len(tools):
            raise ValueError("two host tools share a name")

    async def _run_host(self, call: ToolCall, ctx: ToolContext) -> ToolResult:
        try:
            return await self.tools[call.name].run(call, ctx)
        except Exception as exc:  # a host tool's own failure is a tool error, never a crash
            return ToolResult(
                call.id, call.name, f"Tool '{call.name}' failed: {exc}", exit_code=1, is_error=True
            )

    async def execute(
        self, calls: Sequence[ToolCall], ctx: ToolContext, on_result: ResultCallback
    ) -> list[ToolResult]:
        """Run ``calls``; results in call order; ``on_result`` fires as each arrives."""
        results: dict[str, ToolResult] = {}
        batch: list[ToolCall] = []

        async def flush() -> None:
            if batch:
                for res in await self.inner.execute(list(batch), ctx, on_result):
                    results[res.tool_call_id] = res
                batch.clear()

        for call in calls:
            if call.name not in self.tools:
                batch.append(call)
                continue
            await flush()
            res = await self._run_host(call, ctx)
            results[call.id] = res
            await on_result(res)
        await flush()
        return [results[c.id] for c in calls]

    async def recover(self, call: ToolCall, ctx: ToolContext) -> ToolResult | None:
        """A host tool leaves nothing behind to recover (None); others: the inner executor's."""
        if call.name in self.tools:
            return None
        return await self.inner.recover(call, ctx)
