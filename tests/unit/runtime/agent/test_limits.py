"""Each loop limit stops what it should, and the same script runs further without it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from session_runtime import (
    CircuitOpenError,
    MaxToolRoundsError,
    ParseRetriesExceededError,
)
from tests.unit.runtime.conftest import opts


def _append_round(i: int) -> dict[str, Any]:
    return {"tool_calls": [{"name": "bash", "arguments": {"command": f"echo {i} >> rounds.txt"}}]}


async def test_max_tool_rounds_stops_the_run(
    scripted: Any, agent_for: Any, workspace: Path
) -> None:
    script = [*(_append_round(i) for i in range(5)), {"text": "finished"}]
    srv = await scripted(script)
    session = agent_for(srv).session(str(workspace), opts(max_tool_rounds=2))
    with pytest.raises(MaxToolRoundsError, match=r"Max tool rounds \(2\) exceeded"):
        await session.send_async("loop")
    assert (workspace / "rounds.txt").read_text().split() == ["0", "1"]
    run = session.runs()[-1]
    assert run["status"] == "failed" and run["turn"] == 2


async def test_without_the_round_limit_the_same_script_finishes(
    scripted: Any, agent_for: Any, workspace: Path
) -> None:
    script = [*(_append_round(i) for i in range(5)), {"text": "finished"}]
    srv = await scripted(script)
    session = agent_for(srv).session(str(workspace), opts(max_tool_rounds=50))
    result = await session.send_async("loop")
    assert result.text == "finished" and result.turn == 5


def _malformed() -> dict[str, Any]:
    return {"tool_calls": [{"name": "write", "arguments": '{"file_path": "a.txt", "content": '}]}


async def test_malformed_arguments_are_fed_back_and_retried(
    scripted: Any, agent_for: Any, workspace: Path
) -> None:
    good = {"tool_calls": [{"name": "write", "arguments": {"file_path": "a.txt", "content": "A"}}]}
    srv = await scripted([_malformed(), _malformed(), good, {"text": "ok"}])
    session = agent_for(srv).session(str(workspace), opts(max_parse_retries=2))
    events = [ev async for ev in session.stream_async("write a")]
    assert events[-1]["type"] == "agent_end" and events[-1]["text"] == "ok"
    assert [e["attempt"] for e in events if e["type"] == "parse_retry"] == [1, 2]
    assert (workspace / "a.txt").read_text() == "A"
    fed_back = [m for m in srv.requests[1]["messages"] if m["role"] == "tool"]
    assert "not valid JSON" in fed_back[-1]["content"]


async def test_parse_retries_limit(scripted: Any, agent_for: Any, workspace: Path) -> None:
    good = {"tool_calls": [{"name": "write", "arguments": {"file_path": "a.txt", "content": "A"}}]}
    srv = await scripted([_malformed(), _malformed(), good, {"text": "ok"}])
    session = agent_for(srv).session(str(workspace), opts(max_parse_retries=1))
    with pytest.raises(ParseRetriesExceededError):
        await session.send_async("write a")
    assert not (workspace / "a.txt").exists()
    assert len(srv.requests) == 2


async def test_tool_timeout_cancels_the_tool(
    scripted: Any, agent_for: Any, workspace: Path
) -> None:
    cmd = "sleep 3; touch late.txt"
    srv = await scripted(
        [{"tool_calls": [{"name": "bash", "arguments": {"command": cmd}}]}, {"text": "ok"}]
    )
    session = agent_for(srv).session(str(workspace), opts(tool_timeout_ms=200))
    result = await session.send_async("slow")
    assert result.text == "ok"
    tool_msg = next(m for m in srv.requests[1]["messages"] if m["role"] == "tool")
    assert tool_msg["content"] == "Tool 'bash' timed out after 200 ms"
    # The process group was killed: the command never reached its second step.
    assert not (workspace / "late.txt").exists()


async def test_bash_own_timeout_argument(scripted: Any, agent_for: Any, workspace: Path) -> None:
    args = {"command": "sleep 3; touch late.txt", "timeout": 200}
    srv = await scripted([{"tool_calls": [{"name": "bash", "arguments": args}]}, {"text": "ok"}])
    session = agent_for(srv).session(str(workspace), opts())
    await session.send_async("slow")
    tool_msg = next(m for m in srv.requests[1]["messages"] if m["role"] == "tool")
    assert "timed out after 200 ms" in tool_msg["content"]
    assert not (workspace / "late.txt").exists()


def _fail() -> dict[str, Any]:
    return {"error": {"status": 503, "message": "overloaded"}}


async def test_transient_failures_below_threshold_are_retried(
    scripted: Any, agent_for: Any, workspace: Path
) -> None:
    srv = await scripted([_fail(), _fail(), {"text": "recovered"}])
    session = agent_for(srv).session(str(workspace), opts(circuit_breaker_threshold=3))
    events = [ev async for ev in session.stream_async("hi")]
    assert events[-1]["type"] == "agent_end" and events[-1]["text"] == "recovered"
    retries = [e for e in events if e["type"] == "llm_retry"]
    assert [r["attempt"] for r in retries] == [1, 2]
    assert retries[1]["delay_ms"] == 2 * retries[0]["delay_ms"]  # exponential backoff


async def test_circuit_breaker_opens_and_fails_fast(
    scripted: Any, agent_for: Any, workspace: Path
) -> None:
    srv = await scripted([_fail(), _fail(), {"text": "recovered"}])
    session = agent_for(srv).session(
        str(workspace), opts(circuit_breaker_threshold=2, llm_circuit_cooldown_ms=60_000)
    )
    with pytest.raises(CircuitOpenError, match="after 2 consecutive failures"):
        await session.send_async("hi")
    assert len(srv.requests) == 2
    # Open breaker: the next send fails without touching the endpoint; the session is usable.
    with pytest.raises(CircuitOpenError):
        await session.send_async("again")
    assert len(srv.requests) == 2
    assert session.state()["state"] == "idle"


async def test_auto_compaction_shrinks_the_request(
    scripted: Any, agent_for: Any, workspace: Path
) -> None:
    (workspace / "big.txt").write_text("line of text\n" * 400)
    read = {"tool_calls": [{"name": "read", "arguments": {"file_path": "big.txt"}}]}
    script = [read, read, read, {"text": "done"}]

    async def run(auto_compact: bool) -> list[int]:
        srv = await scripted(script)
        session = agent_for(srv).session(
            str(workspace),
            opts(auto_compact=auto_compact, context_window_tokens=6000, auto_compact_threshold=0.5),
        )
        events = [ev async for ev in session.stream_async("read it thrice")]
        compacted = [e for e in events if e["type"] == "context_compacted"]
        assert bool(compacted) == auto_compact
        return [len(str(r["messages"])) for r in srv.requests]

    with_compaction = await run(True)
    without = await run(False)
    assert without == sorted(without)  # grows every round without compaction
    assert with_compaction[-1] < without[-1]
    assert max(with_compaction) < without[-1]


def _cut(text: str) -> dict[str, Any]:
    return {"text": text, "finish_reason": "length"}


async def test_continuation_joins_truncated_replies(
    scripted: Any, agent_for: Any, workspace: Path
) -> None:
    srv = await scripted([_cut("part one, "), _cut("part two, "), {"text": "end."}])
    session = agent_for(srv).session(str(workspace), opts(max_continuation_turns=3))
    result = await session.send_async("long answer")
    assert result.text == "part one, part two, end."
    assert srv.requests[1]["messages"][-1]["role"] == "user"


async def test_continuation_limit_and_disable(
    scripted: Any, agent_for: Any, workspace: Path
) -> None:
    script = [_cut("part one, "), _cut("part two, "), {"text": "end."}]
    srv = await scripted(script)
    limited = agent_for(srv).session(str(workspace), opts(max_continuation_turns=1))
    assert (await limited.send_async("long answer")).text == "part one, part two, "
    srv2 = await scripted(script)
    off = agent_for(srv2).session(str(workspace), opts(continuation_enabled=False))
    assert (await off.send_async("long answer")).text == "part one, "
    assert len(srv2.requests) == 1
