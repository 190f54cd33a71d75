"""A real A3S Code 3.1.0 session whose Execute lane is external runs write, edit and bash on a
Berth LaneWorker (a real ``berth-worker`` process and ``redis-server``) through the bridge: every
side effect happens exactly once, in the worker's confined workspace, and the model sees the
worker's outputs. Needs the optional extra ``a3s`` (``pip install -e '.[a3s]'``); skipped, saying
so, without it.
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from redis.asyncio import Redis

from berth_contract.taskauth import derive_session_key
from session_runtime.a3s_bridge import A3sBridge, open_external_session
from session_runtime.llm.scripted import ScriptedServer
from session_runtime.transport import RedisTaskTransport
from tests.integration.lanes.conftest import MASTER

a3s_code = pytest.importorskip(
    "a3s_code", reason="a3s-code is not installed (the optional extra a3s: pip install '.[a3s]')"
)

NS, NAME, UID, POOL = "team-a3s", "bridged", "uid-a3s", "exec"

SCRIPT: list[dict[str, Any]] = [
    {"tool_calls": [{"name": "write", "arguments": {"file_path": "notes.txt", "content": "v1\n"}}]},
    {
        "tool_calls": [
            {
                "name": "edit",
                "arguments": {"file_path": "notes.txt", "old_string": "v1", "new_string": "v2"},
            }
        ]
    },
    {
        "tool_calls": [
            {"name": "bash", "arguments": {"command": "echo once >> side.txt; cat notes.txt"}}
        ]
    },
    {"text": "bridged run done"},
]


@pytest.fixture
def model() -> Iterator[ScriptedServer]:
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    srv = ScriptedServer({"turns": SCRIPT, "on_exhausted": "repeat_last"})
    asyncio.run_coroutine_threadsafe(srv.start(), loop).result(10)
    yield srv
    asyncio.run_coroutine_threadsafe(srv.stop(), loop).result(10)
    loop.call_soon_threadsafe(loop.stop)
    thread.join(5)


def acl_config(base_url: str) -> str:
    """The A3S agent config (its own ACL format) pointing at the scripted model."""
    return (
        'default_model = "openai/gpt-4o-mini"\nproviders "openai" {\n  api_key = "k"\n'
        f'  base_url = "{base_url}"\n  models "gpt-4o-mini" {{\n  }}\n}}\n'
    )


@pytest.fixture
def workspace(shared_root: Path, workers_factory: Any) -> Path:
    """The bridged session's workspace on the shared volume, with one berth-worker serving it."""
    workers_factory(NS, POOL).start("worker-1")
    path = shared_root / "workspaces" / NS / NAME
    path.mkdir(parents=True)
    return path


async def test_a3s_session_runs_write_edit_bash_on_a_berth_worker_once(
    redis_url: str, workspace: Path, model: ScriptedServer
) -> None:
    agent = a3s_code.Agent.create(acl_config(model.base_url))
    options = a3s_code.SessionOptions()
    options.permission_policy = a3s_code.PermissionPolicy(default_decision="allow")
    options.planning_mode = "disabled"
    session = open_external_session(agent, str(workspace), options, timeout_ms=30_000)
    assert session.has_queue()

    redis: Redis[Any] = Redis.from_url(redis_url)
    transport = RedisTaskTransport(
        redis,
        namespace=NS,
        session_name=NAME,
        session_uid=UID,
        epoch=1,
        lane_workers={"execute": POOL},
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

    assert result.text == "bridged run done"
    assert (bridge.forwarded, bridge.completed) == (3, 3)
    assert (workspace / "notes.txt").read_text() == "v2\n"
    assert (workspace / "side.txt").read_text() == "once\n"  # ran once, by the worker
    tool_messages = [m for m in model.requests[-1]["messages"] if m.get("role") == "tool"]
    assert "v2" in str(tool_messages[-1].get("content"))  # the worker's output reached the model


def test_the_console_script_runs_one_prompt_on_the_workers(
    redis_url: str, shared_root: Path, workspace: Path, model: ScriptedServer
) -> None:
    """``berth-a3s-bridge --prompt ...``: the same run from a shell, answer on stdout."""
    config = shared_root.parent / "agent.acl"
    config.write_text(acl_config(model.base_url))
    key = shared_root.parent / "session.key"
    key.write_bytes(derive_session_key(MASTER, NS, NAME))
    exe = Path(sys.executable).parent / "berth-a3s-bridge"
    proc = subprocess.run(
        [
            str(exe),
            *("--config", str(config), "--workspace", str(workspace), "--prompt", "go"),
            *("--laneworker", POOL, "--namespace", NS, "--session", NAME),
            *("--redis-url", redis_url, "--task-key-file", str(key)),
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.strip().splitlines()[-1] == "bridged run done"
    assert (workspace / "side.txt").read_text() == "once\n"
    assert (workspace / "notes.txt").read_text() == "v2\n"
