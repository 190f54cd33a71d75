"""Benchmark: an A3S Code session's per-task time when Berth LaneWorkers serve its Execute lane
through the bridge, against the same session served by an in-process poller, in one run; for
the a3s-code 3.1.0 SDK and for a3s-code-core 9.x (Berth's binding).

Both modes run the same real ``a3s-code`` 3.1.0 session (Execute lane external, created with
``open_external_session``) against the scripted model: N rounds of one ``bash`` call each. The
in-process poller completes each task by running the tool with Berth's own tool code in this
process (``session_runtime.tools.run_tool``); the bridge publishes it to a real ``berth-worker``
process over a private ``redis-server`` and completes it with the reply. Reported: wall time per
task (run time / N, which includes the model round trips both modes share), best of 3, and the
ratio.

For a3s-code-core 9.x (Berth's binding): the same N-round run, its bash calls reaching the
bridge through the binding's host-served sandbox (plus one last ``test -f`` round so 9.x's
completion gate lets the run end), and N host ``session.tool("bash", ...)`` calls with no
model, through 9.x's lane queue. The bridge's per-task overhead (bridge minus in-process) of the
two agent runs is compared. Also printed: the installed binding's wheel size.

Run: ``.venv/bin/python bench/a3s_bridge.py [--tasks 40]`` (needs the extra ``a3s``, the
binding (``make a3s-core-binding``) and ``redis-server`` on PATH; a part whose SDK is missing
is skipped, saying so).
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
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


def script(n: int, name: str = "side.txt") -> dict[str, Any]:
    turns: list[dict[str, Any]] = [
        {"tool_calls": [{"name": "bash", "arguments": {"command": f"echo {i} >> {name}"}}]}
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


def fresh_workspace(root: Path) -> Path:
    workspace = root / "workspaces" / NS / NAME
    shutil.rmtree(workspace, ignore_errors=True)
    workspace.mkdir(parents=True)
    return workspace


def transport_for(redis: Any, workspace: Path) -> RedisTaskTransport:
    return RedisTaskTransport(
        redis,
        namespace=NS,
        session_name=workspace.name,
        session_uid="bench-uid",
        epoch=1,
        lane_workers={"execute": POOL},
        shared_root=str(workspace),
        task_key=derive_session_key(MASTER, NS, workspace.name),
    )


async def served(
    mode: str, session: Any, workspace: Path, redis_url: str, work: Callable[[], Any]
) -> tuple[Any, float]:
    """Run blocking ``work`` while ``session``'s tasks are served in ``mode`` ("bridge" or
    "in-process"); its result and wall seconds."""
    stop = asyncio.Event()
    redis: Any = Redis.from_url(redis_url)
    transport = transport_for(redis, workspace)
    if mode == "bridge":
        server = asyncio.create_task(A3sBridge(session, transport, str(workspace)).run(stop))
    else:
        server = asyncio.create_task(poll_in_process(session, workspace, stop))
    t0 = time.perf_counter()
    result = await asyncio.to_thread(work)
    elapsed = time.perf_counter() - t0
    stop.set()
    await server
    await transport.close()
    await redis.aclose()
    return result, elapsed


def side_effects(workspace: Path, name: str = "side.txt") -> int:
    path = workspace / name
    return len(path.read_text().splitlines()) if path.exists() else 0


async def one_run(mode: str, n: int, base_url: str, redis_url: str, root: Path) -> float:
    """Seconds per task of one N-round a3s-code 3.1.0 run in ``mode``."""
    workspace = fresh_workspace(root)
    session = a3s_session(base_url, workspace)
    result, elapsed = await served(mode, session, workspace, redis_url, lambda: session.send("go"))
    if result.text != "done" or side_effects(workspace) != n:
        raise SystemExit(f"{mode}: run failed ({result.text!r}, {side_effects(workspace)})")
    return elapsed / n


async def one_core_run(mode: str, n: int, redis_url: str, root: Path) -> float:
    """Seconds per task of N host bash calls of an a3s-code-core 9.x session in ``mode``."""
    from session_runtime.a3s_core.binding import CoreAgent

    workspace = core_workspace(root)
    session = CoreAgent(CORE_ACL).session(str(workspace), external_timeout_ms=60_000)

    name = "side.txt"

    def calls() -> list[Any]:
        return [session.tool("bash", {"command": f"echo {i} >> {name}"}) for i in range(n)]

    results, elapsed = await served(mode, session, workspace, redis_url, calls)
    session.close()
    if any(r["exit_code"] != 0 for r in results) or side_effects(workspace, name) != n:
        raise SystemExit(f"9.x {mode}: run failed ({side_effects(workspace)} side effects)")
    return elapsed / n


async def one_core_agent_run(
    mode: str, n: int, name: str, base_url: str, redis_url: str, root: Path
) -> float:
    """Seconds per task of an N-round a3s-code-core 9.x agent run whose bash calls go through
    the binding's host-served sandbox; a last ``test -f`` round lets 9.x close the run."""
    from session_runtime.a3s_core.binding import CoreAgent

    workspace = core_workspace(root)
    session = CoreAgent(core_acl(base_url)).session(str(workspace), external_timeout_ms=60_000)
    result, elapsed = await served(mode, session, workspace, redis_url, lambda: session.send("go"))
    session.close()  # 9.x keeps a session's file ownership until it closes
    if result.text != "completed" or side_effects(workspace, name) != n:
        raise SystemExit(f"9.x run {mode}: failed ({result.text!r}, {result.messages[-3:]})")
    return elapsed / (n + 1)


#: a3s-code-core remembers, for the life of the process, which session changed a path and
#: refuses a later session's run that sees it ("concurrent write ... already owned", even after
#: the first session closed): each 9.x run gets a workspace (and Berth session name) of its own.
CORE_RUNS = itertools.count()


def core_workspace(root: Path) -> Path:
    workspace = root / "workspaces" / NS / f"a3s9-{next(CORE_RUNS)}"
    workspace.mkdir(parents=True)
    return workspace


def core_script(n: int, name: str) -> dict[str, Any]:
    """``script(n)`` on ``name``, closed by a checking bash round (9.x's completion gate)."""
    check = {"name": "bash", "arguments": {"command": f"test -f {name} && wc -l {name}"}}
    turns = script(n, name)["turns"][:-1]
    return {"turns": [*turns, {"tool_calls": [check]}, {"text": "done"}], "on_exhausted": "error"}


def core_acl(base_url: str) -> str:
    return (
        f'default_model = "openai/gpt-4o-mini"\nproviders "openai" {{\n  api_key = "k"\n'
        f'  base_url = "{base_url}"\n  models "gpt-4o-mini" {{\n  }}\n}}\n'
    )


CORE_ACL = (
    'default_model = "openai/gpt-4o-mini"\nproviders "openai" {\n  api_key = "unused"\n'
    '  base_url = "http://127.0.0.1:9/v1"\n  models "gpt-4o-mini" {\n  }\n}\n'
)


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


def available() -> tuple[bool, bool]:
    """(a3s-code 3.1.0 importable, the a3s-code-core binding importable), saying what is not."""
    found = []
    for module, how in (
        ("a3s_code", "the optional extra a3s"),
        ("berth_a3s_core", "make a3s-core-binding"),
    ):
        try:
            __import__(module)
            found.append(True)
        except ImportError:
            print(f"skipped: {module} is not installed here ({how})")
            found.append(False)
    return found[0], found[1]


def report(best: dict[str, float], n: int) -> None:
    """Print the per-task times, ratios and bridge overheads (ms/task)."""
    for sdk, what in (
        ("3.1", "a3s-code 3.1.0 session, bash tasks, one per model turn"),
        ("9run", "a3s-code-core 9.x session, bash tasks, one per model turn (host sandbox)"),
        ("9", "a3s-code-core 9.x session, host bash calls (session.tool), no model"),
    ):
        if f"{sdk}/bridge" not in best:
            continue
        local, bridge = best[f"{sdk}/in-process"], best[f"{sdk}/bridge"]
        print(f"{what}, {n} tasks (best of 3):")
        print(f"  in-process poller             {local * 1000:8.2f} ms/task")
        print(f"  bridge + berth-worker + Redis {bridge * 1000:8.2f} ms/task")
        print(
            f"  ratio {bridge / local:.2f}x, bridge overhead {(bridge - local) * 1000:.2f} ms/task"
        )
    if "3.1/bridge" in best and "9run/bridge" in best:
        over9 = best["9run/bridge"] - best["9run/in-process"]
        over3 = best["3.1/bridge"] - best["3.1/in-process"]
        print(f"bridge overhead per task of an agent run, 9.x / 3.1.0: {over9 / over3:.2f}")


async def measure(a: argparse.Namespace, redis_url: str, root: Path) -> dict[str, float]:
    has3, has9 = available()
    loop = asyncio.new_event_loop()  # the model's own thread: the SDK's send blocks
    threading.Thread(target=loop.run_forever, daemon=True).start()
    best: dict[str, float] = {}
    for _ in range(3):
        for mode in ("in-process", "bridge"):
            if has3:
                srv = ScriptedServer(script(a.tasks))  # a fresh conversation per run
                asyncio.run_coroutine_threadsafe(srv.start(), loop).result(10)
                per_task = await one_run(mode, a.tasks, srv.base_url, redis_url, root)
                asyncio.run_coroutine_threadsafe(srv.stop(), loop).result(10)
                best[f"3.1/{mode}"] = min(best.get(f"3.1/{mode}", per_task), per_task)
            if has9:
                name = "side.txt"
                srv = ScriptedServer(core_script(a.tasks, name))
                asyncio.run_coroutine_threadsafe(srv.start(), loop).result(10)
                url = srv.base_url
                per_task = await one_core_agent_run(mode, a.tasks, name, url, redis_url, root)
                asyncio.run_coroutine_threadsafe(srv.stop(), loop).result(10)
                best[f"9run/{mode}"] = min(best.get(f"9run/{mode}", per_task), per_task)
                per_task = await one_core_run(mode, a.tasks, redis_url, root)
                best[f"9/{mode}"] = min(best.get(f"9/{mode}", per_task), per_task)
    return best


async def main(argv: Sequence[str] | None = None) -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--tasks", type=int, default=40)  # 3.1.0 stops at 50 tool rounds
    a = p.parse_args(argv)
    redis_proc, redis_url, redis_dir = start_redis()
    root = Path(tempfile.mkdtemp(prefix="berth-a3s-bench-"))
    worker = start_worker(redis_url, root)
    try:
        report(await measure(a, redis_url, root), a.tasks)
    finally:
        worker.terminate()
        worker.wait(15)
        redis_proc.terminate()
        redis_proc.wait(10)
        shutil.rmtree(root, ignore_errors=True)
        shutil.rmtree(redis_dir, ignore_errors=True)
    print_wheel_size()


def print_wheel_size() -> None:
    """The size of the installed a3s-code-core binding's cached wheel (``.venv`` stamp key)."""
    stamp = Path(sys.executable).parent.parent / ".a3s-core-binding"
    if not stamp.exists():
        return
    cache = Path(os.environ.get("BERTH_CACHE", Path.home() / ".cache/berth"))
    for wheel in cache.glob(f"a3s-core-binding/{stamp.read_text().strip()}/*.whl"):
        size = wheel.stat().st_size / 1e6
        print(f"a3s-code-core binding wheel: {size:.1f} MB ({wheel.name})")


if __name__ == "__main__":
    asyncio.run(main())
