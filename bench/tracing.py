"""Benchmark: what tracing costs an agent round, tracing on against off in the same run.

A round is one model turn asking for one cheap tool (``read``) plus the tool: the scripted
OpenAI-compatible server runs in its own process (``python -m session_runtime.llm.scripted``), as
in ``bench/loop.py``. Each trial is a child process of this script, alternately with tracing off
(no endpoint: OpenTelemetry's non-recording spans) and on (``berth_telemetry.tracing.configure``
with ``OTEL_EXPORTER_OTLP_ENDPOINT`` pointing at a local OTLP/HTTP sink in this process: the real
SDK, batch processor and protobuf exporter, on the exporter's own thread). A child runs
``--runs`` sessions of ``--rounds`` rounds and reports wall seconds per round and the spans it
ended. The figures: median per-round time of each variant, the difference as a share of an
untraced round and per span; and, without the model, the cost of one recording span (start,
four attributes, end, batch export) against a non-recording one, in a loop.

Run: ``.venv/bin/python bench/tracing.py [--trials 5] [--runs 5] [--rounds 20]``.
Goal: at most 1 % of a round and 50 µs per span on the dev machine (bench/README.md has figures).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


class _Sink(BaseHTTPRequestHandler):
    """An OTLP/HTTP receiver that accepts and drops every export (200, empty response)."""

    received = 0

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        type(self).received += 1
        self.send_response(200)
        self.send_header("Content-Type", "application/x-protobuf")
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *_: Any) -> None:
        return


def _span_loop(n: int) -> float:
    """Seconds per span of ``n`` spans like the loop's (start, 4 attributes, end)."""
    from opentelemetry import trace

    tracer = trace.get_tracer("bench")
    attrs = {"gen_ai.operation.name": "chat", "gen_ai.request.model": "bench", "berth.turn": 1}
    t0 = time.perf_counter()
    for _ in range(n):
        span = tracer.start_span("chat bench", attributes=attrs)
        span.set_attribute("gen_ai.usage.input_tokens", 10)
        span.end()
    return (time.perf_counter() - t0) / n


async def _child(traced: bool, runs: int, rounds: int, base_url: str, workspace: str) -> None:
    from opentelemetry import trace
    from opentelemetry.sdk.trace import ReadableSpan, SpanProcessor, TracerProvider

    from berth_telemetry import tracing
    from session_runtime import Agent, SessionOptions
    from session_runtime.store.memory import MemorySessionStore

    ended = [0]
    if traced:
        assert tracing.configure("bench")

        class Count(SpanProcessor):
            def on_end(self, span: ReadableSpan) -> None:
                ended[0] += 1

        provider = trace.get_tracer_provider()
        assert isinstance(provider, TracerProvider)
        provider.add_span_processor(Count())
    agent = Agent.create({"providers": {"openai": {"base_url": base_url, "api_key": "k"}}})
    total_rounds, wall, cpu = 0, 0.0, 0.0
    for i in range(runs + 1):  # the first is a warm-up
        opts = SessionOptions(
            session_store=MemorySessionStore(),
            max_tool_rounds=1000,
            tenant_id="acme",
            principal="bench",
        )
        session = agent.session(workspace, opts)
        t0, c0 = time.perf_counter(), time.process_time()
        result = await session.send_async(f"{os.getpid()} run {i}")  # its own conversation
        if i:
            wall += time.perf_counter() - t0
            cpu += time.process_time() - c0
            total_rounds += result.turn + 1
        await session.close_async()
    await agent.close_async()
    c0 = time.process_time()
    tracing.flush()  # the export of the runs' last spans is part of their CPU time
    cpu += time.process_time() - c0
    spans_before = ended[0]
    per_span = _span_loop(20_000)
    tracing.flush()
    print(
        json.dumps(
            {
                "per_round": wall / total_rounds,
                "cpu_per_round": cpu / total_rounds,
                "rounds": total_rounds,
                "spans": spans_before,
                "per_span_loop": per_span,
            }
        )
    )


def _trial(traced: bool, args: argparse.Namespace, base_url: str, ws: str, sink: str) -> Any:
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    if traced:
        env["OTEL_EXPORTER_OTLP_ENDPOINT"] = sink
    cmd = [sys.executable, __file__, "--child", "on" if traced else "off", "--url", base_url]
    cmd += ["--ws", ws, "--runs", str(args.runs), "--rounds", str(args.rounds)]
    out = subprocess.run(cmd, env=env, cwd=ROOT, capture_output=True, text=True, check=False)
    if out.returncode != 0:
        raise SystemExit(f"trial failed:\n{out.stderr}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def main(args: argparse.Namespace) -> None:
    sys.path.insert(0, str(ROOT / "bench"))
    from loop import _free_port, _prepare, _wait_ready

    sink = ThreadingHTTPServer(("127.0.0.1", 0), _Sink)
    threading.Thread(target=sink.serve_forever, daemon=True).start()
    sink_url = f"http://127.0.0.1:{sink.server_address[1]}"
    results: dict[bool, list[Any]] = {False: [], True: []}
    with tempfile.TemporaryDirectory() as tmp:
        ws, script = _prepare(tmp, args.rounds)
        port = _free_port()
        server = subprocess.Popen(
            [
                *(sys.executable, "-m", "session_runtime.llm.scripted", "--script", script),
                *("--host", "127.0.0.1", "--port", str(port)),
            ],
            cwd=ROOT,
        )
        base_url = f"http://127.0.0.1:{port}/v1"
        try:
            asyncio.run(_wait_ready(base_url))
            for _ in range(args.trials):
                for traced in (False, True):
                    results[traced].append(_trial(traced, args, base_url, ws, sink_url))
        finally:
            server.terminate()
            server.wait()
            sink.shutdown()
    off = statistics.median(r["per_round"] for r in results[False])
    on = statistics.median(r["per_round"] for r in results[True])
    spans = statistics.median(r["spans"] / r["rounds"] for r in results[True])
    cpu_off = statistics.median(r["cpu_per_round"] for r in results[False])
    cpu_on = statistics.median(r["cpu_per_round"] for r in results[True])
    loop_off = statistics.median(r["per_span_loop"] for r in results[False])
    loop_on = statistics.median(r["per_span_loop"] for r in results[True])
    print(
        f"bench/tracing.py: {args.trials} trials per variant (alternating child processes), "
        f"{args.runs} runs x {args.rounds} tool rounds (+1 answer) each; scripted model"
    )
    print(f"  round, tracing off: {off * 1e3:8.3f} ms (median of trials)")
    print(f"  round, tracing on : {on * 1e3:8.3f} ms ({spans:.1f} spans per round, OTLP export)")
    print(
        f"  tracing's cost    : {(on - off) * 1e6:8.1f} us per round = {(on - off) / off:6.2%} "
        f"of a round, {(on - off) / spans * 1e6:6.1f} us per span (goal: <= 1 %, <= 50 us)"
    )
    print(
        f"  CPU of the session process per round: {cpu_off * 1e3:.3f} ms off, "
        f"{cpu_on * 1e3:.3f} ms on: {(cpu_on - cpu_off) * 1e6:.1f} us = "
        f"{(cpu_on - cpu_off) / cpu_off:.2%} more, {(cpu_on - cpu_off) / spans * 1e6:.1f} us "
        "per span (less sensitive to other load than wall time)"
    )
    print(
        f"  one span in a loop: {loop_on * 1e6:6.2f} us recording vs {loop_off * 1e6:6.2f} us "
        f"non-recording; exports received by the sink: {_Sink.received}"
    )
    for traced in (False, True):
        per = ", ".join(f"{r['per_round'] * 1e3:.3f}" for r in results[traced])
        print(f"  trials {'on ' if traced else 'off'} (ms per round): {per}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=5)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--child", choices=("on", "off"))
    parser.add_argument("--url")
    parser.add_argument("--ws")
    parsed = parser.parse_args()
    if parsed.child:
        asyncio.run(_child(parsed.child == "on", parsed.runs, parsed.rounds, parsed.url, parsed.ws))
    else:
        main(parsed)
