"""The PodDisruptionBudget of a session (docs/architecture.md §8). Pure; called by the session
handler before each pod create (``handlers.session_placement``) through
``k8s.disruption.ensure_pdb``.

One PDB per session, named like the session, owned by the AgentSession (garbage-collected with it),
selecting exactly that session's pod by ``berth.dev/session-uid`` (a session never has two pods
alive: the operator waits for the old pod to end before it creates the next; an ended pod whose
object lingers is terminal, so it counts for nothing here).

Why ``minAvailable: 1`` and not ``maxUnavailable: 0``: both allow zero disruptions for a single
pod, but the disruption controller can only compute ``maxUnavailable`` (and percentages) from a
controller with a ``/scale`` subresource; an AgentSession has none, so such a PDB would fail to
sync.
With an integer ``minAvailable`` the expected count is simply the number of matching pods
(Kubernetes docs, "Specifying a Disruption Budget": arbitrary controllers). With one healthy pod,
``disruptionsAllowed`` is 0 and ``POST .../pods/<pod>/eviction`` answers 429 "Cannot evict pod as it
would violate the pod's disruption budget": ``kubectl drain`` keeps retrying (every 5 s) until the
operator has passivated the session and deleted the pod itself (DELETE is not subject to PDBs).
The default ``unhealthyPodEvictionPolicy`` (IfHealthyBudget) also protects a pod that is running
but not Ready (e.g. while passivating); terminal pods are always evictable.
"""

from __future__ import annotations

from typing import Any

from berth_operator.api.agentsession import AgentSessionSpec
from berth_operator.api.common import SessionRef
from berth_operator.api.constants import LABEL_SESSION_UID
from berth_operator.builders.names import owner_reference, session_labels


def pdb_name(session: str) -> str:
    """Name of the session's PodDisruptionBudget: the session's own name."""
    return session


def build_session_pdb(ref: SessionRef, spec: AgentSessionSpec) -> dict[str, Any]:
    """``policy/v1`` PodDisruptionBudget ``<session>``: minAvailable 1 over the session's pod."""
    return {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": {
            "name": pdb_name(ref.name),
            "namespace": ref.namespace,
            "labels": session_labels(ref, spec),
            "ownerReferences": [owner_reference(ref)],
        },
        "spec": {
            "minAvailable": 1,
            "selector": {"matchLabels": {LABEL_SESSION_UID: ref.uid}},
        },
    }
