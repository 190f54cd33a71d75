"""The direct tool executor: runs tool calls in this process (no lane queue).

Owned by ``session_runtime.tools``. The session uses it when ``SessionOptions.queue_config`` is
None, and hands it to the lane queue as its ``runner`` for internal execution otherwise.

Ordering (A3S lane contract): consecutive query-lane calls of a batch run in parallel; every
other call runs alone, in the order the model gave. Each call gets ``ctx.timeout_ms`` (the
per-tool timeout; None = none): past it the call is cancelled (a bash process group is killed)
and its result is an error ``Tool '<name>' timed out after <n> ms``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

from session_runtime.tools.base import ResultCallback, ToolCall, ToolContext, ToolResult
from session_runtime.tools.builtin import run_tool


def batch_segments(calls: Sequence[ToolCall]) -> list[list[ToolCall]]:
    """Split ``calls`` into runs: a maximal group of consecutive query-lane calls, or one call."""
    segments: list[list[ToolCall]] = []
    for call in calls:
        if call.lane == "query" and segments and segments[-1][0].lane == "query":
            segments[-1].append(call)
        else:
            segments.append([call])
    return segments


class DirectExecutor:
    """A :class:`~session_runtime.tools.base.ToolExecutor` running the built-in tools locally."""

    async def run_one(self, call: ToolCall, ctx: ToolContext) -> ToolResult:
        """Run one call under the per-tool timeout; never raises for the tool's own failure."""
        coro = run_tool(call.name, call.arguments, ctx.workspace, call.id)
        if ctx.timeout_ms is None:
            return await coro
        try:
            return await asyncio.wait_for(coro, ctx.timeout_ms / 1000)
        except TimeoutError:
            return ToolResult(
                call.id,
                call.name,
                f"Tool '{call.name}' timed out after {ctx.timeout_ms} ms",
                exit_code=124,
                is_error=True,
            )

    async def execute(
        self, calls: Sequence[ToolCall], ctx: ToolContext, on_result: ResultCallback
    ) -> list[ToolResult]:
        """Run ``calls``; return results in call order; ``on_result`` fires as each arrives."""
        results: dict[str, ToolResult] = {}

        async def one(call: ToolCall) -> None:
            res = await self.run_one(call, ctx)
            results[call.id] = res
            await on_result(res)

        for segment in batch_segments(calls):
            if len(segment) == 1:
                await one(segment[0])
            else:
                async with asyncio.TaskGroup() as tg:
                    for call in segment:
                        tg.create_task(one(call))
        return [results[c.id] for c in calls]

    async def recover(self, call: ToolCall, ctx: ToolContext) -> ToolResult | None:
        """Local execution leaves nothing behind to recover: always None."""
        return None
