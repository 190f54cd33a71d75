"""A multi-round run against the real scripted server over HTTP, with real tools in a temporary
workspace: text, usage, tool-call count, event order, identity labels."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from session_runtime import Agent, Session
from session_runtime.llm.scripted import ScriptedServer
from tests.unit.runtime.conftest import opts

IDENTITY = {
    "tenant_id": "acme-corp",
    "principal": "user:42",
    "agent_template_id": "reviewer-v3",
    "correlation_id": "req-9f2c",
}

SCRIPT: list[dict[str, Any]] = [
    {
        "tool_calls": [
            {"name": "write", "arguments": {"file_path": "src/app.py", "content": "x = 1\n"}},
            {"name": "bash", "arguments": {"command": "wc -l < src/app.py; echo marker-$((6*7))"}},
        ],
        "usage": {"prompt_tokens": 100, "completion_tokens": 10},
    },
    {
        "tool_calls": [
            {
                "name": "edit",
                "arguments": {
                    "file_path": "src/app.py",
                    "old_string": "x = 1",
                    "new_string": "x = 2",
                },
            },
            {"name": "grep", "arguments": {"pattern": "x = ", "path": "src"}},
            {"name": "glob", "arguments": {"pattern": "**/*.py"}},
        ],
        "usage": {"prompt_tokens": 200, "completion_tokens": 20},
    },
    {"text": "Set x to 2 in src/app.py.", "usage": {"prompt_tokens": 300, "completion_tokens": 5}},
]


async def _session(srv: ScriptedServer, agent_for: Any, workspace: Path) -> tuple[Agent, Session]:
    agent = agent_for(srv)
    return agent, agent.session(str(workspace), opts(**IDENTITY))


async def test_multi_round_run_returns_text_usage_and_tool_count(
    scripted: Any, agent_for: Any, workspace: Path
) -> None:
    srv = await scripted(SCRIPT)
    _, session = await _session(srv, agent_for, workspace)
    result = await session.send_async("make x two")

    assert result.text == SCRIPT[2]["text"]
    turns_usage = [t["usage"] for t in SCRIPT]
    assert result.prompt_tokens == sum(u["prompt_tokens"] for u in turns_usage)
    assert result.completion_tokens == sum(u["completion_tokens"] for u in turns_usage)
    assert result.total_tokens == result.prompt_tokens + result.completion_tokens
    assert result.tool_calls_count == sum(len(t.get("tool_calls", [])) for t in SCRIPT)
    assert result.turn == 2
    assert (workspace / "src" / "app.py").read_text() == "x = 2\n"
    # The model saw the real tool outputs: the bash output reached the second request.
    second = srv.requests[1]["messages"]
    tool_outputs = [m["content"] for m in second if m["role"] == "tool"]
    assert any("marker-42" in out for out in tool_outputs)
    third = srv.requests[2]["messages"]
    assert any("src/app.py:1:x = 2" in m["content"] for m in third if m["role"] == "tool")
    assert len(srv.requests) == len(SCRIPT)


async def test_events_arrive_in_order_with_identity_labels(
    scripted: Any, agent_for: Any, workspace: Path
) -> None:
    srv = await scripted(SCRIPT)
    _, session = await _session(srv, agent_for, workspace)
    hooked: list[dict[str, Any]] = []
    session.register_hook("audit", "*", hooked.append)
    streamed = [ev async for ev in session.stream_async("make x two")]

    types = [e["type"] for e in streamed]
    # Per round: turn_start, then a pre_tool_use/tool_start/tool_end per call, then turn_end.
    expected: list[str] = []
    for turn in SCRIPT[:2]:
        n = len(turn["tool_calls"])
        expected += [
            "turn_start",
            *["pre_tool_use"] * n,
            *["tool_start"] * n,
            *["tool_end"] * n,
            "turn_end",
        ]
    text_deltas = [t for t in types if t == "text_delta"]
    assert types == [*expected, "turn_start", *text_deltas, "turn_end", "agent_end"]
    assert "".join(e["text"] for e in streamed if e["type"] == "text_delta") == SCRIPT[2]["text"]
    seqs = [e["seq"] for e in streamed]
    assert seqs == sorted(seqs) and len(set(seqs)) == len(seqs)
    run_id = streamed[-1]["run_id"]
    assert run_id.startswith("run-")
    for ev in streamed:
        assert ev["session_id"] == session.session_id
        assert ev["run_id"] == run_id
        for key, value in IDENTITY.items():
            assert ev[key] == value
    # Hooks saw the same events in the same order.
    assert [e["seq"] for e in hooked] == seqs
    assert all(h["tenant_id"] == IDENTITY["tenant_id"] for h in hooked)
    # Tool-end events of round 1 carry the real outputs and exit codes.
    ends = [e for e in streamed if e["type"] == "tool_end"]
    assert ends[1]["name"] == "bash" and ends[1]["exit_code"] == 0
    assert "marker-42" in ends[1]["output"]
    # Identity labels on the session itself.
    assert (
        session.tenant_id,
        session.principal,
        session.agent_template_id,
        session.correlation_id,
    ) == tuple(IDENTITY.values())
    # The run record keeps the events.
    assert [e["seq"] for e in session.run_events(run_id)] == seqs
    snap = session.run_snapshot(run_id)
    assert snap is not None and snap["status"] == "completed"
    assert snap["event_count"] == len(streamed)


async def test_hook_can_block_a_tool_call(scripted: Any, agent_for: Any, workspace: Path) -> None:
    srv = await scripted(
        [
            {
                "tool_calls": [
                    {"name": "bash", "arguments": {"command": "touch blocked.txt"}},
                    {"name": "write", "arguments": {"file_path": "ok.txt", "content": "ok"}},
                ]
            },
            {"text": "done"},
        ]
    )
    _, session = await _session(srv, agent_for, workspace)
    seen: list[dict[str, Any]] = []

    def guard(event: dict[str, Any]) -> dict[str, Any] | None:
        seen.append(event)
        return {"action": "block", "reason": "no shell in review mode"}

    session.register_hook("no-bash", "pre_tool_use", guard, matcher={"tool": "bash"})
    result = await session.send_async("go")
    assert result.text == "done"
    assert not (workspace / "blocked.txt").exists()
    assert (workspace / "ok.txt").read_text() == "ok"
    assert [e["name"] for e in seen] == ["bash"]
    assert seen[0]["arguments"] == {"command": "touch blocked.txt"}
    assert seen[0]["tenant_id"] == IDENTITY["tenant_id"]
    tool_msgs = [m for m in srv.requests[1]["messages"] if m["role"] == "tool"]
    assert tool_msgs[0]["content"] == "Blocked by hook 'no-bash': no shell in review mode"


async def test_host_events_reach_hooks_and_streams(
    scripted: Any, agent_for: Any, workspace: Path
) -> None:
    srv = await scripted([{"text": "hi"}])
    _, session = await _session(srv, agent_for, workspace)
    seen: list[dict[str, Any]] = []
    session.register_hook("peer", "peer_invocation", seen.append)
    ev = await session.emit_host_event_async(
        {"type": "peer_invocation", "from_session_id": "s-1", "from_tenant_id": "other"}
    )
    assert seen == [ev]
    assert ev["tenant_id"] == IDENTITY["tenant_id"] and ev["from_session_id"] == "s-1"
    try:
        await session.emit_host_event_async({"type": "tool_end"})
    except ValueError as exc:
        assert "host events" in str(exc)
    else:
        raise AssertionError("non-cluster events must be refused")
