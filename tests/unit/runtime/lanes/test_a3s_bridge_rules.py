"""The A3S bridge never lets the SDK fall back to running a tool locally: a failed or missing
worker reply is answered ``success=True`` with an "unknown outcome" error, before the task's own
timeout, and tasks still open when the bridge stops are answered too. (The SDK session here is a
stand-in with its three calls; tests/integration/lanes/test_a3s_bridge.py uses the real one.)"""

from __future__ import annotations

import asyncio
from typing import Any

from session_runtime.a3s_bridge import A3sBridge, result_of, task_of
from session_runtime.lanes.external import ExternalReply, ExternalTask, ReplySink
from session_runtime.tools.base import ToolContext


class FakeA3sSession:
    def __init__(self, tasks: list[dict[str, Any]]) -> None:
        self.tasks = tasks
        self.completions: list[tuple[str, bool, dict[str, Any]]] = []

    def pending_external_tasks(self) -> list[dict[str, Any]]:
        done = {c[0] for c in self.completions}
        return [t for t in self.tasks if t["task_id"] not in done]

    def complete_external_task(self, task_id: str, success: bool, result: dict[str, Any]) -> bool:
        self.completions.append((task_id, success, result))
        return True


class FakeTransport:
    reply_grace_ms = 0

    def __init__(self) -> None:
        self.sink: ReplySink | None = None
        self.published: list[ExternalTask] = []
        self.settled: list[str] = []
        self.changed = asyncio.Condition()

    async def wait_published(self, n: int) -> None:
        async with self.changed:
            await self.changed.wait_for(lambda: len(self.published) >= n)

    async def start(self, sink: ReplySink) -> None:
        self.sink = sink

    async def publish(self, task: ExternalTask, ctx: ToolContext) -> None:
        self.published.append(task)
        async with self.changed:
            self.changed.notify_all()

    async def settle(self, reply: ExternalReply) -> None:
        self.settled.append(reply.task_id)

    async def find_reply(self, tool_call_id: str) -> ExternalReply | None:
        return None

    async def close(self) -> None:
        return None


def raw(task_id: str, timeout_ms: int = 60_000) -> dict[str, Any]:
    return {
        "task_id": task_id,
        "session_id": "s",
        "lane": "Execute",
        "command_type": "bash",
        "payload": {"command": "true"},
        "timeout_ms": timeout_ms,
    }


def test_pure_mappings() -> None:
    task = task_of(raw("s-1"), 1_000, margin_ms=2_000)
    # the worker's deadline comes two margins before A3S's timeout (61,000)
    assert (task.tool_call_id, task.lane, task.deadline_ms) == ("s-1", "execute", 57_000)
    ok = ExternalReply("s-1", "s-1", True, {"output": "hi", "exit_code": 3})
    assert result_of(ok) == {"output": "hi", "exit_code": 3}
    lost = result_of(ExternalReply("s-1", "s-1", False, error="worker lost"))
    assert (
        lost["exit_code"] == 1 and "worker lost" in lost["output"] and "unknown" in lost["output"]
    )


async def _serve(bridge: A3sBridge, until: Any) -> None:
    stop = asyncio.Event()
    task = asyncio.create_task(bridge.run(stop))
    for _ in range(400):
        await asyncio.sleep(0.005)
        if until():
            break
    stop.set()
    await task


async def test_replies_complete_tasks_and_failures_are_never_success_false() -> None:
    session, transport = FakeA3sSession([raw("s-1"), raw("s-2")]), FakeTransport()
    bridge = A3sBridge(session, transport, "/ws")

    async def answer() -> None:
        await transport.wait_published(2)
        assert transport.sink is not None
        await transport.sink(ExternalReply("s-1", "s-1", True, {"output": "ok", "exit_code": 0}))
        await transport.sink(ExternalReply("s-2", "s-2", False, error="worker lost"))

    replier = asyncio.create_task(answer())
    await _serve(bridge, lambda: len(session.completions) == 2)
    await replier
    assert [t.task_id for t in transport.published] == ["s-1", "s-2"]  # each published once
    assert [c[1] for c in session.completions] == [True, True]
    assert session.completions[0][2] == {"output": "ok", "exit_code": 0}
    assert "unknown" in session.completions[1][2]["output"]
    assert transport.settled == ["s-1", "s-2"]


async def test_a_task_without_a_reply_is_answered_before_its_timeout() -> None:
    now = [0]
    session, transport = FakeA3sSession([raw("s-1", timeout_ms=10_000)]), FakeTransport()
    bridge = A3sBridge(session, transport, "/ws", clock=lambda: now[0], safety_margin_ms=2_000)

    async def time_passes() -> None:
        await transport.wait_published(1)
        now[0] = 8_000  # the SDK would run it locally at 10,000

    ticker = asyncio.create_task(time_passes())
    await _serve(bridge, lambda: bool(session.completions))
    await ticker
    [(task_id, success, result)] = session.completions
    assert (task_id, success) == ("s-1", True) and "no reply" in result["output"]


async def test_open_tasks_are_answered_when_the_bridge_stops() -> None:
    session, transport = FakeA3sSession([raw("s-1")]), FakeTransport()
    bridge = A3sBridge(session, transport, "/ws")
    await _serve(bridge, lambda: bool(transport.published))
    assert [(c[0], c[1]) for c in session.completions] == [("s-1", True)]
    assert "stopped" in session.completions[0][2]["output"]
