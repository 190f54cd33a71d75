"""Names of the span attributes and events Berth's programs write (docs/observability.md).

The operator, the session runtime and ``berth-worker`` write them; a trace backend's queries and
Berth's tests read them. Attributes outside these follow OpenTelemetry's semantic conventions
(``gen_ai.*`` for model calls and tool calls, ``k8s.*`` for nodes).
"""

from __future__ import annotations

from typing import Final

SESSION: Final = "berth.session"
"""``<namespace>/<name>`` of the AgentSession."""
SESSION_UID: Final = "berth.session.uid"
EPOCH: Final = "berth.epoch"
"""Placement epoch (int)."""
RUN_ID: Final = "berth.run.id"
RESUMED_FROM: Final = "berth.run.resumed_from"
RUN_STATUS: Final = "berth.run.status"
"""How the run ended: ``completed``, ``failed``, ``cancelled``, ``passivated``."""
TURN: Final = "berth.turn"
"""Tool rounds completed before this turn, plus one (int)."""
LANE: Final = "berth.lane"
TASK_ID: Final = "berth.task.id"
NODE: Final = "k8s.node.name"
REASON: Final = "berth.reason"
DECISION: Final = "berth.decision"
"""The operator's decision: ``place``, ``passivate``, ``resume``."""
WORKER: Final = "berth.worker"
"""The LaneWorker pod that ran a tool call."""
LANEWORKER: Final = "berth.laneworker"

TENANT: Final = "berth.tenant"
PRINCIPAL: Final = "berth.principal"
TEMPLATE: Final = "berth.agent_template"
CORRELATION_ID: Final = "berth.correlation_id"
IDENTITY: Final = {
    "tenant_id": TENANT,
    "principal": PRINCIPAL,
    "agent_template_id": TEMPLATE,
    "correlation_id": CORRELATION_ID,
}
"""The identity labels (``spec.identity``, snake_case) -> their attribute names."""

BUDGET_EVENT: Final = "berth.budget.decision"
"""Span event of a budget guard's answer; attributes :data:`BUDGET_CHECK` (``llm``/``tool``),
:data:`BUDGET_KIND` (``allow``/``soft``/``deny``), :data:`BUDGET_RESOURCE`, :data:`REASON`."""
BUDGET_CHECK: Final = "berth.budget.check"
BUDGET_KIND: Final = "berth.budget.kind"
BUDGET_RESOURCE: Final = "berth.budget.resource"


def identity_attributes(labels: dict[str, str | None]) -> dict[str, str]:
    """The set identity labels of ``labels`` (keys of :data:`IDENTITY`) as span attributes."""
    return {IDENTITY[k]: v for k, v in labels.items() if v and k in IDENTITY}
