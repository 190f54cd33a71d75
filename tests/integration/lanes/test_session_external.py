"""A real Session (scripted OpenAI-compatible model) whose execute lane is external, served by two
``berth-worker`` processes over Redis Streams — wired the way the session pod wires it."""

from __future__ import annotations

import asyncio
import contextlib
import time
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from berth_operator.stream_pressure import stream_pressure
from redis.asyncio import Redis

from berth_contract.taskauth import derive_session_key
from session_runtime import Agent, SessionOptions
from session_runtime.lanes import LaneQueue, SessionQueueConfig
from session_runtime.llm.scripted import ScriptedServer
from session_runtime.store import MemorySessionStore
from session_runtime.tools import DirectExecutor
from session_runtime.transport import GROUP, RedisTaskTransport, task_stream

from .conftest import MASTER, Workers
from .test_redis_lanes import NS, consumers, until

pytestmark = [pytest.mark.redis, pytest.mark.timeout(120)]

SCRIPT = {
    "turns": [
        {
            "tool_calls": [
                {"name": "write", "arguments": {"file_path": "app.py", "content": "print(1)\n"}},
                {"name": "bash", "arguments": {"command": "python3 app.py > out.txt; echo ran"}},
                {"name": "read", "arguments": {"file_path": "out.txt"}},
                {"name": "glob", "arguments": {"pattern": "*.py"}},
            ]
        },
        {
            "tool_calls": [
                {
                    "name": "edit",
                    "arguments": {"file_path": "app.py", "old_string": "1", "new_string": "2"},
                },
                {"name": "bash", "arguments": {"command": "python3 app.py; echo x >> side.txt"}},
            ]
        },
        {"text": "All done."},
    ]
}


@pytest.fixture
async def model() -> AsyncIterator[ScriptedServer]:
    srv = ScriptedServer(SCRIPT)
    await srv.start()
    yield srv
    await srv.stop()


async def test_session_with_external_execute_lane_and_two_workers(
    redis: Redis[Any], shared_root: Path, workers_factory: Any, model: ScriptedServer
) -> None:
    workers: Workers = workers_factory(NS, "pool-session")
    workers.start("w-1")
    workers.start("w-2")
    await until(lambda: consumers(redis, "pool-session", 2), "both workers up")
    workspace = shared_root / "workspaces" / NS / "s1"
    workspace.mkdir(parents=True)

    # What berth-session does for spec.lanes.execute = {mode: external, laneWorkerRef: pool-session}
    config = SessionQueueConfig().with_lane_features()
    config.set_lane_handler("execute", "external", 30_000)
    transport = RedisTaskTransport(
        redis,
        namespace=NS,
        session_name="s1",
        session_uid=uuid.uuid4().hex,
        epoch=1,
        lane_workers={"execute": "pool-session"},
        shared_root=str(workspace),
        task_key=derive_session_key(MASTER, NS, "s1"),
    )
    queue = LaneQueue(config, runner=DirectExecutor(), transport=transport)
    agent = Agent.create({"providers": {"openai": {"base_url": model.base_url, "api_key": "k"}}})
    session = agent.session(str(workspace), SessionOptions(llm_backoff_ms=1), executor=queue)
    events: list[dict[str, Any]] = []

    def record(event: dict[str, Any]) -> None:
        events.append(event)

    session.register_hook("lanes", "external_task_pending", record)
    result = await session.send_async("build and run it")

    assert result.text == "All done." and result.tool_calls_count == 6
    assert (workspace / "app.py").read_text() == "print(2)\n"
    assert (workspace / "out.txt").read_text() == "1\n"
    assert (workspace / "side.txt").read_text() == "x\n"  # ran exactly once
    tool_outputs = [m["content"] for m in model.requests[2]["messages"] if m["role"] == "tool"]
    assert "ran" in tool_outputs[1] and "1" in tool_outputs[2] and "app.py" in tool_outputs[3]
    assert tool_outputs[5].startswith("2")
    # bash/write/edit went to the workers (4 tasks), read/glob ran in the session.
    assert sorted(e["command_type"] for e in events) == ["bash", "bash", "edit", "write"]
    assert session.dead_letters() == []
    stats = session.queue_stats()
    assert stats["lanes"]["execute"]["completed"] == 4 and stats["lanes"]["query"]["completed"] == 2
    pressure = await stream_pressure(redis, task_stream(NS, "pool-session"), GROUP)
    assert pressure["backlog"] == 0 and pressure["inFlight"] == 0
    await agent.close_async()


RESUME_SCRIPT = {
    "turns": [
        {
            "tool_calls": [
                {
                    "id": "call_gated",
                    "name": "bash",
                    "arguments": {
                        "command": "echo run >> count.txt; "
                        "while [ ! -f go ]; do sleep 0.05; done; echo finished-on-worker"
                    },
                }
            ]
        },
        {"text": "Resumed with the worker's result."},
    ]
}


async def test_result_delivered_while_passivated_is_used_by_resumed_session(
    redis: Redis[Any], shared_root: Path, workers_factory: Any
) -> None:
    model = ScriptedServer(RESUME_SCRIPT)
    await model.start()
    workers: Workers = workers_factory(NS, "pool-passivate")
    workers.start("w-p")
    workspace = shared_root / "workspaces" / NS / "s2"
    workspace.mkdir(parents=True)
    uid = uuid.uuid4().hex
    store = MemorySessionStore()  # stands in for the shared-volume store

    def pod(epoch: int) -> tuple[Agent, LaneQueue]:
        config = SessionQueueConfig().with_lane_features()
        config.set_lane_handler("execute", "external", 60_000)
        transport = RedisTaskTransport(
            redis,
            namespace=NS,
            session_name="s2",
            session_uid=uid,
            epoch=epoch,
            lane_workers={"execute": "pool-passivate"},
            shared_root=str(workspace),
            task_key=derive_session_key(MASTER, NS, "s2"),
        )
        queue = LaneQueue(config, runner=DirectExecutor(), transport=transport)
        agent = Agent.create(
            {"providers": {"openai": {"base_url": model.base_url, "api_key": "k"}}}
        )
        return agent, queue

    agent1, queue1 = pod(1)
    options = SessionOptions(llm_backoff_ms=1, session_store=store, session_id="s2")
    first = agent1.session(str(workspace), options, executor=queue1)
    run = asyncio.create_task(first.send_async("run the slow thing"))
    await until(lambda: (workspace / "count.txt").exists(), "the tool started on the worker")
    # Drain: the deadline passes while the worker still runs the tool.
    outcome = await first.passivate_async("node_drain", deadline_ms=first_now_ms() + 100)
    assert outcome["outcome"] in {"passivated", "timeout"}
    run_id = outcome["run_id"]
    with contextlib.suppress(Exception):
        await run  # the passivated run ends with RunPassivatedError
    await agent1.close_async()

    (workspace / "go").write_text("")  # the worker finishes while no session pod runs
    reply_stream = f"berth:{NS}:s:{{{uid}}}:results"
    await until(lambda: _has_reply(redis, reply_stream), "the worker replied")

    agent2, queue2 = pod(2)
    resumed = agent2.resume_session(
        "s2",
        SessionOptions(llm_backoff_ms=1, session_store=store),
        executor=queue2,
        workspace=str(workspace),
    )
    result = await resumed.resume_run_async(run_id)
    assert result.text == "Resumed with the worker's result."
    tool_msgs = [m["content"] for m in model.requests[-1]["messages"] if m["role"] == "tool"]
    assert tool_msgs and "finished-on-worker" in tool_msgs[-1]
    assert (workspace / "count.txt").read_text().splitlines() == ["run"]  # not re-run
    await agent2.close_async()
    await model.stop()


def first_now_ms() -> int:
    return int(time.time() * 1000)


async def _has_reply(redis: Redis[Any], stream: str) -> bool:
    return int(await redis.xlen(stream)) >= 1
