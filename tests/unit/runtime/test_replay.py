"""HostEnv: every id and timestamp comes from it, so a replay is byte-identical."""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path
from typing import Any

from session_runtime import FixedClock, HostEnv, SequentialIdGenerator
from session_runtime.hostenv import SystemClock, UuidIdGenerator

from .conftest import DictStore, opts

SCRIPT: list[dict[str, Any]] = [
    {
        "tool_calls": [
            {"name": "write", "arguments": {"file_path": "a.txt", "content": "1\n"}},
            {"name": "bash", "arguments": {"command": "cat a.txt"}},
        ]
    },
    {"tool_calls": [{"name": "read", "arguments": {"file_path": "a.txt"}}]},
    {"text": "replayed"},
]


async def _record(scripted: Any, agent_for: Any, ws: Path) -> tuple[str, str, str]:
    srv = await scripted(SCRIPT)
    store = DictStore()
    env = HostEnv(SequentialIdGenerator("node"), FixedClock(1_700_000_000_000))
    session = agent_for(srv).session(str(ws), opts(host_env=env, session_store=store))
    events = [ev async for ev in session.stream_async("replay me")]
    # A record's traceparent is OpenTelemetry's (random trace ids, None when no tracer provider
    # is installed), the one field that does not come from HostEnv.
    runs = [{k: v for k, v in run.items() if k != "traceparent"} for run in session.runs()]
    records = json.dumps(runs, sort_keys=True)
    checkpoints = json.dumps(
        [asdict(cp) for _, cp in sorted(store.checkpoints.items())], sort_keys=True
    )
    return records, checkpoints, json.dumps(events, sort_keys=True)


async def test_two_replays_produce_identical_records_checkpoints_and_events(
    scripted: Any, agent_for: Any, tmp_path: Path
) -> None:
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    first = await _record(scripted, agent_for, tmp_path / "a")
    second = await _record(scripted, agent_for, tmp_path / "b")
    assert first == second
    runs = json.loads(first[0])
    assert runs[0]["id"] == "run-node-1"  # session id took node-0
    assert runs[0]["started_ms"] == 1_700_000_000_000


async def test_default_env_gives_unique_ids(scripted: Any, agent_for: Any, tmp_path: Path) -> None:
    srv = await scripted({"turns": [{"text": "x"}], "on_exhausted": "repeat_last"})
    agent = agent_for(srv)
    a = agent.session(str(tmp_path), opts())
    b = agent.session(str(tmp_path), opts())
    assert a.session_id != b.session_id
    r1 = await a.send_async("p")
    r2 = await a.send_async("p")
    assert r1.run_id != r2.run_id


def test_hostenv_parts() -> None:
    gen = SequentialIdGenerator("x", start=5)
    assert [gen.next_id() for _ in range(3)] == ["x-5", "x-6", "x-7"]
    clock = FixedClock(100)
    clock.advance(50)
    assert clock.now_ms() == 150
    clock.set(7)
    env = HostEnv(SequentialIdGenerator("r"), clock)
    assert (env.new_run_id(), env.new_id(), env.now_ms()) == ("run-r-0", "r-1", 7)
    replay = HostEnv.replay("p", 42)
    assert (replay.new_id(), replay.now_ms()) == ("p-0", 42)
    assert UuidIdGenerator().next_id() != UuidIdGenerator().next_id()
    assert SystemClock().now_ms() > 1_600_000_000_000
