"""Benchmark of the lane queue and its Redis transport; prints figures and ratios.

1. Internal dispatch overhead: N no-op tool calls through ``LaneQueue.submit`` (internal mode,
   default config) against the same N no-op coroutines started with bare ``asyncio.create_task``;
   reports µs per task and the ratio.
2. Dispatch as sessions share a process: S sessions (S = 1, 10, 100; one ``LaneQueue`` each, as
   the session pod builds it) submit the same total number of no-op calls concurrently in one
   event loop; reports µs per task, the ratio to one session and to bare ``create_task``.
3. External round trip: sequential tool calls through ``LaneQueue`` (execute lane external) with
   ``RedisTaskTransport`` and an in-process ``LaneWorker`` running a no-op tool, against a bare
   ``XADD -> XREADGROUP -> XADD -> XREAD`` round trip between two coroutines on the same private
   ``redis-server``; reports p50/p99 in ms and their ratios.

Run: ``.venv/bin/python bench/lanes.py [--tasks 20000] [--round-trips 500] [--sessions 1,10,100]
[--json FILE]`` (needs ``redis-server`` on PATH; it starts its own on a free loopback port and
stops it). ``--json`` also writes the per-session-count figures (``bench/curves.py`` plots them).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from redis.asyncio import Redis

from berth_contract.taskauth import derive_session_key
from session_runtime.lanes import LaneQueue, SessionQueueConfig
from session_runtime.lanes.metrics import percentile
from session_runtime.tools import ResultCallback, ToolCall, ToolContext, ToolResult
from session_runtime.transport import GROUP, RedisTaskTransport
from session_runtime.transport.connect import connect
from session_runtime.worker.lane import LaneWorker
from session_runtime.worker.metrics import WorkerMetrics
from session_runtime.worker.settings import WorkerSettings


class NoopRunner:
    async def execute(
        self, calls: Sequence[ToolCall], ctx: ToolContext, on_result: ResultCallback
    ) -> list[ToolResult]:
        return [ToolResult(c.id, c.name, "") for c in calls]

    async def recover(self, call: ToolCall, ctx: ToolContext) -> ToolResult | None:
        return None


async def noop_tool(name: str, args: dict[str, Any], workspace: str, call_id: str) -> ToolResult:
    return ToolResult(call_id, name, "ok")


async def _noop() -> None:
    return None


async def bench_internal(n: int) -> tuple[float, float]:
    """(µs per task through LaneQueue, µs per bare create_task), best of 3."""
    ctx = ToolContext("bench", "/nonexistent", "run-1", 1)
    calls = [ToolCall(f"c{i}", "read", {"file_path": "x"}) for i in range(n)]
    queue_best = bare_best = float("inf")
    for _ in range(3):
        t0 = time.perf_counter()
        await asyncio.gather(*(asyncio.create_task(_noop()) for _ in range(n)))
        bare_best = min(bare_best, (time.perf_counter() - t0) / n * 1e6)
        queue = LaneQueue(SessionQueueConfig(), runner=NoopRunner())
        t0 = time.perf_counter()
        await asyncio.gather(*(asyncio.create_task(queue.submit(c, ctx)) for c in calls))
        queue_best = min(queue_best, (time.perf_counter() - t0) / n * 1e6)
    return queue_best, bare_best


async def bench_sequential(n: int) -> tuple[float, float]:
    """(µs per awaited LaneQueue.submit, µs per awaited bare task), one at a time, best of 3."""
    ctx = ToolContext("bench", "/nonexistent", "run-1", 1)
    call = ToolCall("c", "bash", {"command": "true"})
    queue_best = bare_best = float("inf")
    for _ in range(3):
        t0 = time.perf_counter()
        for _ in range(n):
            await asyncio.create_task(_noop())
        bare_best = min(bare_best, (time.perf_counter() - t0) / n * 1e6)
        queue = LaneQueue(SessionQueueConfig(), runner=NoopRunner())
        t0 = time.perf_counter()
        for _ in range(n):
            await asyncio.create_task(queue.submit(call, ctx))
        queue_best = min(queue_best, (time.perf_counter() - t0) / n * 1e6)
    return queue_best, bare_best


async def bench_sessions(n: int, sessions: int) -> float:
    """µs per task when ``sessions`` LaneQueues (one per session) dispatch ``n`` no-op calls in
    all, concurrently, in this event loop; best of 3."""
    per = max(1, n // sessions)
    best = float("inf")
    for _ in range(3):
        queues = [LaneQueue(SessionQueueConfig(), runner=NoopRunner()) for _ in range(sessions)]
        work = [
            (q, ToolContext(f"s{i}", "/nonexistent", "run-1", 1), ToolCall(f"c{j}", "read", {}))
            for i, q in enumerate(queues)
            for j in range(per)
        ]
        t0 = time.perf_counter()
        await asyncio.gather(*(asyncio.create_task(q.submit(c, ctx)) for q, ctx, c in work))
        best = min(best, (time.perf_counter() - t0) / len(work) * 1e6)
    return best


def write_json(path: str, data: Any) -> None:
    Path(path).write_text(json.dumps(data, indent=1) + "\n")


def start_redis() -> tuple[subprocess.Popen[bytes], str, str]:
    binary = shutil.which("redis-server")
    if binary is None:
        raise SystemExit("redis-server not found on PATH")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    workdir = tempfile.mkdtemp(prefix="berth-bench-redis-")
    args = [binary, "--port", str(port), "--bind", "127.0.0.1", "--save", ""]
    args += ["--appendonly", "no", "--dir", workdir]
    proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    for _ in range(200):
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                break
        except OSError:
            time.sleep(0.05)
    return proc, f"redis://127.0.0.1:{port}/0", workdir


async def bench_bare_redis(redis: Redis[Any], n: int) -> list[float]:
    """Round trips (ms) of XADD -> XREADGROUP -> XADD -> XREAD between two coroutines."""
    tag = time.monotonic_ns()
    tasks, replies = f"bench:bare:{tag}:tasks", f"bench:bare:{tag}:replies"
    await redis.xgroup_create(tasks, GROUP, id="0", mkstream=True)
    stop = asyncio.Event()

    async def worker() -> None:
        while not stop.is_set():
            got = await redis.xreadgroup(GROUP, "w", {tasks: ">"}, count=1, block=200)
            for _, entries in got or []:
                for entry_id, fields in entries:
                    await redis.xadd(replies, {"task_id": fields[b"task_id"]})
                    untyped: Any = redis  # XACK is untyped in the redis stubs
                    await untyped.xack(tasks, GROUP, entry_id)

    loop_task = asyncio.create_task(worker())
    last = "0-0"
    samples = []
    for i in range(n):
        t0 = time.perf_counter()
        await redis.xadd(tasks, {"task_id": str(i)})
        while True:
            got = await redis.xread({replies: last}, count=1, block=1000)
            if got:
                last = got[0][1][0][0].decode()
                break
        samples.append((time.perf_counter() - t0) * 1000)
    stop.set()
    await loop_task
    return samples


async def bench_queue_redis(redis: Redis[Any], n: int, shared: str) -> list[float]:
    """Round trips (ms) of one execute-lane call through LaneQueue + RedisTaskTransport +
    LaneWorker (no-op tool)."""
    ws = Path(shared) / "workspaces" / "bench" / "s"
    ws.mkdir(parents=True)
    master = Path(shared) / "master.key"
    master.write_bytes(os.urandom(32))
    settings = WorkerSettings(
        redis_url="unused://",  # the worker is handed its client
        namespace="bench",
        laneworker="pool",
        pod_name="w-1",
        workspaces_root=str(Path(shared) / "workspaces"),
        master_key_file=str(master),
        block_ms=200,
    )
    worker = LaneWorker(settings, redis, tool_runner=noop_tool, metrics=WorkerMetrics())
    worker_task = asyncio.create_task(worker.run())
    transport = RedisTaskTransport(
        redis,
        namespace="bench",
        session_name="s",
        session_uid="bench-uid",
        epoch=1,
        lane_workers={"execute": "pool"},
        shared_root=str(ws),  # the session's workspace root: tasks name paths below it
        task_key=derive_session_key(master.read_bytes(), "bench", "s"),
    )
    cfg = SessionQueueConfig()
    cfg.set_lane_handler("execute", "external", 30_000)
    queue = LaneQueue(cfg, runner=NoopRunner(), transport=transport)
    ctx = ToolContext("s", str(ws), "run-1", 1)

    async def journal(_: ToolResult) -> None:
        return None

    samples = []
    for i in range(n):
        call = ToolCall(f"c{i}", "bash", {"command": "true"})
        t0 = time.perf_counter()
        [result] = await queue.execute([call], ctx, journal)
        samples.append((time.perf_counter() - t0) * 1000)
        if result.is_error:
            raise SystemExit(f"round trip failed: {result.output}")
    await queue.close()
    worker.stop()
    await worker_task
    return samples


async def main(argv: Sequence[str] | None = None) -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--tasks", type=int, default=20_000)
    p.add_argument("--round-trips", type=int, default=500)
    p.add_argument("--sessions", default="1,10,100", help="session counts, comma-separated")
    p.add_argument("--json", default=None, help="also write the per-session figures here")
    p.add_argument("--skip-redis", action="store_true", help="skip the external round trip")
    p.add_argument("--redis-only", action="store_true", help="only the external round trip")
    p.add_argument("--cluster", action="store_true", help="also on a local 3+3-node Redis Cluster")
    a = p.parse_args(argv)
    if not a.redis_only:
        await bench_dispatch(a)
    if not a.skip_redis:
        await bench_round_trips(a)


async def bench_dispatch(a: argparse.Namespace) -> None:
    """Sections 1 and 2 (internal dispatch)."""

    queue_us, bare_us = await bench_internal(a.tasks)
    print(f"internal dispatch, {a.tasks} no-op tasks submitted at once (best of 3):")
    print(f"  LaneQueue.submit       {queue_us:8.2f} µs/task")
    print(f"  asyncio.create_task    {bare_us:8.2f} µs/task")
    ratio = queue_us / bare_us
    print(f"  overhead               {queue_us - bare_us:8.2f} µs/task  ratio {ratio:.1f}x")

    seq_us, seq_bare_us = await bench_sequential(a.tasks)
    print(f"internal dispatch, {a.tasks} awaited one at a time (best of 3):")
    print(f"  LaneQueue.submit       {seq_us:8.2f} µs/task")
    print(f"  asyncio.create_task    {seq_bare_us:8.2f} µs/task")
    ratio = seq_us / seq_bare_us
    print(f"  overhead               {seq_us - seq_bare_us:8.2f} µs/task  ratio {ratio:.1f}x")

    counts = [int(x) for x in a.sessions.split(",")]
    per_session = {s: await bench_sessions(a.tasks, s) for s in counts}
    base_us = per_session[counts[0]]
    print(f"internal dispatch, {a.tasks} no-op tasks in all, S sessions per process (best of 3):")
    for s, us in per_session.items():
        print(
            f"  S={s:<4} {us:8.2f} µs/task  vs S={counts[0]}: {us / base_us:5.2f}"
            f"  vs create_task: {us / bare_us:5.1f}x"
        )
    if a.json:
        figures = [
            {"sessions": s, "us_per_task": us, "ratio": us / base_us, "bare_us": bare_us}
            for s, us in per_session.items()
        ]
        write_json(a.json, {"tasks": a.tasks, "curve": figures})


async def round_trips(url: str, n: int) -> tuple[list[float], list[float]]:
    """(bare, lane) round-trip samples in ms, sorted, on the Redis ``url`` names."""
    shared = tempfile.mkdtemp(prefix="berth-bench-shared-")
    redis: Redis[Any] = connect(url)
    try:
        await bench_bare_redis(redis, 50)  # warm-up
        bare = sorted(await bench_bare_redis(redis, n))
        await bench_queue_redis(redis, 50, os.path.join(shared, "warm-up"))
        ours = sorted(await bench_queue_redis(redis, n, os.path.join(shared, "run")))
    finally:
        closer: Any = redis
        await closer.aclose()
        shutil.rmtree(shared, ignore_errors=True)
    return bare, ours


async def bench_round_trips(a: argparse.Namespace) -> None:
    """Section 3: the lane round trip against bare Redis, on one server (and a cluster)."""
    proc, url, workdir = start_redis()
    try:
        bare, ours = await round_trips(url, a.round_trips)
    finally:
        proc.terminate()
        proc.wait()
        shutil.rmtree(workdir, ignore_errors=True)
    b50, b99 = percentile(bare, 50), percentile(bare, 99)
    o50, o99 = percentile(ours, 50), percentile(ours, 99)
    print(f"external round trip, {a.round_trips} sequential tasks, same redis-server:")
    print(f"  LaneQueue+Redis+worker p50 {o50:7.3f} ms  p99 {o99:7.3f} ms")
    print(f"  bare XADD/XREADGROUP/XADD/XREAD p50 {b50:7.3f} ms  p99 {b99:7.3f} ms")
    print(f"  ratio p50 {o50 / b50:.2f}x  p99 {o99 / b99:.2f}x")
    if not a.cluster:
        return
    from tests.integration.redis_cluster import start_cluster

    cluster = start_cluster()
    try:
        cbare, cours = await round_trips(cluster.url, a.round_trips)
    finally:
        cluster.stop()
    c50, c99 = percentile(cours, 50), percentile(cours, 99)
    cb50, cb99 = percentile(cbare, 50), percentile(cbare, 99)
    print(f"external round trip, {a.round_trips} sequential tasks, local Redis Cluster (3+3):")
    print(f"  LaneQueue+Redis+worker p50 {c50:7.3f} ms  p99 {c99:7.3f} ms")
    print(f"  bare XADD/XREADGROUP/XADD/XREAD p50 {cb50:7.3f} ms  p99 {cb99:7.3f} ms")
    print(f"  ratio to the cluster's bare p50 {c50 / cb50:.2f}x  p99 {c99 / cb99:.2f}x")
    print(f"  ratio to the single server's bare p50 {c50 / b50:.2f}x  p99 {c99 / b99:.2f}x")


if __name__ == "__main__":
    asyncio.run(main())
