"""BudgetPolicy (v1alpha1): a tenant's LLM budget shared by all its sessions.

The policy selects the AgentSessions of its namespace whose ``spec.identity.tenantId`` matches
(and, when given, ``principal`` / ``agentTemplateId``) and limits what their LLM calls may use per
period. Sessions consult the operator's budget service before and after every call (the A3S
budget-guard seam, ``session_runtime.budget``): deny fails the run with ``Budget exhausted on
'<resource>': <reason>`` and keeps the session open; soft emits ``budget_threshold_hit``.

:func:`to_policy` turns a custom resource into the service's pure :class:`Policy`.
"""

from __future__ import annotations

from datetime import datetime
from decimal import Decimal
from typing import Annotated, Any, Literal

from pydantic import Field, JsonValue

from berth_operator.api.common import LABEL_VALUE, Condition, Int64, K8sModel
from berth_operator.budget.policy import Policy, Price

USD_DECIMAL = r"^[0-9]{1,6}(\.[0-9]{1,6})?$"


class BudgetSelector(K8sModel):
    """Which sessions count against the policy (their ``spec.identity``)."""

    tenant_id: Annotated[str, Field(min_length=1, max_length=63, pattern=LABEL_VALUE)]
    """Sessions whose identity.tenantId equals this."""
    principal: Annotated[str, Field(min_length=1, max_length=63, pattern=LABEL_VALUE)] | None = None
    """Only sessions of this identity.principal (any when unset)."""
    agent_template_id: (
        Annotated[str, Field(min_length=1, max_length=63, pattern=LABEL_VALUE)] | None
    ) = None
    """Only sessions of this identity.agentTemplateId (any when unset)."""


class BudgetLimits(K8sModel):
    """Limits per period; at least one. Tokens as the provider reports them."""

    total_tokens: Annotated[Int64, Field(ge=1)] | None = None
    """Prompt plus completion tokens."""
    prompt_tokens: Annotated[Int64, Field(ge=1)] | None = None
    """Prompt (input) tokens."""
    completion_tokens: Annotated[Int64, Field(ge=1)] | None = None
    """Completion (output) tokens."""
    cost_micro_usd: Annotated[Int64, Field(ge=1)] | None = Field(default=None, alias="costMicroUSD")
    """Cost in millionths of a US dollar, from spec.prices."""


class ModelPrice(K8sModel):
    """Price of one model in US dollars per million tokens (decimal strings, e.g. "2.50")."""

    model: Annotated[str, Field(min_length=1, max_length=253)]
    """``provider/model`` as in AgentSession spec.model, or ``*`` for every other model."""
    prompt_usd_per_million_tokens: Annotated[
        str, Field(pattern=USD_DECIMAL, alias="promptUSDPerMillionTokens")
    ] = "0"
    """USD per million prompt tokens."""
    completion_usd_per_million_tokens: Annotated[
        str, Field(pattern=USD_DECIMAL, alias="completionUSDPerMillionTokens")
    ] = "0"
    """USD per million completion tokens."""


SPEC_VALIDATIONS: list[JsonValue] = [
    {
        "rule": "self.period != 'Window' || has(self.windowSeconds)",
        "message": "windowSeconds is required when period is Window",
    },
    {
        "rule": "self.period == 'Window' || !has(self.windowSeconds)",
        "message": "windowSeconds is only valid when period is Window",
    },
    {
        "rule": "!has(self.limits.costMicroUSD) || has(self.prices)",
        "message": "limits.costMicroUSD needs prices",
    },
]


class BudgetPolicySpec(K8sModel):
    """Desired budget."""

    model_config = K8sModel.model_config | {
        "json_schema_extra": {"x-kubernetes-validations": SPEC_VALIDATIONS}
    }

    selector: BudgetSelector
    """Which sessions of the namespace the policy covers."""
    limits: Annotated[
        BudgetLimits,
        Field(
            json_schema_extra={
                "x-kubernetes-validations": [
                    {
                        "rule": "has(self.totalTokens) || has(self.promptTokens) || "
                        "has(self.completionTokens) || has(self.costMicroUSD)",
                        "message": "limits needs at least one of totalTokens, promptTokens, "
                        "completionTokens, costMicroUSD",
                    }
                ]
            }
        ),
    ]
    """What the covered sessions may use together per period."""
    period: Literal["Day", "Month", "Window"] = "Day"
    """Day and Month: UTC calendar periods. Window: a tumbling window of windowSeconds
    (aligned to the Unix epoch). Counters start from zero in each new period."""
    window_seconds: Annotated[int, Field(ge=60, le=31_622_400)] | None = None
    """Length of the window when period is Window (required then)."""
    soft_limit_percent: Annotated[int, Field(ge=1, le=100)] | None = 80
    """Percent of a limit at which sessions get a soft budget_threshold_hit (once per session,
    resource and period) and the policy a SoftLimitReached condition."""
    failure_policy: Literal["Closed", "Open"] = "Closed"
    """What a session does when the budget service cannot be reached: Closed denies the call,
    Open lets it through uncounted."""
    prices: Annotated[
        list[ModelPrice] | None,
        Field(
            max_length=256,
            json_schema_extra={
                "x-kubernetes-list-type": "map",
                "x-kubernetes-list-map-keys": ["model"],
            },
        ),
    ] = None
    """Per-model prices for limits.costMicroUSD."""


class ResourceUsage(K8sModel):
    """Use of one resource in the current period."""

    name: Annotated[str, Field(max_length=63)]
    """totalTokens, promptTokens, completionTokens or costMicroUSD."""
    consumed: Int64 = 0
    """Settled use in the current period."""
    reserved: Int64 = 0
    """Held by calls in flight."""
    limit: Int64 = 0
    """The limit."""
    percent: int = 0
    """consumed as a whole percentage of limit."""


class BudgetPolicyStatus(K8sModel):
    """Observed state, written by the operator."""

    window: str | None = None
    """Id of the current period window (d20261125, m202611, w3600-<n>)."""
    last_reset: datetime | None = None
    """When the current period began (its counters started from zero)."""
    resets_at: datetime | None = None
    """When the current period ends."""
    resources: Annotated[
        list[ResourceUsage] | None,
        Field(
            json_schema_extra={
                "x-kubernetes-list-type": "map",
                "x-kubernetes-list-map-keys": ["name"],
            }
        ),
    ] = None
    """Consumed / limit per limited resource."""
    used_percent: int | None = None
    """The highest percent over resources (for kubectl get)."""
    denied_calls: Int64 | None = None
    """LLM calls denied in the current period."""
    sessions_denied: Int64 | None = None
    """Distinct sessions denied in the current period."""
    conditions: Annotated[
        list[Condition] | None,
        Field(
            json_schema_extra={
                "x-kubernetes-list-type": "map",
                "x-kubernetes-list-map-keys": ["type"],
            }
        ),
    ] = None
    """Ready (policy accepted), SoftLimitReached, Exhausted."""
    observed_generation: Int64 | None = None
    """metadata.generation last acted on."""


_RESOURCE_FIELDS = {
    "totalTokens": "total_tokens",
    "promptTokens": "prompt_tokens",
    "completionTokens": "completion_tokens",
    "costMicroUSD": "cost_micro_usd",
}


def to_policy(namespace: str, name: str, spec: BudgetPolicySpec) -> Policy:
    """The service's view of a BudgetPolicy (pure)."""
    limits = {
        res: int(value)
        for res, attr in _RESOURCE_FIELDS.items()
        if (value := getattr(spec.limits, attr)) is not None
    }
    prices = {
        p.model: Price(
            float(Decimal(p.prompt_usd_per_million_tokens)),
            float(Decimal(p.completion_usd_per_million_tokens)),
        )
        for p in spec.prices or []
    }
    return Policy(
        namespace=namespace,
        name=name,
        tenant_id=spec.selector.tenant_id,
        principal=spec.selector.principal,
        agent_template_id=spec.selector.agent_template_id,
        limits=limits,
        period=spec.period,
        window_seconds=spec.window_seconds or 86400,
        soft_limit_percent=None
        if spec.soft_limit_percent is None
        else float(spec.soft_limit_percent),
        failure_policy=spec.failure_policy,
        prices=prices,
    )


def parse_spec(raw: dict[str, Any]) -> BudgetPolicySpec:
    """Validate a custom resource's spec. Raises pydantic.ValidationError."""
    return BudgetPolicySpec.model_validate(raw)
