"""BudgetPolicy: the custom resource's spec → the service's Policy; windows, amounts, cost."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from berth_operator.api.budgetpolicy import parse_spec, to_policy
from berth_operator.budget.policy import (
    Identity,
    Policy,
    Price,
    reserve_amounts,
    usage_amounts,
)
from pydantic import ValidationError


def ts(text: str) -> float:
    return datetime.fromisoformat(text).replace(tzinfo=UTC).timestamp()


def test_budget_policy_spec_to_policy() -> None:
    spec = parse_spec(
        {
            "selector": {"tenantId": "acme", "principal": "alice"},
            "limits": {"totalTokens": 1000, "costMicroUSD": 5000},
            "period": "Window",
            "windowSeconds": 3600,
            "softLimitPercent": 75,
            "failurePolicy": "Open",
            "prices": [{"model": "openai/gpt-4o-mini", "promptUSDPerMillionTokens": "0.15"}],
        }
    )
    policy = to_policy("team", "p", spec)
    assert policy.limits == {"totalTokens": 1000, "costMicroUSD": 5000}
    assert (policy.tenant_id, policy.principal, policy.agent_template_id) == ("acme", "alice", None)
    assert policy.window_seconds == 3600 and policy.failure_policy == "Open"
    assert policy.prices["openai/gpt-4o-mini"] == Price(0.15, 0.0)
    assert policy.soft_at("totalTokens") == 750


def test_budget_policy_spec_rejects_bad_values() -> None:
    with pytest.raises(ValidationError):
        parse_spec({"selector": {"tenantId": "acme"}, "limits": {"totalTokens": 0}})
    with pytest.raises(ValidationError):
        parse_spec({"selector": {"tenantId": "a b"}, "limits": {"totalTokens": 1}})
    with pytest.raises(ValidationError):
        parse_spec(
            {
                "selector": {"tenantId": "acme"},
                "limits": {"totalTokens": 1},
                "prices": [{"model": "m", "promptUSDPerMillionTokens": "-1"}],
            }
        )


def test_budget_policy_selects_by_identity() -> None:
    p = Policy("team", "p", "acme", {"totalTokens": 1}, principal="alice")
    assert p.selects(Identity("team", "s", tenant_id="acme", principal="alice"))
    assert not p.selects(Identity("team", "s", tenant_id="acme", principal="bob"))
    assert not p.selects(Identity("other", "s", tenant_id="acme", principal="alice"))
    assert not p.selects(Identity("team", "s", tenant_id="globex", principal="alice"))


def test_budget_policy_windows() -> None:
    day = Policy("n", "p", "t", {"totalTokens": 1}, period="Day")
    month = Policy("n", "p", "t", {"totalTokens": 1}, period="Month")
    win = Policy("n", "p", "t", {"totalTokens": 1}, period="Window", window_seconds=600)
    now = ts("2026-12-31T23:59:59")
    assert day.window(now) == "d20261231" and day.window_end(now) == ts("2027-01-01T00:00:00")
    assert month.window(now) == "m202612" and month.window_end(now) == ts("2027-01-01T00:00:00")
    assert win.window(now) != win.window(now + 600)
    assert win.window_end(now) - now <= 600


def test_budget_policy_amounts_and_cost() -> None:
    p = Policy(
        "n",
        "p",
        "t",
        {"totalTokens": 1, "completionTokens": 1, "costMicroUSD": 1},
        prices={"*": Price(1.0, 4.0)},
    )
    assert reserve_amounts(p, "any/model", 50) == {
        "totalTokens": 50,
        "completionTokens": 0,
        "costMicroUSD": 50,
    }
    usage = {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15}
    assert usage_amounts(p, "any/model", usage) == {
        "totalTokens": 15,
        "completionTokens": 5,
        "costMicroUSD": 10 + 20,
    }
