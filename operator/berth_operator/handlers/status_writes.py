"""How an AgentSession's status is written: whole, with its resourceVersion, only when it changed.

Owned by ``berth_operator.handlers``; called once per reconcile (and once more when a stale cache
made the handler decide again). Policy:

- **skip if equal**: the decision's status is compared, as wire JSON, with the status the decision
  started from; an unchanged status is never written (``result="unchanged"``). Condition
  ``lastTransitionTime`` moves only on a status change (``api.conditions.ConditionSet``), so a
  steady session causes no writes between real changes.
- **optimistic concurrency**: the PUT carries the object's ``resourceVersion``; a ``Conflict``
  (someone wrote first) is counted and re-raised, and the caller starts the iteration over from a
  fresh GET, as the Kubernetes API conventions prescribe for read-modify-write.

Every outcome is counted in ``berth_operator_status_writes_total{result}``.
"""

from __future__ import annotations

from typing import Any

from berth_operator.api.agentsession import AgentSessionStatus
from berth_operator.errors import Conflict
from berth_operator.k8s.client import KubeClient
from berth_operator.metrics import STATUS_WRITES


async def write_status(
    kube: KubeClient, body: dict[str, Any], before: AgentSessionStatus, after: AgentSessionStatus
) -> dict[str, Any]:
    """Write ``after`` as the status of ``body`` unless it equals ``before``; return the object
    as stored (``body`` itself when nothing was written). Raises ``Conflict`` on a lost race and
    ``KubeError`` for other API failures."""
    wire = after.wire()
    if wire == before.wire():
        STATUS_WRITES.labels(result="unchanged").inc()
        return body
    body["status"] = wire
    try:
        stored = await kube.replace_session_status(body)
    except Conflict:
        STATUS_WRITES.labels(result="conflict").inc()
        raise
    STATUS_WRITES.labels(result="written").inc()
    return stored
