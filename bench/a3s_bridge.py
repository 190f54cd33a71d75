"""Benchmark: an A3S Code session's per-task time when Berth LaneWorkers serve its Execute lane
through the bridge, against the same session served by an in-process poller, in one run.

Both modes run the same real ``a3s-code`` 3.1.0 session (Execute lane external, created with
``open_external_session``) against the scripted model: N rounds of one ``bash`` call each. The
in-process poller completes each task by running the tool with Berth's own tool code in this
process (``session_runtime.tools.run_tool``); the bridge publishes it to a real ``berth-worker``
process over a private ``redis-server`` and completes it with the reply. Reported: wall time per
task (run time / N, which includes the model round trips both modes share), best of 3, and the
ratio.

Run: ``.venv/bin/python bench/a3s_bridge.py [--tasks 50]`` (needs the extra ``a3s`` and
``redis-server`` on PATH).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from redis.asyncio import Redis

from bench.lanes import start_redis
from berth_contract.taskauth import derive_session_key
from session_runtime.a3s_bridge import A3sBridge, open_external_session
from session_runtime.llm.scripted import ScriptedServer
from session_runtime.tools import run_tool
from session_runtime.transport import RedisTaskTransport

NS, NAME, POOL = "bench", "a3s", "exec"
MASTER = os.urandom(32)


def script(n: int) -> dict[str, Any]:
    turns: list[dict[str, Any]] = [
        {"tool_calls": [{"name": "bash", "arguments": {"command": f"echo {i} >> side.txt"}}]}
        for i in range(n)
    ]
    return {"turns": [*turns, {"text": "done"}], "on_exhausted": "repeat_last"}


def a3s_session(base_url: str, workspace: Path) -> Any:
    import a3s_code

    agent = a3s_code.Agent.create(
        f'default_model = "openai/gpt-4o-mini"\nproviders "openai" {{\n  api_key = "k"\n'
        f'  base_url = "{base_url}"\n  models "gpt-4o-mini" {{\n  }}\n}}\n'
    )
    options = a3s_code.SessionOptions()
    options.permission_policy = a3s_code.PermissionPolicy(default_decision="allow")
    options.planning_mode = "disabled"
    return open_external_session(agent, str(workspace), options, timeout_ms=60_000)


async def poll_in_process(session: Any, workspace: Path, stop: asyncio.Event) -> None:
    """The baseline: complete each task by running the tool here."""
    while not stop.is_set():
        for task in session.pending_external_tasks():
            result = await run_tool(
                task["command_type"], task["payload"], str(workspace), task["task_id"]
            )
            session.complete_external_task(
                task["task_id"], True, {"output": result.output, "exit_code": result.exit_code}
            )
        await asyncio.sleep(0.005)


async def one_run(mode: str, n: int, base_url: str, redis_url: str, root: Path) -> float:
    """Seconds per task of one N-round run in ``mode`` ("bridge" or "in-process")."""
    workspace = root / "workspaces" / NS / NAME
    shutil.rmtree(workspace, ignore_errors=True)
    workspace.mkdir(parents=True)
    session = a3s_session(base_url, workspace)
    stop = asyncio.Event()
    redis: Any = Redis.from_url(redis_url)
    transport = RedisTaskTransport(
        redis,
        namespace=NS,
        session_name=NAME,
        session_uid="bench-uid",
        epoch=1,
        lane_workers={"execute": POOL},
        shared_root=str(workspace),
        task_key=derive_session_key(MASTER, NS, NAME),
    )
    if mode == "bridge":
        server = asyncio.create_task(A3sBridge(session, transport, str(workspace)).run(stop))
    else:
        server = asyncio.create_task(poll_in_process(session, workspace, stop))
    t0 = time.perf_counter()
    result = await asyncio.to_thread(session.send, "go")
    elapsed = time.perf_counter() - t0
    stop.set()
    await server
    await transport.close()
    await redis.aclose()
    lines = (workspace / "side.txt").read_text().splitlines()
    if result.text != "done" or len(lines) != n:
        raise SystemExit(f"{mode}: run failed ({result.text!r}, {len(lines)} side effects)")
    return elapsed / n


def start_worker(redis_url: str, root: Path) -> subprocess.Popen[bytes]:
    (root / "master").write_bytes(MASTER)
    env = {
        **os.environ,
        "BERTH_REDIS_URL": redis_url,
        "BERTH_NAMESPACE": NS,
        "BERTH_LANEWORKER": POOL,
        "POD_NAME": "bench-worker",
        "BERTH_WORKSPACES_ROOT": str(root / "workspaces"),
        "BERTH_TASK_MASTER_KEY_FILE": str(root / "master"),
        "BERTH_METRICS_PORT": "0",
        "PATH": os.pathsep.join((str(Path(sys.executable).parent), "/usr/bin", "/bin")),
    }
    return subprocess.Popen([sys.executable, "-m", "session_runtime.worker"], env=env)


async def main(argv: Sequence[str] | None = None) -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--tasks", type=int, default=50)
    a = p.parse_args(argv)
    try:
        import a3s_code  # noqa: F401
    except ImportError:
        print("skipped: a3s-code (the optional extra a3s) is not installed here")
        return
    loop = asyncio.new_event_loop()  # the model's own thread: the SDK's send blocks
    threading.Thread(target=loop.run_forever, daemon=True).start()
    redis_proc, redis_url, redis_dir = start_redis()
    root = Path(tempfile.mkdtemp(prefix="berth-a3s-bench-"))
    worker = start_worker(redis_url, root)
    try:
        best: dict[str, float] = {}
        for _ in range(3):
            for mode in ("in-process", "bridge"):
                srv = ScriptedServer(script(a.tasks))  # a fresh conversation per run
                asyncio.run_coroutine_threadsafe(srv.start(), loop).result(10)
                per_task = await one_run(mode, a.tasks, srv.base_url, redis_url, root)
                asyncio.run_coroutine_threadsafe(srv.stop(), loop).result(10)
                best[mode] = min(best.get(mode, per_task), per_task)
        print(f"A3S Code 3.1.0 session, {a.tasks} bash tasks, one per model turn (best of 3):")
        print(f"  in-process poller            {best['in-process'] * 1000:8.2f} ms/task")
        print(f"  bridge + berth-worker + Redis {best['bridge'] * 1000:7.2f} ms/task")
        print(f"  ratio {best['bridge'] / best['in-process']:.2f}x")
    finally:
        worker.terminate()
        worker.wait(15)
        redis_proc.terminate()
        redis_proc.wait(10)
        shutil.rmtree(root, ignore_errors=True)
        shutil.rmtree(redis_dir, ignore_errors=True)


if __name__ == "__main__":
    asyncio.run(main())
