"""A real a3s-code-core 9.x session (Berth's binding) whose Execute lane is external runs write,
edit and bash on a Berth LaneWorker (a real ``berth-worker`` process and ``redis-server``)
through ``berth-a3s-bridge``'s ``A3sBridge``: every side effect happens once, in the worker's
confined workspace, and the model sees the worker's outputs. With no worker, the bridge answers
``success=True`` with an unknown-outcome error before the task's timeout and the tool never
runs in the session's process."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from redis.asyncio import Redis

from session_runtime.a3s_bridge import A3sBridge
from session_runtime.a3s_core.binding import CoreAgent, CoreResult, CoreSession
from session_runtime.llm.scripted import ScriptedServer
from session_runtime.transport import RedisTaskTransport
from session_runtime.transport.auth import derive_session_key
from tests.a3s_core_support import acl_config, binding
from tests.integration.lanes.conftest import MASTER
from tests.integration.lanes.test_a3s_bridge import SCRIPT

NS, NAME, UID, POOL = "team-a3s9", "bridged9", "uid-a3s9", "exec"


def serve_model(turns: list[dict[str, Any]]) -> Iterator[ScriptedServer]:
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    srv = ScriptedServer({"turns": turns, "on_exhausted": "repeat_last"})
    asyncio.run_coroutine_threadsafe(srv.start(), loop).result(10)
    yield srv
    asyncio.run_coroutine_threadsafe(srv.stop(), loop).result(10)
    loop.call_soon_threadsafe(loop.stop)
    thread.join(5)


@pytest.fixture
def model() -> Iterator[ScriptedServer]:
    binding()
    yield from serve_model(SCRIPT)


@pytest.fixture
def lone_bash_model() -> Iterator[ScriptedServer]:
    binding()
    turns = [
        {"tool_calls": [{"name": "bash", "arguments": {"command": "echo local > side.txt"}}]},
        {"text": "gave up"},
    ]
    yield from serve_model(turns)


def workspace_of(shared_root: Path) -> Path:
    path = shared_root / "workspaces" / NS / NAME
    path.mkdir(parents=True)
    return path


async def bridged_run(
    session: CoreSession, redis_url: str, workspace: Path, pool: str
) -> tuple[CoreResult, A3sBridge]:
    """Run ``go`` in ``session`` while an A3sBridge serves its tasks on LaneWorker ``pool``."""
    redis: Redis[Any] = Redis.from_url(redis_url)
    transport = RedisTaskTransport(
        redis,
        namespace=NS,
        session_name=NAME,
        session_uid=UID,
        epoch=1,
        lane_workers={"execute": pool},
        shared_root=str(workspace),
        task_key=derive_session_key(MASTER, NS, NAME),
    )
    bridge = A3sBridge(session, transport, str(workspace))
    stop = asyncio.Event()
    serving = asyncio.create_task(bridge.run(stop))
    try:
        result = await asyncio.wait_for(asyncio.to_thread(session.send, "go"), 120)
    finally:
        stop.set()
        await serving
        await transport.close()
        await redis.aclose()
    return result, bridge


def tool_outputs(model: ScriptedServer) -> list[str]:
    return [str(m.get("content")) for m in model.requests[-1]["messages"] if m["role"] == "tool"]


async def test_a_9x_session_runs_write_edit_bash_on_a_berth_worker_once(
    redis_url: str, shared_root: Path, workers_factory: Any, model: ScriptedServer
) -> None:
    workers_factory(NS, POOL).start("worker-1")
    workspace = workspace_of(shared_root)
    session = CoreAgent(acl_config(model.base_url)).session(
        str(workspace), external_timeout_ms=30_000
    )
    result, bridge = await bridged_run(session, redis_url, workspace, POOL)

    assert result.text == "bridged run done"
    assert (bridge.forwarded, bridge.completed) == (3, 3)
    assert (workspace / "notes.txt").read_text() == "v2\n"
    assert (workspace / "side.txt").read_text() == "once\n"  # ran once, by the worker
    assert "v2" in tool_outputs(model)[-1]  # the worker's output reached the model
    assert session.pending_external_tasks() == []


async def test_without_a_worker_the_task_is_answered_in_time_and_never_run_locally(
    redis_url: str, shared_root: Path, lone_bash_model: ScriptedServer
) -> None:
    workspace = workspace_of(shared_root)
    session = CoreAgent(acl_config(lone_bash_model.base_url)).session(
        str(workspace), external_timeout_ms=5_000
    )
    result, bridge = await bridged_run(session, redis_url, workspace, "nobody-serves-this")

    assert result.text == "gave up"
    assert (bridge.forwarded, bridge.completed) == (1, 1)
    assert not (workspace / "side.txt").exists()  # neither the SDK nor anyone ran it
    [output] = tool_outputs(lone_bash_model)
    assert "no reply from a worker in time" in output and "unknown" in output
