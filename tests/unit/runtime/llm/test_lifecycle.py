"""Lifecycle: close, busy, cancel, the agent registry, the synchronous API, btw, retention."""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path
from typing import Any

import pytest

from session_runtime import (
    AgentClosedError,
    RunCancelledError,
    SessionBusyError,
    SessionClosedError,
    SessionRetentionLimits,
)
from session_runtime.llm.scripted import ScriptedServer
from tests.unit.runtime.conftest import make_agent, opts

SLOW_TOOL = [
    {"tool_calls": [{"name": "bash", "arguments": {"command": "sleep 5"}}]},
    {"text": "done"},
]


async def _wait_for(predicate: Any) -> None:
    """Poll state that a running session changes (no timing assertion: the global test timeout
    bounds it)."""
    while not predicate():  # noqa: ASYNC110 - polling another task's observable state
        await asyncio.sleep(0.01)


async def test_close_is_idempotent_and_later_send_fails(
    scripted: Any, agent_for: Any, workspace: Path
) -> None:
    srv = await scripted([{"text": "hi"}])
    agent = agent_for(srv)
    session = agent.session(str(workspace), opts(session_id="s-close"))
    assert agent.list_sessions() == ["s-close"]
    await session.close_async()
    await session.close_async()
    assert session.is_closed() and session.state()["state"] == "closed"
    with pytest.raises(SessionClosedError, match=r"^Session 's-close' is closed$"):
        await session.send_async("hi")
    with pytest.raises(SessionClosedError):
        [ev async for ev in session.stream_async("hi")]
    assert agent.list_sessions() == []
    assert srv.requests == []


async def test_second_concurrent_send_is_busy(
    scripted: Any, agent_for: Any, workspace: Path
) -> None:
    srv = await scripted(SLOW_TOOL)
    session = agent_for(srv).session(str(workspace), opts(session_id="s-busy"))
    first = asyncio.create_task(session.send_async("slow"))
    await _wait_for(lambda: session.state()["state"] == "running")
    with pytest.raises(
        SessionBusyError, match=r"^Session 's-busy' already has an active operation$"
    ):
        await session.send_async("second")
    current = session.current_run()
    assert current is not None and current["status"] == "running"
    assert session.cancel_run(current["id"])
    with pytest.raises(RunCancelledError):
        await first
    snapshot = session.run_snapshot(current["id"])
    assert snapshot is not None and snapshot["status"] == "cancelled"
    assert session.state()["state"] == "idle"


async def test_close_cancels_the_active_run(scripted: Any, agent_for: Any, workspace: Path) -> None:
    srv = await scripted(SLOW_TOOL)
    session = agent_for(srv).session(str(workspace), opts())
    run = asyncio.create_task(session.send_async("slow"))
    await _wait_for(
        lambda: (
            any(r["type"] == "tool_start" for r in session.run_events(session.runs()[-1]["id"]))
            if session.runs()
            else False
        )
    )
    await session.close_async()
    with pytest.raises(RunCancelledError):
        await run
    assert session.runs()[-1]["status"] == "cancelled"


async def test_agent_close_closes_sessions(scripted: Any, workspace: Path) -> None:
    srv = await scripted([{"text": "hi"}])
    agent = make_agent(srv)
    a = agent.session(str(workspace), opts(session_id="a"))
    b = agent.session(str(workspace), opts(session_id="b"))
    assert agent.list_sessions() == ["a", "b"]
    assert await agent.close_session_async("a") and a.is_closed()
    assert not await agent.close_session_async("zzz")
    await agent.close_async()
    assert agent.is_closed() and b.is_closed()
    with pytest.raises(AgentClosedError):
        agent.session(str(workspace))


def test_synchronous_api(tmp_path: Path) -> None:
    srv = ScriptedServer(
        [
            {
                "tool_calls": [
                    {"name": "write", "arguments": {"file_path": "s.txt", "content": "s"}}
                ]
            },
            {"text": "sync done"},
            {"text": "streamed"},
            {"text": "side answer"},
        ]
    )
    srv.start_in_thread()
    agent = make_agent(srv)
    try:
        session = agent.session(str(tmp_path), opts(session_id="sync"))
        result = session.send("write s")
        assert result.text == "sync done" and result.tool_calls_count == 1
        assert (tmp_path / "s.txt").read_text() == "s"
        events = list(session.stream("again"))
        assert events[-1]["type"] == "agent_end" and events[-1]["text"] == "streamed"
        before = session.history()
        assert session.btw("what happened?").answer == "side answer"
        assert session.history() == before
        with pytest.raises(ValueError, match="empty"):
            session.btw("  ")
        assert agent.close_session("sync")
        session.close()
        with pytest.raises(SessionClosedError):
            session.send("x")
    finally:
        agent.close()
        srv.stop_thread()


async def test_retention_limits_fifo_with_cumulative_counts(
    scripted: Any, agent_for: Any, workspace: Path
) -> None:
    srv = await scripted({"turns": [{"text": "ok"}], "on_exhausted": "repeat_last"})
    limits = SessionRetentionLimits(max_runs_retained=2, max_events_per_run=2, max_trace_events=5)
    session = agent_for(srv).session(str(workspace), opts(retention_limits=limits))
    ids = [(await session.send_async(f"p{i}")).run_id for i in range(3)]
    runs = session.runs()
    assert [r["id"] for r in runs] == ids[1:]
    assert session.run_snapshot(ids[0]) is None
    last = session.run_snapshot(ids[2])
    assert last is not None and last["event_count"] > 2
    kept = session.run_events(ids[2])
    assert [e["type"] for e in kept] == ["turn_end", "agent_end"]  # newest two survive
    assert len(session._runs.trace) == 5


async def test_retention_limits_from_dict_and_validation() -> None:
    lim = SessionRetentionLimits.from_value({"max_runs_retained": 3})
    assert lim.max_runs_retained == 3 and lim.max_events_per_run is None
    with pytest.raises(ValueError):
        SessionRetentionLimits.from_value({"max_runz": 1})


async def test_concurrent_sessions_each_replay_their_conversation(
    scripted: Any, agent_for: Any, tmp_path: Path
) -> None:
    srv = await scripted(
        [
            {"tool_calls": [{"name": "bash", "arguments": {"command": "pwd > where.txt"}}]},
            {"text": "done"},
        ]
    )
    agent = agent_for(srv)
    dirs = [tmp_path / f"w{i}" for i in range(3)]
    for d in dirs:
        d.mkdir()
    sessions = [agent.session(str(d), opts()) for d in dirs]
    results = await asyncio.gather(*(s.send_async(f"task {i}") for i, s in enumerate(sessions)))
    assert [r.text for r in results] == ["done"] * 3
    for d in dirs:
        assert (d / "where.txt").read_text().strip().endswith(d.name)
    assert len({r["key"] for r in srv.requests}) == 3


def test_sync_stream_stopped_early_cancels_its_run(tmp_path: Path) -> None:
    srv = ScriptedServer(SLOW_TOOL)
    srv.start_in_thread()
    agent = make_agent(srv)
    try:
        session = agent.session(str(tmp_path), opts())
        for event in session.stream("slow"):
            if event["type"] == "tool_start":
                break
        run = session.runs()[-1]
        while session.state()["state"] == "running":  # the cancellation lands on the loop
            time.sleep(0.01)
        snapshot = session.run_snapshot(run["id"])
        assert snapshot is not None and snapshot["status"] == "cancelled"
    finally:
        agent.close()
        srv.stop_thread()


def test_agent_config_forms(tmp_path: Path) -> None:
    from session_runtime import Agent, ConfigError

    cfg = {"default_model": "local/m1", "providers": {"local": {"base_url": "http://x/v1"}}}
    path = tmp_path / "agent.json"
    path.write_text(json.dumps(cfg))
    for source in (cfg, str(path), "default_model: local/m1\nproviders:\n  local: {}\n"):
        agent = Agent.create(source)
        assert agent.default_model == "local/m1" and "local" in agent.providers
        agent.close()
    for bad in ("just a string", "providers: [1, 2]"):
        with pytest.raises(ConfigError):
            Agent.create(bad)
