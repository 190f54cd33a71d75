"""Gauges of BudgetPolicies, set from each policy's status refresh (handlers.budgetpolicy).

Labels ``namespace`` / ``policy`` are bounded by the user's own BudgetPolicy objects and removed
when a policy's status loop ends; ``resource`` is one of the four resource names. The decision
counters and request latency live with the service (``berth_operator.budget.service``).
"""

from __future__ import annotations

import contextlib

from prometheus_client import Gauge

from berth_operator.api.budgetpolicy import BudgetPolicyStatus
from berth_operator.budget.policy import RESOURCES

USED_RATIO = Gauge(
    "berth_operator_budget_used_ratio",
    "Consumed / limit of a BudgetPolicy resource in the current period (1 = exhausted).",
    ["namespace", "policy", "resource"],
)
SESSIONS_DENIED = Gauge(
    "berth_operator_budget_sessions_denied",
    "Distinct sessions a BudgetPolicy denied an LLM call in the current period.",
    ["namespace", "policy"],
)
DENIED_CALLS = Gauge(
    "berth_operator_budget_denied_calls",
    "LLM calls a BudgetPolicy denied in the current period.",
    ["namespace", "policy"],
)


def set_budget(namespace: str, policy: str, status: BudgetPolicyStatus) -> None:
    """Set the gauges of one policy from its status."""
    for usage in status.resources or []:
        ratio = usage.consumed / usage.limit if usage.limit else 0.0
        USED_RATIO.labels(namespace, policy, usage.name).set(ratio)
    SESSIONS_DENIED.labels(namespace, policy).set(status.sessions_denied or 0)
    DENIED_CALLS.labels(namespace, policy).set(status.denied_calls or 0)


def forget_budget(namespace: str, policy: str) -> None:
    """Remove the series of a policy whose status loop ended."""
    for resource in RESOURCES:
        with contextlib.suppress(KeyError):
            USED_RATIO.remove(namespace, policy, resource)
    for gauge in (SESSIONS_DENIED, DENIED_CALLS):
        with contextlib.suppress(KeyError):
            gauge.remove(namespace, policy)
