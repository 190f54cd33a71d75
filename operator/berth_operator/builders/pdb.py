"""The PodDisruptionBudget of a namespace's session pods (docs/architecture.md §8). Pure; written
once per namespace and operator process by ``handlers.session_placement`` through
``k8s.disruption.DisruptionClient.ensure_namespace``, beside the namespace's claim and
NetworkPolicies: no write per session.

One PDB, ``berth-sessions``, selects every session pod of the namespace (component ``session``,
managed by the operator, with a ``berth.dev/session-uid``: warm pods not yet adopted and
LaneWorker pods are not selected). ``POST .../pods/<pod>/eviction`` of a selected pod answers
429 "Cannot evict pod as it would violate the pod's disruption budget" while it runs, so
``kubectl drain`` keeps retrying (every 5 s) until the operator has passivated the session and
deleted the pod itself (DELETE is not subject to PDBs). That holds with the operator and its
webhook down too: the budget is the apiserver's own check.

Why ``minAvailable`` = the largest int32, and not ``maxUnavailable: 0`` or ``minAvailable:
100%``: the disruption controller computes ``maxUnavailable`` and percentages only from a
controller with a ``/scale`` subresource, which an AgentSession lacks, so such a PDB would fail
to sync. With an integer ``minAvailable`` the expected count is simply the number of selected
pods (Kubernetes docs, "Specifying a Disruption Budget": arbitrary controllers), and a value no
namespace reaches makes ``disruptionsAllowed`` 0 for any number of session pods. The default
``unhealthyPodEvictionPolicy`` (IfHealthyBudget) then protects a pod that runs but is not Ready
(e.g. while passivating) as well; terminal pods are always evictable.
"""

from __future__ import annotations

from typing import Any, Final

from berth_operator.api.constants import (
    COMPONENT_SESSION,
    LABEL_COMPONENT,
    LABEL_MANAGED_BY,
    LABEL_NAME,
    LABEL_SESSION_UID,
    MANAGED_BY,
)

NAMESPACE_PDB_NAME: Final = "berth-sessions"
"""Name of the namespace's session PodDisruptionBudget."""
ALL_SELECTED_PODS: Final = 2**31 - 1
"""``minAvailable`` that no namespace reaches: every selected pod must stay (int32 maximum)."""
LEGACY_SESSION_PDBS: Final = (
    f"{LABEL_COMPONENT}={COMPONENT_SESSION},{LABEL_MANAGED_BY}={MANAGED_BY}"
)
"""Label selector of the per-session PDBs earlier versions made (one per session, named like
it); two PDBs over one pod make every eviction of it fail, so they are removed."""


def build_namespace_pdb(namespace: str, owner: dict[str, Any] | None) -> dict[str, Any]:
    """``policy/v1`` PodDisruptionBudget ``berth-sessions`` in ``namespace`` over its session
    pods (module docstring). ``owner``: an owner reference (the release's ClusterRole, so an
    uninstall removes it) or None."""
    meta: dict[str, Any] = {
        "name": NAMESPACE_PDB_NAME,
        "namespace": namespace,
        "labels": {
            LABEL_NAME: "berth",
            LABEL_COMPONENT: "session-disruption-budget",
            LABEL_MANAGED_BY: MANAGED_BY,
        },
    }
    if owner is not None:
        meta["ownerReferences"] = [owner]
    return {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": meta,
        "spec": {
            "minAvailable": ALL_SELECTED_PODS,
            "selector": {
                "matchLabels": {LABEL_COMPONENT: COMPONENT_SESSION, LABEL_MANAGED_BY: MANAGED_BY},
                "matchExpressions": [{"key": LABEL_SESSION_UID, "operator": "Exists"}],
            },
        },
    }
