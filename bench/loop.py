"""Benchmark: the agent loop's own overhead per round, as a fraction of a bare openai call.

Owned by the runtime core. Starts the scripted OpenAI-compatible server as a separate process
(``python -m session_runtime.llm.scripted``), runs sessions whose model asks for one cheap tool
per round, and splits each run's wall time into:

- model time: time spent inside the LLM client's ``complete`` (HTTP, server, stream parsing);
- tool time: time spent inside the tool executor;
- runtime overhead: everything else (events, hooks, budget checks, token estimates, parsing,
  checkpoints, bookkeeping).

It then replays exactly the same requests (same messages, same tools, same streamed replies) with
a bare ``openai.AsyncOpenAI`` client and reports the overhead per round as a fraction of the mean
bare call, measured in the same run. Variants: no store, and the in-memory store (checkpoint per
round). Run: ``.venv/bin/python bench/loop.py [--runs N] [--rounds R]``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import socket
import statistics
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import aiohttp
import openai

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from session_runtime import Agent, SessionOptions  # noqa: E402
from session_runtime.llm.client import LlmResponse, OpenAIChatClient, TextCallback  # noqa: E402
from session_runtime.tools import (  # noqa: E402
    DirectExecutor,
    ResultCallback,
    ToolCall,
    ToolContext,
    ToolResult,
)


class TimedLlm:
    """Wraps the real client; accumulates seconds spent in ``complete``."""

    def __init__(self, inner: OpenAIChatClient) -> None:
        self.inner = inner
        self.model = inner.model
        self.seconds = 0.0
        self.calls = 0

    async def complete(
        self,
        messages: list[dict[str, Any]],
        tools: list[dict[str, Any]] | None,
        on_text: TextCallback | None = None,
    ) -> LlmResponse:
        t0 = time.perf_counter()
        try:
            return await self.inner.complete(messages, tools, on_text)
        finally:
            self.seconds += time.perf_counter() - t0
            self.calls += 1


class TimedExecutor:
    """Wraps the direct executor; accumulates seconds spent running tools."""

    def __init__(self) -> None:
        self.inner = DirectExecutor()
        self.seconds = 0.0

    async def execute(
        self, calls: Sequence[ToolCall], ctx: ToolContext, on_result: ResultCallback
    ) -> list[ToolResult]:
        t0 = time.perf_counter()
        try:
            return await self.inner.execute(calls, ctx, on_result)
        finally:
            self.seconds += time.perf_counter() - t0

    async def recover(self, call: ToolCall, ctx: ToolContext) -> ToolResult | None:
        return None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def _wait_ready(base_url: str) -> None:
    client = openai.AsyncOpenAI(base_url=base_url, api_key="k", max_retries=0)
    try:
        for _ in range(600):
            try:
                await client.models.list()
                return
            except openai.APIConnectionError:
                await asyncio.sleep(0.05)
        raise RuntimeError("scripted server did not start")
    finally:
        await client.close()


async def _run_sessions(
    base_url: str, workspace: str, runs: int, store_factory: Any, label: str
) -> dict[str, float]:
    agent = Agent.create({"providers": {"openai": {"base_url": base_url, "api_key": "k"}}})
    llm = TimedLlm(OpenAIChatClient("bench", base_url, "k"))
    executor = TimedExecutor()
    events = 0

    def count(_: dict[str, Any]) -> None:
        nonlocal events
        events += 1

    wall = 0.0
    rounds = 0
    for i in range(runs):
        session = agent.session(
            workspace,
            SessionOptions(session_store=store_factory(), max_tool_rounds=1000),
            executor=executor,
            llm=llm,
        )
        session.register_hook("count", "*", count)
        t0 = time.perf_counter()
        result = await session.send_async(f"{label} run {i}")
        wall += time.perf_counter() - t0
        rounds += result.turn
        await session.close_async()
    await llm.inner.aclose()
    await agent.close_async()
    overhead = wall - llm.seconds - executor.seconds
    return {
        "wall": wall,
        "llm": llm.seconds,
        "tools": executor.seconds,
        "llm_calls": float(llm.calls),
        "rounds": float(rounds),
        "events": float(events),
        "overhead_per_call": overhead / llm.calls,
    }


async def _bare_calls(base_url: str, requests: list[dict[str, Any]], tools: Any) -> float:
    """Replay ``requests`` with a bare openai client (streaming, same tools); mean seconds."""
    client = openai.AsyncOpenAI(base_url=base_url, api_key="k", max_retries=0)
    times: list[float] = []
    for req in requests:
        t0 = time.perf_counter()
        stream = await client.chat.completions.create(
            model="bench",
            messages=req["messages"],
            tools=tools,
            stream=True,
            stream_options={"include_usage": True},
            extra_headers={"X-Scripted-Conversation": "bare-" + req["key"]},
        )
        async for _chunk in stream:
            pass
        times.append(time.perf_counter() - t0)
    await client.close()
    return statistics.mean(times)


def _prepare(tmp: str, rounds: int) -> tuple[str, str]:
    """A workspace with a small file and a script of ``rounds`` read rounds and an answer."""
    ws = os.path.join(tmp, "ws")
    os.mkdir(ws)
    Path(ws, "notes.txt").write_text("".join(f"line {i}\n" for i in range(50)))
    turn = {"tool_calls": [{"name": "read", "arguments": {"file_path": "notes.txt"}}]}
    script = {"turns": [*([turn] * rounds), {"text": "done"}]}
    script_path = os.path.join(tmp, "script.json")
    Path(script_path).write_text(json.dumps(script))
    return ws, script_path


async def main(runs: int, rounds: int) -> None:
    from session_runtime.store.memory import MemorySessionStore
    from session_runtime.tools.schemas import tool_definitions

    with tempfile.TemporaryDirectory() as tmp:
        ws, script_path = _prepare(tmp, rounds)
        port = _free_port()
        proc = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "session_runtime.llm.scripted",
            "--script",
            script_path,
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            cwd=str(ROOT),
        )
        base_url = f"http://127.0.0.1:{port}/v1"
        try:
            await _wait_ready(base_url)
            # Warm-up (imports, connection pool, JIT-free but caches).
            await _run_sessions(base_url, ws, 2, lambda: None, "warmup")
            plain = await _run_sessions(base_url, ws, runs, lambda: None, "plain")
            stored = await _run_sessions(base_url, ws, runs, MemorySessionStore, "stored")
            async with (
                aiohttp.ClientSession() as http,
                http.get(f"http://127.0.0.1:{port}/_scripted/requests") as resp,
            ):
                log = await resp.json()
            replay = [r for r in log if str(r["messages"][1]["content"]).startswith("plain")]
            bare = await _bare_calls(base_url, replay, tool_definitions())
        finally:
            proc.terminate()
            await proc.wait()

    print(
        f"bench/loop.py: {runs} runs x {rounds} tool rounds (+1 final answer) per variant; "
        "scripted server in its own process"
    )
    print(
        f"  bare openai streaming call (same requests): {bare * 1000:8.3f} ms mean over "
        f"{len(replay)} calls"
    )
    for name, r in (("no store", plain), ("memory store", stored)):
        per_call = r["overhead_per_call"]
        print(
            f"  {name:13s}: per LLM round: model {r['llm'] / r['llm_calls'] * 1000:7.3f} ms, "
            f"tools {r['tools'] / r['rounds'] * 1000:7.3f} ms, runtime overhead "
            f"{per_call * 1000:7.3f} ms = {per_call / bare:6.1%} of a bare call "
            f"({int(r['events'])} events, {int(r['llm_calls'])} calls)"
        )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--rounds", type=int, default=10)
    args = parser.parse_args()
    asyncio.run(main(args.runs, args.rounds))
