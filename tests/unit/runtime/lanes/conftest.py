"""Test doubles for the lane queue: a real ToolExecutor whose calls the test opens one by one."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

import pytest

from session_runtime.tools.base import ResultCallback, ToolCall, ToolContext, ToolResult

CTX = ToolContext(session_id="s-1", workspace="/nonexistent", run_id="run-1", turn=1)


class ManualClock:
    """Epoch-ms clock the test moves by hand."""

    def __init__(self, start: int = 1_000_000) -> None:
        self.now = start

    def __call__(self) -> int:
        return self.now

    def advance(self, ms: int) -> None:
        self.now += ms


class GateRunner:
    """Runs a call when the test opens its gate (or at once when ``auto``); records start order,
    the peak number of calls running at once, and fails calls listed in ``fail``."""

    def __init__(self, auto: bool = True) -> None:
        self.auto = auto
        self.started: list[str] = []
        self.calls: dict[str, int] = {}
        self.running = 0
        self.peak = 0
        self.fail: dict[str, int] = {}  # call id -> how many more attempts raise
        self.gates: dict[str, asyncio.Event] = {}
        self.hang: set[str] = set()

    def gate(self, call_id: str) -> asyncio.Event:
        return self.gates.setdefault(call_id, asyncio.Event())

    async def execute(
        self, calls: Sequence[ToolCall], ctx: ToolContext, on_result: ResultCallback
    ) -> list[ToolResult]:
        out = []
        for call in calls:
            self.started.append(call.id)
            self.calls[call.id] = self.calls.get(call.id, 0) + 1
            self.running += 1
            self.peak = max(self.peak, self.running)
            try:
                if call.id in self.hang:
                    await asyncio.Event().wait()
                if not self.auto:
                    await self.gate(call.id).wait()
                else:
                    await asyncio.sleep(0)
                if self.fail.get(call.id, 0) > 0:
                    self.fail[call.id] -= 1
                    raise OSError(f"transient failure of {call.id}")
            finally:
                self.running -= 1
            result = ToolResult(call.id, call.name, f"ran {call.id}")
            await on_result(result)
            out.append(result)
        return out

    async def recover(self, call: ToolCall, ctx: ToolContext) -> ToolResult | None:
        return None


class Events:
    def __init__(self) -> None:
        self.items: list[dict[str, Any]] = []

    async def __call__(self, event: dict[str, Any]) -> None:
        self.items.append(event)

    def of(self, kind: str) -> list[dict[str, Any]]:
        return [e for e in self.items if e["type"] == kind]


async def until(predicate: Any, spins: int = 10_000) -> None:
    """Yield to the loop until ``predicate()`` holds (no wall-clock assertion; bounded spins)."""
    for _ in range(spins):
        if predicate():
            return
        await asyncio.sleep(0)
    raise AssertionError("condition not reached")


@pytest.fixture
def events() -> Events:
    return Events()
