"""BudgetPolicy status from the ledger's counters (pure).

Conditions (Kubernetes API conventions, metav1.Condition): ``Ready`` (the policy is enforced),
``SoftLimitReached`` (some resource at or past the soft threshold this period), ``Exhausted``
(some resource at its limit, or calls were denied this period). Each transition to True yields a
Warning Event (``BudgetSoftLimitReached`` / ``BudgetExhausted``); a new period clears both and
yields a Normal ``BudgetReset`` Event.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime

from berth_operator.api.budgetpolicy import BudgetPolicyStatus, ResourceUsage
from berth_operator.api.conditions import ConditionSet
from berth_operator.budget.policy import Policy, WindowState

READY = "Ready"
SOFT = "SoftLimitReached"
EXHAUSTED = "Exhausted"


@dataclass(frozen=True, slots=True)
class BudgetEvent:
    """An Event to post on the policy: ``type`` Normal or Warning, CamelCase ``reason``."""

    type: str
    reason: str
    message: str


def _percent(consumed: int, limit: int) -> int:
    return int(consumed * 100 // limit) if limit > 0 else 0


def _usage(policy: Policy, state: WindowState) -> tuple[list[ResourceUsage], list[str], list[str]]:
    """Per limited resource its usage in the window, and the resources past their soft
    threshold and past their limit, as ``"<name> <used>/<limit>"``."""
    resources: list[ResourceUsage] = []
    soft_hits: list[str] = []
    hard_hits: list[str] = []
    for name, limit in policy.limits.items():
        used = int(state.used.get(name, 0))
        resources.append(
            ResourceUsage(
                name=name,
                consumed=used,
                reserved=int(state.reserved.get(name, 0)),
                limit=int(limit),
                percent=_percent(used, int(limit)),
            )
        )
        soft_at = policy.soft_at(name)
        if used >= limit:
            hard_hits.append(f"{name} {used}/{limit}")
        elif soft_at is not None and used >= soft_at:
            soft_hits.append(f"{name} {used}/{limit}")
    return resources, soft_hits, hard_hits


def budget_status(
    policy: Policy,
    state: WindowState,
    before: BudgetPolicyStatus,
    *,
    now: float,
    generation: int | None,
) -> tuple[BudgetPolicyStatus, list[BudgetEvent]]:
    """The status for ``policy`` given its current window's ``state`` (Unix time ``now``), and
    the Events the change from ``before`` calls for."""
    at = datetime.fromtimestamp(now, UTC).replace(microsecond=0)
    window = policy.window(now)
    events: list[BudgetEvent] = []
    conds = ConditionSet(before.conditions, at, generation)
    new_window = before.window is not None and before.window != window
    if new_window:
        events.append(BudgetEvent("Normal", "BudgetReset", f"new period {window} started"))
    resources, soft_hits, hard_hits = _usage(policy, state)
    conds.set(READY, "True", "Enforced", f"selects tenantId {policy.tenant_id}")
    was_soft = not new_window and conds.is_true(SOFT)
    was_hard = not new_window and conds.is_true(EXHAUSTED)
    if soft_hits or hard_hits:
        message = "; ".join(soft_hits + hard_hits)
        conds.set(SOFT, "True", "ThresholdReached", message)
        if not was_soft:
            events.append(BudgetEvent("Warning", "BudgetSoftLimitReached", message))
    else:
        conds.set(SOFT, "False", "BelowThreshold")
    if hard_hits or state.denied > 0:
        message = "; ".join(hard_hits) or "calls denied this period"
        message += f"; {state.denied} calls of {state.sessions_denied} sessions denied"
        conds.set(EXHAUSTED, "True", "LimitReached", message)
        if not was_hard:
            events.append(BudgetEvent("Warning", "BudgetExhausted", message))
    else:
        conds.set(EXHAUSTED, "False", "WithinLimit")
    status = BudgetPolicyStatus(
        window=window,
        last_reset=datetime.fromtimestamp(policy.window_start(now), UTC),
        resets_at=datetime.fromtimestamp(policy.window_end(now), UTC),
        resources=resources,
        used_percent=max((r.percent for r in resources), default=0),
        denied_calls=state.denied,
        sessions_denied=state.sessions_denied,
        conditions=list(conds.items),
        observed_generation=generation,
    )
    return status, events
