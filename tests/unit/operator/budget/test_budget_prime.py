"""What a new leader's budget service knows before it opens: the listed BudgetPolicies and
AgentSessions (``handlers.budgetpolicy.fill``), as their watch events would put them."""

from __future__ import annotations

from typing import Any

from berth_operator.budget.policy import Identity
from berth_operator.handlers.budgetpolicy import fill
from berth_operator.handlers.context import BudgetClients
from berth_operator.settings import OperatorSettings


def _policy(name: str, spec: dict[str, Any]) -> dict[str, Any]:
    return {"metadata": {"namespace": "team", "name": name}, "spec": spec}


def _session(uid: str, name: str, tenant: str) -> dict[str, Any]:
    return {
        "metadata": {"namespace": "team", "name": name, "uid": uid},
        "spec": {"model": "openai/gpt-4o-mini", "identity": {"tenantId": tenant}},
    }


async def test_listed_policies_and_sessions_fill_the_directory() -> None:
    tokens = {"uid-a": "token-a"}
    budget = BudgetClients.create(OperatorSettings(), tokens.get)
    try:
        fill(
            budget,
            [
                _policy("p", {"selector": {"tenantId": "acme"}, "limits": {"totalTokens": 1000}}),
                _policy("broken", {"limits": "lots"}),  # the CRD would refuse it: not enforced
            ],
            [_session("uid-a", "a", "acme"), {"metadata": {"name": "no-uid"}}],
        )
        assert [p.name for p in budget.directory.policies("team")] == ["p"]
        who = Identity("team", "a", tenant_id="acme", model="openai/gpt-4o-mini")
        assert budget.directory.identity("uid-a") == who
        assert budget.directory.identify("uid-a", "token-a") == who  # the token from the cache
        assert budget.directory.identify("uid-a", "token-b") is None
    finally:
        await budget.close()
