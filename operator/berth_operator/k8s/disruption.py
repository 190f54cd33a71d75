"""API calls of passivation before eviction (docs/architecture.md §8): session PodDisruptionBudgets.

``DisruptionClient`` shares the operator's session (one connection pool); errors are
:mod:`berth_operator.errors` (:mod:`.calls`).
Called by ``handlers.session_placement`` before a pod create. Pod deletes with a grace period go
through ``KubeClient.delete_pod(grace_seconds=...)``.
"""

from __future__ import annotations

from typing import Any

from berth_operator.errors import AlreadyExists, NotFound
from berth_operator.k8s import rest
from berth_operator.k8s.client import KubeClient
from berth_operator.k8s.connection import ApiSession


class DisruptionClient:
    """PodDisruptionBudget calls (policy/v1). All methods are coroutines."""

    def __init__(self, session: ApiSession) -> None:
        self.rest = rest.AsyncRest(session)

    @classmethod
    def from_kube(cls, kube: KubeClient) -> DisruptionClient:
        """Share ``kube``'s session."""
        return cls(kube.session)

    async def ensure_pdb(self, body: dict[str, Any]) -> bool:
        """Create the PDB unless it exists (its spec never changes). True when created.

        Raises KubeError (e.g. 403 when RBAC lacks poddisruptionbudgets create)."""
        meta = body["metadata"]
        try:
            await self.rest.create(
                f"create poddisruptionbudget {meta['namespace']}/{meta['name']}",
                _pdbs(meta["namespace"]),
                body,
            )
        except AlreadyExists:
            return False
        return True

    async def delete_pdb(self, namespace: str, name: str) -> bool:
        """Delete the PDB ``namespace/name`` (a session at rest has no pod to protect). True when
        it was deleted, False when it did not exist. Raises KubeError for other failures."""
        try:
            await self.rest.delete(
                f"delete poddisruptionbudget {namespace}/{name}", _pdbs(namespace, name)
            )
        except NotFound:
            return False
        return True


def _pdbs(namespace: str, name: str = "") -> str:
    return rest.group("policy", "v1", namespace, "poddisruptionbudgets", name)
