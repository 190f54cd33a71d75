"""Benchmark: latency a BudgetPolicy adds to each LLM call, against no guard, in the same run.

Starts a private ``redis-server``, the budget service (``berth_operator.budget.service``, the
code the operator serves) in a separate process on loopback, and the scripted OpenAI-compatible
server (``python -m session_runtime.llm.scripted``) in another. Then, interleaving the two
variants call by call:

- bare: one streamed chat completion with the ``openai`` client;
- guarded: ``ClusterBudgetGuard.check_before_llm`` (reserve in Redis) + the same call +
  ``record_after_llm`` (settle), with one BudgetPolicy selecting the session.

Prints p50 / p99 of each variant, of the guard's own time (check + record), and the ratio of the
guarded to the bare median. Run: ``.venv/bin/python bench/budget_guard.py [--calls N]``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import openai  # noqa: E402
from aiohttp import web  # noqa: E402
from berth_operator.budget.directory import BudgetDirectory  # noqa: E402
from berth_operator.budget.ledger import Ledger  # noqa: E402
from berth_operator.budget.policy import Identity, Policy  # noqa: E402
from berth_operator.budget.service import BudgetService  # noqa: E402
from redis.asyncio import Redis  # noqa: E402

from session_runtime.budget.guard import ClusterBudgetGuard  # noqa: E402

TOKEN = "bench-token-0123456789"
UID = "bench-uid"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_port(port: int, proc: subprocess.Popen[bytes], what: str) -> None:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"{what} exited with {proc.returncode}")
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError(f"{what} did not start")


async def serve_budget(port: int, redis_url: str) -> None:
    """The budget-service process: one policy, one session."""
    directory = BudgetDirectory()
    directory.put_session(UID, TOKEN, Identity("bench", "s", tenant_id="acme", model="m"))
    directory.put_policy(Policy("bench", "p", "acme", {"totalTokens": 10**15}))
    service = BudgetService(Ledger(Redis.from_url(redis_url)), directory)
    app = web.Application()
    service.routes(app)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    await asyncio.Event().wait()


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


async def measure(calls: int, llm_url: str, budget_url: str) -> dict[str, list[float]]:
    client = openai.AsyncOpenAI(base_url=llm_url, api_key="k", max_retries=0)
    guard = ClusterBudgetGuard(budget_url, UID, TOKEN)
    messages = [{"role": "user", "content": "hello " * 50}]

    async def call() -> dict[str, int]:
        stream = await client.chat.completions.create(
            model="m", messages=messages, stream=True, stream_options={"include_usage": True}
        )
        usage = {"prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0}
        async for chunk in stream:
            if chunk.usage is not None:
                usage = chunk.usage.model_dump(include=set(usage))
        return usage

    out: dict[str, list[float]] = {"bare": [], "guarded": [], "guard": []}
    for _ in range(20):  # warm both paths
        await call()
        await guard.check_before_llm("s", 100)
        await guard.record_after_llm("s", await call())
    for _ in range(calls):
        t0 = time.perf_counter()
        await call()
        out["bare"].append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        decision = await guard.check_before_llm("s", 100)
        t1 = time.perf_counter()
        usage = await call()
        t2 = time.perf_counter()
        await guard.record_after_llm("s", usage)
        t3 = time.perf_counter()
        assert decision is None, decision
        out["guarded"].append(t3 - t0)
        out["guard"].append((t1 - t0) + (t3 - t2))
    await guard.close()
    await client.close()
    return out


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--calls", type=int, default=300)
    parser.add_argument("--serve-budget", nargs=2, metavar=("PORT", "REDIS_URL"))
    args = parser.parse_args()
    if args.serve_budget:
        asyncio.run(serve_budget(int(args.serve_budget[0]), args.serve_budget[1]))
        return
    binary = shutil.which("redis-server")
    if binary is None:
        sys.exit("redis-server is not installed")
    workdir = tempfile.mkdtemp(prefix="berth-bench-budget-")
    rport, bport, lport = free_port(), free_port(), free_port()
    procs: list[subprocess.Popen[bytes]] = []
    try:
        redis_cmd = [binary, "--port", str(rport), "--bind", "127.0.0.1", "--save", ""]
        procs.append(
            subprocess.Popen(
                [*redis_cmd, "--appendonly", "no", "--dir", workdir], stdout=subprocess.DEVNULL
            )
        )
        wait_port(rport, procs[-1], "redis-server")
        redis_url = f"redis://127.0.0.1:{rport}/0"
        procs.append(
            subprocess.Popen([sys.executable, __file__, "--serve-budget", str(bport), redis_url])
        )
        wait_port(bport, procs[-1], "budget service")
        script = Path(workdir) / "script.json"
        script.write_text(
            json.dumps({"turns": [{"text": "ok " * 20}], "on_exhausted": "repeat_last"})
        )
        env = dict(os.environ, PYTHONPATH=str(ROOT))
        procs.append(
            subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "session_runtime.llm.scripted",
                    "--script",
                    str(script),
                    "--host",
                    "127.0.0.1",
                    "--port",
                    str(lport),
                ],
                env=env,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
        )
        wait_port(lport, procs[-1], "scripted model")
        out = asyncio.run(
            measure(args.calls, f"http://127.0.0.1:{lport}/v1", f"http://127.0.0.1:{bport}")
        )
    finally:
        for proc in procs:
            proc.terminate()
        for proc in procs:
            proc.wait(timeout=10)
        shutil.rmtree(workdir, ignore_errors=True)
    print(f"{args.calls} calls per variant, interleaved (ms):")
    print(f"{'variant':<28}{'p50':>9}{'p99':>9}")
    for name, label in (
        ("bare", "LLM call, no guard"),
        ("guarded", "LLM call + budget guard"),
        ("guard", "guard alone (check+record)"),
    ):
        vals = out[name]
        print(f"{label:<28}{pct(vals, 0.5) * 1e3:>9.2f}{pct(vals, 0.99) * 1e3:>9.2f}")
    ratio = statistics.median(out["guarded"]) / statistics.median(out["bare"])
    print(f"guarded / bare (median): {ratio:.2f}")


if __name__ == "__main__":
    main()
