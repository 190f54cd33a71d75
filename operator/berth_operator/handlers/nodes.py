"""kopf handlers that notice disrupted nodes (docs/architecture.md §8 "Triggers").

- ``node_disruptions``        index: node name → ``reconcile.passivation.Trigger`` for nodes that
                              are cordoned or carry a disruption taint (empty for healthy nodes).
                              A session's reconcile reads it (kopf passes indices by name) and
                              ``reconcile.session.decide`` requests passivation of a pod on such a
                              node with reason ``node_drain``. kopf fills indices before any
                              handler runs, so a cordon is seen again after an operator restart.
- ``node_states``             index: node name → ``reconcile.observe.ObservedNode`` of every node
                              (the watch cache a session's reconcile reads instead of a GET
                              per node and pass).
- ``session_pods_on_node``    index: node name → (namespace, pod, session uid) of session pods.
- ``session_pods_by_name``    index: (namespace, pod) → session uid (used by ``handlers.webhook``).
- ``node_event``              on any event of a disrupted node, queues the sessions
                              whose pods run there, so passivation starts at once rather than at
                              the next status refresh.

Nodes are cluster-scoped: this needs ``list``/``watch`` on nodes (config/rbac). Nothing is written
to nodes.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, cast

import kopf

from berth_operator.api.constants import COMPONENT_SESSION, LABEL_COMPONENT, LABEL_SESSION_UID
from berth_operator.handlers.context import OperatorContext
from berth_operator.reconcile.observe import ObservedNode, observe_node
from berth_operator.reconcile.passivation import Trigger, node_disruption

POD_LABELS = {LABEL_SESSION_UID: kopf.PRESENT, LABEL_COMPONENT: COMPONENT_SESSION}


@dataclass(frozen=True, slots=True)
class PodOnNode:
    """A session pod bound to a node."""

    namespace: str
    name: str
    session_uid: str


@kopf.index("nodes")
async def node_disruptions(name: str, body: kopf.Body, **_: Any) -> dict[str, Trigger]:
    """Index disrupted nodes by name (``{}`` for healthy nodes, which drops an earlier entry)."""
    trigger = node_disruption(observe_node(cast(dict[str, Any], body), name))
    return {name: trigger} if trigger is not None else {}


@kopf.index("nodes")
async def node_states(name: str, body: kopf.Body, **_: Any) -> dict[str, ObservedNode]:
    """Index every node by name with its observed state (ready, cordoned, taints)."""
    return {name: observe_node(cast(dict[str, Any], body), name)}


@kopf.index("pods", labels=POD_LABELS)  # type: ignore[arg-type]
async def session_pods_on_node(
    name: str, namespace: str | None, spec: kopf.Spec, labels: kopf.Labels, **_: Any
) -> dict[str, PodOnNode]:
    """Index session pods by the node they are bound to (unbound pods are not indexed)."""
    node = spec.get("nodeName")
    if not node:
        return {}
    return {str(node): PodOnNode(namespace or "", name, labels[LABEL_SESSION_UID])}


@kopf.index("pods", labels=POD_LABELS)  # type: ignore[arg-type]
async def session_pods_by_name(
    name: str, namespace: str | None, labels: kopf.Labels, **_: Any
) -> dict[tuple[str, str], str]:
    """Index session pods: (namespace, name) → AgentSession uid."""
    return {(namespace or "", name): labels[LABEL_SESSION_UID]}


@kopf.on.event("nodes")
async def node_event(name: str, memo: kopf.Memo, **kwargs: Any) -> None:
    """Wake the sessions with pods on ``name`` when the node is disrupted."""
    disruptions = cast("kopf.Index[str, Trigger]", kwargs["node_disruptions"])
    if name not in disruptions:
        return
    ctx: OperatorContext = memo.ctx
    pods = cast("kopf.Index[str, PodOnNode]", kwargs["session_pods_on_node"])
    for pod in pods.get(name, []):
        ctx.wake_session(pod.session_uid)
