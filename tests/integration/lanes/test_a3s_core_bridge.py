"""A real a3s-code-core 9.x session (Berth's binding) whose Execute lane is external has its
write, edit and bash calls run on a Berth LaneWorker (a real ``berth-worker`` process and
``redis-server``) through ``berth-a3s-bridge``'s ``A3sBridge``: every side effect happens once,
in the worker's confined workspace, and the session gets the worker's outputs. With no worker,
the bridge answers ``success=True`` with an unknown-outcome error before the task's timeout and
the tool never runs in the session's process.

a3s-code-core 9.1.3 creates lane-queue external tasks only for tools the host invokes
(``AgentSession::tool``); the tools of its own agent runs (``send``) execute in-process through
its fact spine. Berth's binding gives such a session a host-served bash sandbox (9.x's
``with_sandbox_handle``), so a run's bash calls become external tasks too; its write and edit
stay in-process on the shared workspace. The last test pins both (docs/a3s-compatibility.md)."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import threading
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import pytest
from redis.asyncio import Redis

from berth_contract.taskauth import derive_session_key
from session_runtime.a3s_bridge import A3sBridge
from session_runtime.a3s_core.binding import CoreAgent, CoreSession
from session_runtime.llm.scripted import ScriptedServer
from session_runtime.transport import RedisTaskTransport
from tests.a3s_core_support import acl_config, binding
from tests.integration.lanes.conftest import MASTER

NS, NAME, UID, POOL = "team-a3s9", "bridged9", "uid-a3s9", "exec"
T = TypeVar("T")


#: An agent run: write, edit, then a bash call that also checks the edited file (a3s-code-core
#: 9.x ends a run that changed files only once such a check passed: its "completion gate").
CHECKED_BASH = "test -f notes.txt && echo once >> side.txt && cat notes.txt"
RUN_SCRIPT = [
    {"tool_calls": [{"name": "write", "arguments": {"file_path": "notes.txt", "content": "v1\n"}}]},
    {
        "tool_calls": [
            {
                "name": "edit",
                "arguments": {"file_path": "notes.txt", "old_string": "v1", "new_string": "v2"},
            }
        ]
    },
    {"tool_calls": [{"name": "bash", "arguments": {"command": CHECKED_BASH}}]},
    {"text": "not asked: a3s-code-core ends a verified run itself"},
]


@pytest.fixture
def model() -> Iterator[ScriptedServer]:
    binding()
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    srv = ScriptedServer({"turns": RUN_SCRIPT, "on_exhausted": "repeat_last"})
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


async def test_a_9x_agent_run_runs_its_bash_on_the_worker_and_its_file_edits_in_process(
    redis_url: str, shared_root: Path, workers_factory: Any, model: ScriptedServer
) -> None:
    workers_factory(NS, POOL).start("worker-1")
    workspace = workspace_of(shared_root)
    session = CoreAgent(acl_config(model.base_url)).session(
        str(workspace), external_timeout_ms=30_000
    )

    result, bridge = await bridged(session, redis_url, workspace, POOL, lambda: session.send("go"))

    # The check passed on the worker, so a3s-code-core closed the run itself ("completed")
    # without asking the model again: its completion gate accepted the worker's bash run.
    assert result.text == "completed"
    assert (bridge.forwarded, bridge.completed) == (1, 1)  # the bash call, via the host sandbox
    assert (workspace / "side.txt").read_text() == "once\n"  # ran once, by the worker
    assert (workspace / "notes.txt").read_text() == "v2\n"
    results = [b for m in result.messages for b in m["content"] if b["type"] == "tool_result"]
    assert str(results[0]["content"]).startswith("Wrote 3 bytes")  # a3s-code-core's own write
    assert str(results[2]["content"]).startswith("v2")  # the worker's bash output, in the run


def test_the_console_script_hosts_a_9x_session_with_core(
    redis_url: str, shared_root: Path, workers_factory: Any, model: ScriptedServer
) -> None:
    """``berth-a3s-bridge --core --prompt ...``: the agent run above from a shell, its bash on
    the worker (once), the answer on stdout."""
    workers_factory(NS, POOL).start("worker-1")
    workspace = workspace_of(shared_root)
    config = shared_root.parent / "agent.acl"
    config.write_text(acl_config(model.base_url))
    key = shared_root.parent / "session.key"
    key.write_bytes(derive_session_key(MASTER, NS, NAME))
    exe = Path(sys.executable).parent / "berth-a3s-bridge"
    proc = subprocess.run(
        [
            str(exe),
            "--core",
            *("--config", str(config), "--workspace", str(workspace), "--prompt", "go"),
            *("--laneworker", POOL, "--namespace", NS, "--session", NAME),
            *("--redis-url", redis_url, "--task-key-file", str(key), "--timeout-ms", "30000"),
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.strip().splitlines()[-1] == "completed"
    assert (workspace / "side.txt").read_text() == "once\n"  # ran once, by the worker
    assert (workspace / "notes.txt").read_text() == "v2\n"
