"""API calls of passivation before eviction (ARCHITECTURE.md §8): session PodDisruptionBudgets.

``DisruptionClient`` shares the operator's ``ApiClient`` (one connection pool) and translates
``ApiException`` like ``k8s.client`` (404 NotFound, 409 AlreadyExists/Conflict, else KubeError).
Called by ``handlers.agentsession`` before a pod create. Pod deletes with a grace period go through
``KubeClient.delete_pod(grace_seconds=...)``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any, TypeVar

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from berth_operator.errors import AlreadyExists
from berth_operator.k8s.client import KubeClient, _translate

T = TypeVar("T")


class DisruptionClient:
    """PodDisruptionBudget calls (policy/v1). All methods are coroutines."""

    def __init__(self, api_client: Any) -> None:
        self.policy = client.PolicyV1Api(api_client)

    @classmethod
    def from_kube(cls, kube: KubeClient) -> DisruptionClient:
        """Share ``kube``'s ApiClient."""
        return cls(kube._api)

    async def _call(self, what: str, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        try:
            return await asyncio.to_thread(fn, *args, **kwargs)
        except ApiException as exc:
            raise _translate(exc, what) from exc

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
