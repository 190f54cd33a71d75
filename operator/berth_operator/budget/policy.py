"""BudgetPolicy decisions, pure: selection, period windows, amounts, cost, soft and hard limits.

A policy selects sessions by identity (``tenantId``, and optionally ``principal`` and
``agentTemplateId``); every selected session's LLM calls count against each of the policy's
limits. Resources (units in the names): ``totalTokens``, ``promptTokens``, ``completionTokens``
(tokens as the provider reports them) and ``costMicroUSD`` (millionths of a US dollar, from the
policy's per-model price table in USD per million tokens).

Periods: ``Day`` and ``Month`` are UTC calendar periods; ``Window`` is a tumbling window of
``windowSeconds`` aligned to the Unix epoch. A window's counters live under its id, so a new
period starts from zero without anyone resetting it.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Final, Literal

Period = Literal["Day", "Month", "Window"]
FailurePolicy = Literal["Closed", "Open"]

RESOURCES: Final = ("totalTokens", "promptTokens", "completionTokens", "costMicroUSD")
"""Every resource a policy can limit, in the order decisions check them."""


@dataclass(frozen=True, slots=True)
class Identity:
    """Who a session runs for (``spec.identity`` of the AgentSession, as the cluster has it)."""

    namespace: str
    session: str
    tenant_id: str = ""
    principal: str = ""
    agent_template_id: str = ""
    model: str = ""


@dataclass(frozen=True, slots=True)
class Price:
    """USD per million tokens for one model (``provider/model``, or ``*`` for any other)."""

    prompt: float = 0.0
    completion: float = 0.0


@dataclass(frozen=True, slots=True)
class Policy:
    """One BudgetPolicy as the service applies it (built from the custom resource's spec)."""

    namespace: str
    name: str
    tenant_id: str
    limits: Mapping[str, int]
    principal: str | None = None
    agent_template_id: str | None = None
    period: Period = "Day"
    window_seconds: int = 86400
    soft_limit_percent: float | None = 80.0
    failure_policy: FailurePolicy = "Closed"
    prices: Mapping[str, Price] = field(default_factory=dict)

    def selects(self, who: Identity) -> bool:
        """Whether the session ``who`` counts against this policy (same namespace, tenant, and
        principal / agent template when the policy names them)."""
        return (
            who.namespace == self.namespace
            and who.tenant_id == self.tenant_id
            and (self.principal is None or who.principal == self.principal)
            and (self.agent_template_id is None or who.agent_template_id == self.agent_template_id)
        )

    def window(self, now: float) -> str:
        """The id of the period window holding Unix time ``now`` (seconds): ``d20261125``,
        ``m202611`` or ``w<seconds>-<index>``."""
        if self.period == "Window":
            return f"w{self.window_seconds}-{int(now // self.window_seconds)}"
        at = datetime.fromtimestamp(now, UTC)
        return at.strftime("d%Y%m%d") if self.period == "Day" else at.strftime("m%Y%m")

    def window_start(self, now: float) -> float:
        """Unix time (seconds) at which the window holding ``now`` began."""
        if self.period == "Window":
            return (now // self.window_seconds) * self.window_seconds
        at = datetime.fromtimestamp(now, UTC).replace(hour=0, minute=0, second=0, microsecond=0)
        return (at if self.period == "Day" else at.replace(day=1)).timestamp()

    def window_end(self, now: float) -> float:
        """Unix time (seconds) at which the window holding ``now`` ends."""
        if self.period == "Window":
            return (now // self.window_seconds + 1) * self.window_seconds
        at = datetime.fromtimestamp(now, UTC)
        if self.period == "Day":
            start = at.replace(hour=0, minute=0, second=0, microsecond=0)
            return start.timestamp() + 86400
        year, month = (at.year + 1, 1) if at.month == 12 else (at.year, at.month + 1)
        return datetime(year, month, 1, tzinfo=UTC).timestamp()

    def price(self, model: str) -> Price:
        """The price of ``model`` (exact entry, else ``*``, else free)."""
        return self.prices.get(model) or self.prices.get("*") or Price()

    def soft_at(self, resource: str) -> int | None:
        """The consumed amount at which ``resource`` turns soft, or None (no soft threshold)."""
        limit = self.limits.get(resource)
        if limit is None or self.soft_limit_percent is None:
            return None
        return math.ceil(limit * self.soft_limit_percent / 100)


def cost_micro_usd(price: Price, prompt_tokens: int, completion_tokens: int) -> int:
    """Cost of a call in micro-USD, rounded up: tokens times USD per million tokens."""
    return math.ceil(prompt_tokens * price.prompt + completion_tokens * price.completion)


def reserve_amounts(policy: Policy, model: str, estimated_tokens: int) -> dict[str, int]:
    """What ``check_before_llm`` reserves per limited resource: the request estimate counts as
    prompt (and total) tokens; completion tokens are unknown before the call, so they are not
    reserved (the call may overshoot by its completion, at most one call per session)."""
    est = max(0, int(estimated_tokens))
    amounts = {
        "totalTokens": est,
        "promptTokens": est,
        "completionTokens": 0,
        "costMicroUSD": cost_micro_usd(policy.price(model), est, 0),
    }
    return {r: amounts[r] for r in RESOURCES if r in policy.limits}


def usage_amounts(policy: Policy, model: str, usage: Mapping[str, int]) -> dict[str, int]:
    """What ``record_after_llm`` settles per limited resource, from the provider's usage
    (``prompt_tokens``, ``completion_tokens``, ``total_tokens``; missing counts are 0)."""
    prompt = max(0, int(usage.get("prompt_tokens", 0)))
    completion = max(0, int(usage.get("completion_tokens", 0)))
    total = max(0, int(usage.get("total_tokens", prompt + completion)))
    amounts = {
        "totalTokens": total,
        "promptTokens": prompt,
        "completionTokens": completion,
        "costMicroUSD": cost_micro_usd(policy.price(model), prompt, completion),
    }
    return {r: amounts[r] for r in RESOURCES if r in policy.limits}


@dataclass(frozen=True, slots=True)
class WindowState:
    """Counters of one window: settled ``used`` and in-flight ``reserved`` per resource, calls
    ``denied`` and the number of distinct ``sessions_denied``."""

    used: dict[str, int]
    reserved: dict[str, int]
    denied: int
    sessions_denied: int
