"""The lane seam: with ``queue_config`` the session builds the real LaneQueue around its direct
executor, hands it its event emitter, and delegates the queue API to it; without one, the queue
API returns neutral values."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from session_runtime.lanes import LaneHandlerConfig, LaneQueue, SessionQueueConfig
from tests.unit.runtime.conftest import opts


async def test_external_execute_lane_through_the_session(
    scripted: Any, agent_for: Any, workspace: Path
) -> None:
    srv = await scripted(
        [
            {
                "tool_calls": [
                    {"name": "bash", "arguments": {"command": "echo hi"}},
                    {"name": "ls", "arguments": {}},
                ]
            },
            {"text": "worker did it"},
        ]
    )
    cfg = SessionQueueConfig(
        lane_handlers={"execute": LaneHandlerConfig(mode="external", timeout_ms=30_000)}
    )
    session = agent_for(srv).session(str(workspace), opts(queue_config=cfg, tenant_id="t"))
    assert isinstance(session.executor, LaneQueue)
    pending_events: list[dict[str, Any]] = []
    got_task = asyncio.Event()

    def on_pending(ev: dict[str, Any]) -> None:
        pending_events.append(ev)
        got_task.set()

    session.register_hook("ext", "external_task_pending", on_pending)
    run = asyncio.create_task(session.send_async("use a worker"))
    await got_task.wait()
    tasks = session.pending_external_tasks()
    assert [t["command_type"] for t in tasks] == ["bash"]
    assert pending_events[0]["tenant_id"] == "t"  # lane events are stamped like any other
    assert pending_events[0]["session_id"] == session.session_id
    assert session.queue_stats()["external_pending"] == 1
    assert session.complete_external_task(
        tasks[0]["task_id"], True, {"output": "from worker", "exit_code": 0}
    )
    result = await run
    assert result.text == "worker did it" and result.tool_calls_count == 2
    tool_msgs = [m["content"] for m in srv.requests[1]["messages"] if m["role"] == "tool"]
    assert tool_msgs[0] == "from worker"
    assert not (workspace / "hi").exists()


async def test_without_queue_config_there_is_no_queue(
    scripted: Any, agent_for: Any, workspace: Path
) -> None:
    srv = await scripted([{"text": "x"}])
    session = agent_for(srv).session(str(workspace), opts())
    assert session.pending_external_tasks() == []
    assert session.queue_stats() == {
        "total_pending": 0,
        "total_active": 0,
        "external_pending": 0,
        "lanes": {},
    }
    assert session.queue_metrics() is None and session.dead_letters() == []
    assert session.complete_external_task("t", True, None, None) is False
    session.set_lane_handler("execute", "external", 1000)  # no queue: nothing to change


async def test_injected_queue_is_bound_to_the_session_events(
    scripted: Any, agent_for: Any, workspace: Path
) -> None:
    from session_runtime.tools import DirectExecutor

    srv = await scripted(
        [{"tool_calls": [{"name": "bash", "arguments": {"command": "echo x"}}]}, {"text": "ok"}]
    )
    cfg = SessionQueueConfig(
        lane_handlers={"execute": LaneHandlerConfig(mode="hybrid", timeout_ms=30_000)}
    )
    queue = LaneQueue(cfg, runner=DirectExecutor())  # built before the session, like the pod
    session = agent_for(srv).session(str(workspace), opts(tenant_id="t9"), executor=queue)
    assert session.executor is queue
    events = [ev async for ev in session.stream_async("hybrid")]
    pending = [e for e in events if e["type"] == "external_task_pending"]
    assert pending and pending[0]["tenant_id"] == "t9"
    assert events[-1]["type"] == "agent_end" and events[-1]["text"] == "ok"


async def test_closing_the_session_closes_its_injected_queue(
    scripted: Any, agent_for: Any, workspace: Path
) -> None:
    """The session owns the lane queue it was given: closing it fails the queue's pending
    external tasks and stops its transport (``LaneQueue.close``), and the queue API reaches it."""
    from session_runtime.tools import DirectExecutor

    srv = await scripted([{"text": "ok"}])
    cfg = SessionQueueConfig(
        lane_handlers={"execute": LaneHandlerConfig(mode="external", timeout_ms=30_000)}
    )
    queue = LaneQueue(cfg, runner=DirectExecutor())
    session = agent_for(srv).session(str(workspace), opts(), executor=queue)
    assert session.queue_stats()["total_pending"] == 0
    session.set_lane_handler("execute", "internal")
    assert queue.queue_stats()["lanes"]["execute"]["handler_mode"] == "internal"
    await session.close_async()
    assert queue._closed
