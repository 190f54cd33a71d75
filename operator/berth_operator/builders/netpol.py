"""The NetworkPolicies of a namespace that runs sessions or LaneWorkers (docs/security.md,
"Network"; docs/architecture.md §11).

Owned by ``berth_operator.builders``. NetworkPolicies are namespaced, so, like the shared claim
(:mod:`.claim`), every namespace where the operator places session or worker pods needs its own.
Their specs come from the operator's settings (``BERTH_NETWORK_POLICY_TEMPLATES``, which the chart
renders from its ``networkPolicy`` values: one definition for the release namespace and for the
namespaces the operator provisions). Each policy the operator creates is labelled
``app.kubernetes.io/managed-by: berth-operator`` and, when
``BERTH_NETWORK_POLICY_OWNER_CLUSTER_ROLE`` names the release's ClusterRole, owned by it:
deleting the release deletes the ClusterRole and Kubernetes' garbage collector then deletes the
policies (a namespaced dependent may have a cluster-scoped owner). Pure.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from berth_operator.api.constants import LABEL_COMPONENT, LABEL_MANAGED_BY, LABEL_NAME, MANAGED_BY
from berth_operator.settings import NetworkPolicyTemplate

NAME_LABEL: Final = "berth"
"""``app.kubernetes.io/name`` of the policies (as of the pods they select)."""


def cluster_role_owner(role: Mapping[str, Any]) -> dict[str, Any]:
    """The ``ownerReferences`` entry naming the ClusterRole ``role`` (as read from the API:
    ``metadata.name`` and ``metadata.uid``). Not a controller reference, and it blocks nothing:
    the policies go when the ClusterRole goes. Raises KeyError when ``role`` has no name or uid."""
    meta = role["metadata"]
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRole",
        "name": meta["name"],
        "uid": meta["uid"],
    }


def build_network_policy(
    namespace: str, template: NetworkPolicyTemplate, owner: Mapping[str, Any] | None
) -> dict[str, Any]:
    """The ``networking.k8s.io/v1`` NetworkPolicy ``template.name`` in ``namespace``: the
    template's spec, Berth's labels, and ``owner`` (from :func:`cluster_role_owner`) when given."""
    meta: dict[str, Any] = {
        "name": template.name,
        "namespace": namespace,
        "labels": {
            LABEL_NAME: NAME_LABEL,
            LABEL_COMPONENT: template.component,
            LABEL_MANAGED_BY: MANAGED_BY,
        },
    }
    if owner is not None:
        meta["ownerReferences"] = [dict(owner)]
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": meta,
        "spec": template.spec,
    }


def needs_update(current: Mapping[str, Any], wanted: Mapping[str, Any]) -> bool:
    """Whether the existing policy ``current`` should be replaced by ``wanted``: only a policy
    the operator created (its managed-by label; one made by Helm or a user is left alone) whose
    spec or owner differs."""
    meta = current.get("metadata") or {}
    if (meta.get("labels") or {}).get(LABEL_MANAGED_BY) != MANAGED_BY:
        return False
    owners = meta.get("ownerReferences") or []
    wanted_owners = wanted["metadata"].get("ownerReferences") or []
    return bool(current.get("spec") != wanted["spec"] or owners != wanted_owners)
