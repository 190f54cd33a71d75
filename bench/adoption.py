"""Benchmark: the warm session process's share of an adoption — ``POST /v1/adopt`` answered → the
adopted run's first model request, and → its ``GET /v1/state`` naming the run — and of a
passivation — ``POST /v1/passivate`` → the process has exited — for N warm ``berth-session``
processes adopted (and, 3 s later, passivated) at once, this tree against another checkout
(``--baseline-src``) in the same run.

No cluster: the processes run on this machine the way a warm pod runs them (warm mode, the
environment the operator's warm-pod builder sets, Landlock confinement after the adoption), the
scripted model answers over HTTP, the adoptions are sent from a thread pool at once. Per side
it prints p50/p99/max of adopt → first request (wall, the bench's clock for both: the scripted
model stamps each request's arrival) and the CPU each process spent from just before the
adoption to its first request (utime+stime from ``/proc``); then p50/max of passivation request
→ termination message written and → process exited (the kubelet sees a pod end only at the
exit); then N new warm processes are adopted at once to resume the passivated runs (epoch 2,
``resumeRunId``): the same figures as the first adoption, until the resumed run's first model
request and its ``GET /v1/state`` naming it — a warm resume's share in the process. The runs
are scripted tool rounds (bash, 0.3 s model latency) that outlast the 3 s. The cluster's part
(the operator's decisions, the API writes, the pod network, the kubelet) is ``placement.py
--warm`` and ``drain.py --warm``. Nothing is asserted.

    git worktree add -f /tmp/berth-base HEAD~1
    .venv/bin/python bench/adoption.py --n 1,10,20 --baseline-src /tmp/berth-base
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT)]

from session_runtime.llm.scripted import ScriptedServer  # noqa: E402
from tests.e2e.passivation_support import step_script  # noqa: E402

POOL_TOKEN = "pool-token-0123456789"
API_TOKEN = "t" * 32
RUN_SECONDS = 3.0
"""How long the adopted runs go on before they are all asked to passivate."""
START = (  # the console script's entry (an older checkout has no launcher)
    "try:\n    from session_runtime.launch import session\n"
    "except ImportError:\n    from session_runtime.server import main as session\n"
    "session()"
)


def pct(values: list[float], q: float) -> float:
    """Nearest-rank percentile (q in 0..100)."""
    ordered = sorted(values)
    return ordered[max(1, min(len(ordered), round(q / 100 * len(ordered) + 0.5))) - 1]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def cpu_seconds(pid: int) -> float:
    """utime + stime of ``pid`` in seconds."""
    with open(f"/proc/{pid}/stat") as fh:
        fields = fh.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def get(url: str) -> int:
    with urllib.request.urlopen(url, timeout=2) as r:
        return int(r.status)


def state_of(port: int) -> dict[str, Any]:
    """``GET /v1/state`` of the process on ``port``, with the session's API token."""
    req = urllib.request.Request(
        f"http://127.0.0.1:{port}/v1/state", headers={"Authorization": f"Bearer {API_TOKEN}"}
    )
    with urllib.request.urlopen(req, timeout=10) as r:
        return dict(json.loads(r.read()))


def run_seen(port: int, want: Callable[[dict[str, Any]], bool]) -> tuple[float, int]:
    """Ask ``GET /v1/state`` of the adopted process at once, and every 20 ms after a failed
    try (refused, reset, not yet the run ``want`` accepts), until ``want`` accepts the answer:
    (when it did, the failed tries). The operator notices an adopted run this way; it asks once
    the adopted pod's watch event comes."""
    failed = 0
    while True:
        try:
            if want(state_of(port)):
                return time.time(), failed
        except OSError:
            pass
        failed += 1
        time.sleep(0.02)


Proc = tuple[subprocess.Popen[bytes], int, Path]
"""A warm process, its HTTP port and its temporary directory."""


def start_warm(src: Path, n: int, srv: ScriptedServer, tag: str, work: Path) -> list[Proc]:
    """Start ``n`` warm processes of the checkout ``src`` sharing ``work``'s store and
    workspaces, and wait until each answers ``/readyz``."""
    procs: list[Proc] = []
    for i in range(n):
        port, tmp = free_port(), work / f"{tag}-tmp{i}"
        tmp.mkdir()
        env = {
            **os.environ,
            "PYTHONPATH": str(src),
            "BERTH_WARM_POOL": "bench",
            "BERTH_WARM_TOKEN_FILE": str(work / "token"),
            "BERTH_STORE_DIR": str(work / "store"),
            "BERTH_WORKSPACES_DIR": str(work / "workspaces"),
            "POD_NAMESPACE": "bench",
            "POD_IP": "127.0.0.1",
            "BERTH_HTTP_PORT": str(port),
            "TMPDIR": str(tmp),
            "OPENAI_BASE_URL": srv.base_url,
            "BERTH_LLM_API_KEY_FILE": str(work / "key"),
            "BERTH_LOG_LEVEL": "WARNING",
            "BERTH_TERMINATION_LOG": str(tmp / "termination-log"),
        }
        cmd = [sys.executable, "-c", START]
        proc = subprocess.Popen(cmd, env=env, cwd=src, stderr=subprocess.DEVNULL)
        procs.append((proc, port, tmp))
    for proc, port, _ in procs:
        deadline = time.monotonic() + 120
        while True:
            try:
                if get(f"http://127.0.0.1:{port}/readyz") == 200:
                    break
            except OSError:
                pass
            if proc.poll() is not None or time.monotonic() > deadline:
                raise SystemExit(f"{tag}: warm process on port {port} never became ready")
            time.sleep(0.05)
    time.sleep(1.0)  # let start-up settle: only the adoptions run from here
    return procs


def stop(procs: list[Proc]) -> None:
    for proc, _, _ in procs:
        proc.terminate()
    for proc, _, _ in procs:
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()


def adopt_all(
    procs: list[Proc],
    bodies: list[dict[str, Any]],
    want: Callable[[int, dict[str, Any]], bool],
    srv: ScriptedServer,
    prompts: list[str],
    tag: str,
) -> dict[str, Any]:
    """Adopt ``procs[i]`` with ``bodies[i]``, all at once; the figures: adopt answered → the
    first model request carrying ``prompts[i]`` made after it, the CPU each process spent
    until then, adopt answered → ``GET /v1/state`` accepted by ``want(i, state)``."""
    n = len(procs)
    before = [cpu_seconds(p.pid) for p, _, _ in procs]

    def adopt(i: int) -> tuple[float, float, int]:
        req = urllib.request.Request(
            f"http://127.0.0.1:{procs[i][1]}/v1/adopt",
            data=json.dumps(bodies[i]).encode(),
            method="POST",
            headers={"Authorization": f"Bearer {POOL_TOKEN}"},
        )
        with urllib.request.urlopen(req, timeout=60) as r:
            r.read()
        answered = time.time()
        seen, failed = run_seen(procs[i][1], lambda state: want(i, state))
        return answered, seen - answered, failed

    with ThreadPoolExecutor(n) as pool:
        adopted = list(pool.map(adopt, range(n)))
    accepted = [a for a, _, _ in adopted]
    seen = [s for _, s, _ in adopted]
    first: dict[int, float] = {}
    cpu: dict[int, float] = {}
    deadline = time.monotonic() + 120
    while len(first) < n and time.monotonic() < deadline:
        for req in list(srv.requests):
            for i, prompt in enumerate(prompts):
                if (
                    i not in first
                    and float(req["at"]) > accepted[i]
                    and any(m.get("content") == prompt for m in req["messages"])
                ):
                    first[i] = float(req["at"])
                    cpu[i] = cpu_seconds(procs[i][0].pid) - before[i]
        time.sleep(0.005)
    if len(first) < n:
        raise SystemExit(f"{tag}: {n - len(first)} adopted runs never asked the model")
    wall = [first[i] - accepted[i] for i in range(n)]
    return {
        "p50_ms": pct(wall, 50) * 1000,
        "p99_ms": pct(wall, 99) * 1000,
        "max_ms": max(wall) * 1000,
        "cpu_ms": sum(cpu.values()) / n * 1000,
        "seen_p50_ms": pct(seen, 50) * 1000,
        "seen_max_ms": max(seen) * 1000,
        "seen_failed": sum(f for _, _, f in adopted),
    }


def run_side(src: Path, n: int, srv: ScriptedServer, tag: str, work: Path) -> dict[str, float]:
    """Adopt ``n`` warm processes of the checkout ``src`` at once, passivate them at once, then
    adopt ``n`` new warm processes at once to resume the passivated runs; the figures."""
    work.mkdir()
    (work / "token").write_text(POOL_TOKEN)
    (work / "key").write_text("sk-bench")
    prompts = [f"bench {tag} {i}" for i in range(n)]

    def body(i: int, epoch: int, resume: str | None) -> dict[str, Any]:
        return {
            "session": {"namespace": "bench", "name": f"{tag}-{i}", "uid": f"uid-{tag}-{i}"},
            "epoch": epoch,
            "resumeRunId": resume,
            "options": {
                "prompt": prompts[i],
                "model": "openai/bench",
                "limits": {"maxToolRounds": 1000},
            },
            "apiToken": API_TOKEN,
        }

    procs = start_warm(src, n, srv, f"{tag}-a", work)
    try:
        fig = adopt_all(
            procs,
            [body(i, 1, None) for i in range(n)],
            lambda _i, state: bool(state.get("runId")),
            srv,
            prompts,
            tag,
        )
        time.sleep(RUN_SECONDS)
        runs = [str(state_of(port)["runId"]) for _, port, _ in procs]

        def passivate(i: int) -> tuple[float, float]:
            proc, port, tmp = procs[i]
            req = urllib.request.Request(
                f"http://127.0.0.1:{port}/v1/passivate",
                data=json.dumps({"reason": "bench"}).encode(),
                method="POST",
                headers={"Authorization": f"Bearer {API_TOKEN}"},
            )
            asked = time.time()
            with urllib.request.urlopen(req, timeout=60) as r:
                r.read()
            proc.wait(timeout=120)
            exited = time.time()
            written = os.path.getmtime(tmp / "termination-log")
            return written - asked, exited - asked

        with ThreadPoolExecutor(n) as pool:
            ended = list(pool.map(passivate, range(n)))
    finally:
        stop(procs)
    fig.update(
        written_p50_ms=pct([w for w, _ in ended], 50) * 1000,
        exit_p50_ms=pct([e for _, e in ended], 50) * 1000,
        exit_max_ms=max(e for _, e in ended) * 1000,
    )
    procs = start_warm(src, n, srv, f"{tag}-b", work)
    try:
        resumed = adopt_all(
            procs,
            [body(i, 2, runs[i]) for i in range(n)],
            lambda i, state: state.get("resumedFrom") == runs[i] or state.get("runId") == runs[i],
            srv,
            prompts,
            f"{tag} resume",
        )
    finally:
        stop(procs)
    fig.update({f"resume_{k}": v for k, v in resumed.items()})
    return fig


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--n", default="1,10,20", help="concurrent adoptions, comma-separated")
    ap.add_argument("--baseline-src", type=Path, help="another checkout to compare against")
    args = ap.parse_args()
    sides = [("now", ROOT)] + ([("base", args.baseline_src)] if args.baseline_src else [])
    srv = ScriptedServer(step_script(1000, delay_ms=300, sleep_s=0.3), host="127.0.0.1", port=0)
    srv.start_in_thread()
    rows = []
    try:
        with tempfile.TemporaryDirectory(prefix="berth-adopt-") as tmp:
            for n in (int(x) for x in args.n.split(",")):
                for tag, src in sides:
                    print(f"N={n} {tag} ({src}) ...", file=sys.stderr, flush=True)
                    fig = run_side(src, n, srv, f"{tag}{n}", Path(tmp) / f"{tag}{n}")
                    rows.append((n, tag, fig))
    finally:
        srv.stop_thread()
    print(
        "| N | tree | adopt → first request p50 | p99 | max | CPU per process "
        "| adopt → state names the run p50 | max | failed state tries "
        "| passivate → termination written p50 | → exited p50 | max |"
    )
    print("|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for n, tag, f in rows:
        print(
            f"| {n} | {tag} | {f['p50_ms']:.0f} ms | {f['p99_ms']:.0f} ms | "
            f"{f['max_ms']:.0f} ms | {f['cpu_ms']:.0f} ms | {f['seen_p50_ms']:.0f} ms | "
            f"{f['seen_max_ms']:.0f} ms | {f['seen_failed']:.0f} | {f['written_p50_ms']:.0f} ms | "
            f"{f['exit_p50_ms']:.0f} ms | {f['exit_max_ms']:.0f} ms |"
        )
    print()
    print(
        "Resume (new warm processes adopted with the passivated runs' ids, epoch 2):\n"
        "| N | tree | adopt → first request p50 | p99 | max | CPU per process "
        "| adopt → state names the resumed run p50 | max | failed state tries |"
    )
    print("|---:|---|---:|---:|---:|---:|---:|---:|---:|")
    for n, tag, f in rows:
        print(
            f"| {n} | {tag} | {f['resume_p50_ms']:.0f} ms | {f['resume_p99_ms']:.0f} ms | "
            f"{f['resume_max_ms']:.0f} ms | {f['resume_cpu_ms']:.0f} ms | "
            f"{f['resume_seen_p50_ms']:.0f} ms | {f['resume_seen_max_ms']:.0f} ms | "
            f"{f['resume_seen_failed']:.0f} |"
        )
    if args.baseline_src:
        by = {(n, tag): f for n, tag, f in rows}
        for n in sorted({n for n, _, _ in rows}):
            now, base = by[(n, "now")], by[(n, "base")]
            print(
                f"N={n}: now/base p50 {now['p50_ms'] / base['p50_ms']:.2f}x, "
                f"p99 {now['p99_ms'] / base['p99_ms']:.2f}x, "
                f"CPU {now['cpu_ms'] / base['cpu_ms']:.2f}x; state names the run, max "
                f"{now['seen_max_ms'] / base['seen_max_ms']:.2f}x; passivation → exited p50 "
                f"{now['exit_p50_ms'] / base['exit_p50_ms']:.2f}x; resume p99 "
                f"{now['resume_p99_ms'] / base['resume_p99_ms']:.2f}x"
            )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
