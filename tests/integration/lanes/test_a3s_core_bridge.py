"""A real a3s-code-core 9.x session (Berth's binding) whose Execute lane is external has its
write, edit and bash calls run on a Berth LaneWorker (a real ``berth-worker`` process and
``redis-server``) through ``berth-a3s-bridge``'s ``A3sBridge``: every side effect happens once,
in the worker's confined workspace, and the session gets the worker's outputs. With no worker,
the bridge answers ``success=True`` with an unknown-outcome error before the task's timeout and
the tool never runs in the session's process.

a3s-code-core 9.1.3 creates external tasks only for tools the host invokes
(``AgentSession::tool``); the tools of its own agent runs (``send``) execute in-process through
its fact spine whatever the lane configuration. The last test pins that, so a release that
routes run tools through the lane queue shows up here (docs/a3s-compatibility.md)."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import pytest
from redis.asyncio import Redis

from session_runtime.a3s_bridge import A3sBridge
from session_runtime.a3s_core.binding import CoreAgent, CoreSession
from session_runtime.llm.scripted import ScriptedServer
from session_runtime.transport import RedisTaskTransport
from session_runtime.transport.auth import derive_session_key
from tests.a3s_core_support import acl_config, binding
from tests.integration.lanes.conftest import MASTER

NS, NAME, UID, POOL = "team-a3s9", "bridged9", "uid-a3s9", "exec"
T = TypeVar("T")


@pytest.fixture
def model() -> Iterator[ScriptedServer]:
    """A scripted model: one write, then a final text."""
    binding()
    write = {"name": "write", "arguments": {"file_path": "notes.txt", "content": "v1\n"}}
    script = {"turns": [{"tool_calls": [write]}, {"text": "done"}], "on_exhausted": "repeat_last"}
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    srv = ScriptedServer(script)
    asyncio.run_coroutine_threadsafe(srv.start(), loop).result(10)
    yield srv
    asyncio.run_coroutine_threadsafe(srv.stop(), loop).result(10)
    loop.call_soon_threadsafe(loop.stop)
    thread.join(5)


def workspace_of(shared_root: Path) -> Path:
    path = shared_root / "workspaces" / NS / NAME
    path.mkdir(parents=True)
    return path


async def bridged(
    session: CoreSession, redis_url: str, workspace: Path, pool: str, work: Callable[[], T]
) -> tuple[T, A3sBridge]:
    """Run ``work`` (blocking calls on ``session``) in a thread while an A3sBridge serves the
    session's external tasks on LaneWorker ``pool``."""
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
        done: Awaitable[T] = asyncio.to_thread(work)
        result = await asyncio.wait_for(done, 120)
    finally:
        stop.set()
        await serving
        await transport.close()
        await redis.aclose()
    return result, bridge


async def test_write_edit_bash_of_a_9x_session_run_once_on_a_berth_worker(
    redis_url: str, shared_root: Path, workers_factory: Any
) -> None:
    binding()
    workers_factory(NS, POOL).start("worker-1")
    workspace = workspace_of(shared_root)
    session = CoreAgent(acl_config()).session(str(workspace), external_timeout_ms=30_000)

    def host_calls() -> list[dict[str, Any]]:
        return [
            session.tool("write", {"file_path": "notes.txt", "content": "v1\n"}),
            session.tool(
                "edit", {"file_path": "notes.txt", "old_string": "v1", "new_string": "v2"}
            ),
            session.tool("bash", {"command": "echo once >> side.txt; cat notes.txt"}),
        ]

    results, bridge = await bridged(session, redis_url, workspace, POOL, host_calls)

    assert [r["exit_code"] for r in results] == [0, 0, 0]
    assert (bridge.forwarded, bridge.completed) == (3, 3)
    assert (workspace / "notes.txt").read_text() == "v2\n"
    assert (workspace / "side.txt").read_text() == "once\n"  # ran once, by the worker
    assert "v2" in results[2]["output"]  # the worker's output reached the session
    assert session.pending_external_tasks() == []


async def test_without_a_worker_a_task_is_answered_in_time_and_never_run_locally(
    redis_url: str, shared_root: Path
) -> None:
    binding()
    workspace = workspace_of(shared_root)
    session = CoreAgent(acl_config()).session(str(workspace), external_timeout_ms=5_000)

    def bash() -> dict[str, Any]:
        return session.tool("bash", {"command": "echo local > side.txt"})

    result, bridge = await bridged(session, redis_url, workspace, "nobody-serves-this", bash)

    assert (bridge.forwarded, bridge.completed) == (1, 1)
    assert "no reply from a worker in time" in result["output"] and "unknown" in result["output"]
    assert result["exit_code"] == 1
    assert not (workspace / "side.txt").exists()  # neither a3s-code-core nor anyone ran it


async def test_a_9x_agent_run_does_not_use_the_external_lane(
    redis_url: str, shared_root: Path, workers_factory: Any, model: ScriptedServer
) -> None:
    workers_factory(NS, POOL).start("worker-1")
    workspace = workspace_of(shared_root)
    session = CoreAgent(acl_config(model.base_url)).session(
        str(workspace), external_timeout_ms=30_000
    )

    def run() -> str:
        try:
            return session.send("go").text
        except RuntimeError as exc:  # 9.x refuses to end an unverified mutating run
            return str(exc)

    outcome, bridge = await bridged(session, redis_url, workspace, POOL, run)

    assert "completion gate" in outcome
    assert (bridge.forwarded, bridge.completed) == (0, 0)  # no task reached the lane
    assert (workspace / "notes.txt").read_text() == "v1\n"  # written in-process by 9.x
    tool_text = str(model.requests[-1]["messages"][-1].get("content"))
    assert tool_text.startswith("Wrote 3 bytes")  # a3s-code-core's own write tool's output
