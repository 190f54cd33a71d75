"""Budget guard decisions (A3S BudgetGuard): soft, deny on LLM, deny on tool, failure modes."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path
from typing import Any

import pytest

from session_runtime import BudgetExhaustedError, TokenBudgetGuard
from session_runtime.agent.budget import GuardCaller, parse_decision
from tests.unit.runtime.conftest import opts

TOOL_THEN_TEXT: list[dict[str, Any]] = [
    {"tool_calls": [{"name": "write", "arguments": {"file_path": "f.txt", "content": "1"}}]},
    {"text": "done"},
]


class Recorder:
    """A guard that returns scripted decisions and records every call."""

    def __init__(self, llm: list[Any] | None = None, tool: list[Any] | None = None) -> None:
        self.llm = list(llm or [])
        self.tool = list(tool or [])
        self.calls: list[tuple[str, Any]] = []

    def check_before_llm(self, session_id: str, estimated_tokens: int) -> Any:
        self.calls.append(("llm", estimated_tokens))
        return self.llm.pop(0) if self.llm else None

    def record_after_llm(self, session_id: str, usage: dict[str, int]) -> None:
        self.calls.append(("record", usage["total_tokens"]))

    def check_before_tool(self, session_id: str, tool_name: str) -> Any:
        self.calls.append(("tool", tool_name))
        return self.tool.pop(0) if self.tool else {"decision": "allow"}


async def test_soft_decision_emits_threshold_event_and_continues(
    scripted: Any, agent_for: Any, workspace: Path
) -> None:
    srv = await scripted(TOOL_THEN_TEXT)
    soft = {
        "decision": "soft",
        "resource": "tokens",
        "consumed": 80,
        "limit": 100,
        "message": "80% used",
    }
    guard = Recorder(llm=[soft])
    session = agent_for(srv).session(str(workspace), opts(budget_guard=guard, tenant_id="t1"))
    hooked: list[dict[str, Any]] = []
    session.register_hook("b", "budget_threshold_hit", hooked.append)
    events = [ev async for ev in session.stream_async("go")]
    hits = [e for e in events if e["type"] == "budget_threshold_hit"]
    assert len(hits) == 1
    assert {k: hits[0][k] for k in ("resource", "kind", "consumed", "limit", "message")} == {
        "resource": "tokens",
        "kind": "soft",
        "consumed": 80,
        "limit": 100,
        "message": "80% used",
    }
    assert hooked == hits and hooked[0]["tenant_id"] == "t1"
    assert events[-1]["type"] == "agent_end"
    assert (workspace / "f.txt").exists()
    # record_after_llm got the real usage of both calls; estimates were passed before each call.
    recorded = [v for k, v in guard.calls if k == "record"]
    assert len(recorded) == 2 and sum(recorded) == events[-1]["usage"]["total_tokens"]
    estimates = [v for k, v in guard.calls if k == "llm"]
    assert len(estimates) == 2 and estimates[1] > estimates[0] > 0


async def test_deny_on_llm_raises_and_session_stays_usable(
    scripted: Any, agent_for: Any, workspace: Path
) -> None:
    srv = await scripted([{"text": "after top-up"}])
    deny = {"decision": "deny", "resource": "llm_tokens", "reason": "monthly cap"}
    guard = Recorder(llm=[deny])
    session = agent_for(srv).session(str(workspace), opts(budget_guard=guard))
    events: list[dict[str, Any]] = []
    session.register_hook("all", "*", events.append)
    with pytest.raises(BudgetExhaustedError) as info:
        await session.send_async("go")
    assert str(info.value) == "Budget exhausted on 'llm_tokens': monthly cap"
    assert isinstance(info.value, RuntimeError)
    assert srv.requests == []  # the call never left
    hard = [e for e in events if e["type"] == "budget_threshold_hit"]
    assert hard[0]["kind"] == "hard" and hard[0]["resource"] == "llm_tokens"
    assert not session.is_closed()
    assert session.runs()[-1]["status"] == "failed"
    result = await session.send_async("go again")  # the guard now allows
    assert result.text == "after top-up"


async def test_deny_on_tool_becomes_error_result_and_run_continues(
    scripted: Any, agent_for: Any, workspace: Path
) -> None:
    srv = await scripted(TOOL_THEN_TEXT)
    deny = {"decision": "deny", "resource": "tool_calls", "reason": "no writes today"}
    session = agent_for(srv).session(str(workspace), opts(budget_guard=Recorder(tool=[deny])))
    result = await session.send_async("go")
    assert result.text == "done"
    assert not (workspace / "f.txt").exists()
    tool_msg = next(m for m in srv.requests[1]["messages"] if m["role"] == "tool")
    assert tool_msg["content"] == "Budget exhausted on 'tool_calls': no writes today"


class Raising:
    def check_before_llm(self, session_id: str, estimated_tokens: int) -> Any:
        raise RuntimeError("guard backend down")


async def test_raising_guard_fail_open_allows(
    scripted: Any, agent_for: Any, workspace: Path
) -> None:
    srv = await scripted([{"text": "went through"}])
    session = agent_for(srv).session(
        str(workspace), opts(budget_guard=Raising(), budget_failure_mode="fail_open")
    )
    assert (await session.send_async("go")).text == "went through"


async def test_raising_guard_fail_closed_denies(
    scripted: Any, agent_for: Any, workspace: Path
) -> None:
    srv = await scripted([{"text": "went through"}])
    session = agent_for(srv).session(
        str(workspace), opts(budget_guard=Raising(), budget_failure_mode="fail_closed")
    )
    with pytest.raises(BudgetExhaustedError, match=r"Budget exhausted on .budget_guard.*raised"):
        await session.send_async("go")
    assert srv.requests == []


class Stalling:
    def __init__(self) -> None:
        self.release = threading.Event()

    def check_before_llm(self, session_id: str, estimated_tokens: int) -> Any:
        self.release.wait(5)
        return None


async def test_stalled_guard_times_out_into_the_failure_mode() -> None:
    guard = Stalling()
    try:
        closed = GuardCaller(guard, "fail_closed", timeout_ms=50)
        decision = await closed.check_before_llm("s", 10)
        assert decision.kind == "deny" and "timed out after 50 ms" in decision.reason
        opened = GuardCaller(guard, "fail_open", timeout_ms=50)
        assert (await opened.check_before_llm("s", 10)).kind == "allow"
    finally:
        guard.release.set()


async def test_async_guard_and_missing_methods_and_unreadable_decisions() -> None:
    class AsyncGuard:
        async def check_before_tool(self, session_id: str, tool_name: str) -> Any:
            await asyncio.sleep(0)
            return {"decision": "deny", "resource": "r", "reason": tool_name}

    caller = GuardCaller(AsyncGuard(), "fail_closed", 1000)
    assert (await caller.check_before_tool("s", "bash")).reason == "bash"
    assert (await caller.check_before_llm("s", 5)).kind == "allow"  # missing method = allow

    class Weird:
        def check_before_llm(self, session_id: str, estimated_tokens: int) -> Any:
            return "yes"

    assert (await GuardCaller(Weird(), "fail_closed", 1000).check_before_llm("s", 1)).kind == "deny"
    assert (await GuardCaller(Weird(), "fail_open", 1000).check_before_llm("s", 1)).kind == "allow"
    with pytest.raises(ValueError):
        parse_decision({"decision": "maybe"})


def test_token_budget_guard_decisions() -> None:
    g = TokenBudgetGuard(max_total_tokens=1000, max_tool_calls=4, soft_limit_percent=50)
    assert g.check_before_llm("s", 100) is None
    g.record_after_llm("s", {"total_tokens": 400})
    soft = g.check_before_llm("s", 200)
    assert soft is not None and soft["decision"] == "soft" and soft["consumed"] == 600
    assert g.check_before_llm("s", 200) is None  # soft only once per resource
    g.record_after_llm("s", {"total_tokens": 500})
    deny = g.check_before_llm("s", 200)
    assert deny is not None and deny["decision"] == "deny" and deny["resource"] == "tokens"
    decisions = [g.check_before_tool("s", "bash") for _ in range(5)]
    kinds = [None if d is None else d["decision"] for d in decisions]
    assert kinds == [None, "soft", None, None, "deny"]


async def test_builtin_guard_in_a_session_limits_tool_calls(
    scripted: Any, agent_for: Any, workspace: Path
) -> None:
    calls = [{"name": "bash", "arguments": {"command": f"echo {i} >> n.txt"}} for i in range(3)]
    srv = await scripted([{"tool_calls": calls}, {"text": "done"}])
    guard = TokenBudgetGuard(max_tool_calls=2, soft_limit_percent=None)
    session = agent_for(srv).session(str(workspace), opts(budget_guard=guard))
    result = await session.send_async("count")
    assert result.text == "done" and result.tool_calls_count == 3
    assert (workspace / "n.txt").read_text().split() == ["0", "1"]
