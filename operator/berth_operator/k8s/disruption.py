"""API calls of passivation before eviction (ARCHITECTURE.md §8): session PodDisruptionBudgets.

``DisruptionClient`` shares the operator's ``ApiClient`` (one connection pool); errors are
translated by :mod:`.calls`.
Called by ``handlers.agentsession`` before a pod create. Pod deletes with a grace period go through
``KubeClient.delete_pod(grace_seconds=...)``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from kubernetes import client

from berth_operator.errors import AlreadyExists, NotFound
from berth_operator.k8s import calls
from berth_operator.k8s.client import KubeClient

T = TypeVar("T")


class DisruptionClient:
    """PodDisruptionBudget calls (policy/v1). All methods are coroutines."""

    def __init__(self, api_client: Any) -> None:
        self.policy = client.PolicyV1Api(api_client)

    @classmethod
    def from_kube(cls, kube: KubeClient) -> DisruptionClient:
        """Share ``kube``'s ApiClient."""
        return cls(kube.api_client)

    async def _call(self, what: str, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        return await calls.call(what, fn, *args, **kwargs)

    async def ensure_pdb(self, body: dict[str, Any]) -> bool:
        """Create the PDB unless it exists (its spec never changes). True when created.

        Raises KubeError (e.g. 403 when RBAC lacks poddisruptionbudgets create)."""
        meta = body["metadata"]
        try:
            await self._call(
                f"create poddisruptionbudget {meta['namespace']}/{meta['name']}",
                self.policy.create_namespaced_pod_disruption_budget,
                meta["namespace"],
                body,
            )
        except AlreadyExists:
            return False
        return True

    async def delete_pdb(self, namespace: str, name: str) -> bool:
        """Delete the PDB ``namespace/name`` (a session at rest has no pod to protect). True when
        it was deleted, False when it did not exist. Raises KubeError for other failures."""
        try:
            await self._call(
                f"delete poddisruptionbudget {namespace}/{name}",
                self.policy.delete_namespaced_pod_disruption_budget,
                name,
                namespace,
            )
        except NotFound:
            return False
        return True
