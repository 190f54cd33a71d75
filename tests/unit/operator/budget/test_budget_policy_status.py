"""BudgetPolicy status, conditions and Events from the ledger's counters (pure)."""

from __future__ import annotations

from berth_operator.api.budgetpolicy import BudgetPolicyStatus
from berth_operator.budget.policy import Identity, Policy, WindowState
from berth_operator.builders.session_pod import budget_env
from berth_operator.handlers.budgetpolicy import session_identity
from berth_operator.reconcile.budget_status import budget_status
from berth_operator.settings import BudgetSettings, OperatorSettings

POLICY = Policy("team", "p", "acme", {"totalTokens": 1000}, soft_limit_percent=80)
NOW = 1_764_000_000.0


def state(used: int, denied: int = 0, sessions: int = 0) -> WindowState:
    return WindowState({"totalTokens": used}, {"totalTokens": 5}, denied, sessions)


def conds(status: BudgetPolicyStatus) -> dict[str, str]:
    return {c.type: c.status for c in status.conditions or []}


def test_budget_policy_status_below_soft_then_soft_then_exhausted() -> None:
    first, events = budget_status(POLICY, state(100), BudgetPolicyStatus(), now=NOW, generation=1)
    assert conds(first) == {"Ready": "True", "SoftLimitReached": "False", "Exhausted": "False"}
    assert events == []
    assert first.resources is not None and first.resources[0].percent == 10
    assert first.resources[0].reserved == 5 and first.used_percent == 10
    assert first.window == POLICY.window(NOW) and first.observed_generation == 1

    soft, events = budget_status(POLICY, state(850), first, now=NOW + 1, generation=1)
    assert conds(soft)["SoftLimitReached"] == "True"
    assert [e.reason for e in events] == ["BudgetSoftLimitReached"]
    again, events = budget_status(POLICY, state(860), soft, now=NOW + 2, generation=1)
    assert events == []  # no second Event while the condition stays True

    hard, events = budget_status(POLICY, state(1010, 3, 2), again, now=NOW + 3, generation=1)
    assert conds(hard)["Exhausted"] == "True"
    assert [e.reason for e in events] == ["BudgetExhausted"]
    assert hard.sessions_denied == 2 and hard.denied_calls == 3


def test_budget_policy_status_new_period_resets() -> None:
    hard, _ = budget_status(POLICY, state(1000, 1, 1), BudgetPolicyStatus(), now=NOW, generation=1)
    later = POLICY.window_end(NOW) + 5
    fresh, events = budget_status(POLICY, state(0), hard, now=later, generation=1)
    assert [e.reason for e in events] == ["BudgetReset"]
    assert conds(fresh)["Exhausted"] == "False"
    assert fresh.last_reset is not None and fresh.last_reset.timestamp() == POLICY.window_start(
        later
    )


def test_budget_policy_session_identity_and_pod_env() -> None:
    spec = {"model": "openai/m", "identity": {"tenantId": "acme", "principal": "al"}}
    assert session_identity("team", "s", spec) == Identity(
        "team", "s", tenant_id="acme", principal="al", model="openai/m"
    )
    assert budget_env(OperatorSettings()) == []
    on = OperatorSettings(budget=BudgetSettings(enabled=True, url="http://b:8082"))
    assert {e["name"]: e["value"] for e in budget_env(on)} == {
        "BERTH_BUDGET_URL": "http://b:8082",
        "BERTH_BUDGET_TIMEOUT_MS": "2000",
        "BERTH_BUDGET_FAILURE_POLICY": "Closed",
    }
