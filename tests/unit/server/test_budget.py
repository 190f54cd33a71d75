"""Table tests for session_runtime.pod.budget (the spec.budget guard)."""

from __future__ import annotations

import pytest

from session_runtime.pod.budget import LimitsBudgetGuard
from session_runtime.pod.options import BudgetOptions


def test_no_limits_always_allows() -> None:
    guard = LimitsBudgetGuard(BudgetOptions())
    assert guard.check_before_llm("s", 10**9)["decision"] == "allow"
    assert guard.check_before_tool("s", "bash")["decision"] == "allow"


@pytest.mark.parametrize(
    ("consumed", "estimate", "decision"),
    [(0, 10, "allow"), (70, 10, "soft"), (95, 5, "soft"), (95, 6, "deny"), (100, 0, "deny")],
)
def test_token_limit(consumed: int, estimate: int, decision: str) -> None:
    guard = LimitsBudgetGuard(
        BudgetOptions(max_total_tokens=100, soft_limit_percent=80), consumed_tokens=consumed
    )
    out = guard.check_before_llm("s", estimate)
    assert out["decision"] == decision
    if decision == "deny":
        assert out["resource"] == "total_tokens" and "100" in out["reason"]


def test_soft_is_sent_once_and_usage_accumulates() -> None:
    guard = LimitsBudgetGuard(BudgetOptions(max_total_tokens=100, soft_limit_percent=50))
    guard.record_after_llm("s", {"prompt_tokens": 40, "completion_tokens": 20, "total_tokens": 60})
    assert guard.check_before_llm("s", 0)["decision"] == "soft"
    assert guard.check_before_llm("s", 0)["decision"] == "allow"
    guard.record_after_llm("s", {"total_tokens": 40})
    assert guard.check_before_llm("s", 1)["decision"] == "deny"
    assert guard.consumed["total_tokens"] == 100


def test_tool_calls_are_capped_with_resume_baseline() -> None:
    guard = LimitsBudgetGuard(BudgetOptions(max_tool_calls=3), consumed_tool_calls=1)
    decisions = [guard.check_before_tool("s", "bash")["decision"] for _ in range(4)]
    assert decisions == ["allow", "allow", "deny", "deny"]
    assert guard.consumed["tool_calls"] == 3
