"""API calls of passivation before eviction (docs/architecture.md §8): the namespace's session
PodDisruptionBudget (:mod:`berth_operator.builders.pdb`).

``DisruptionClient`` shares the operator's session (one connection pool); errors are
:mod:`berth_operator.errors` (:mod:`.calls`). Called by ``handlers.session_placement`` before the
first pod this process places in a namespace; later calls return at once without a request. Pod
deletes with a grace period go through ``KubeClient.delete_pod(grace_seconds=...)``.
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

from berth_operator.builders.pdb import LEGACY_SESSION_PDBS, build_namespace_pdb
from berth_operator.errors import AlreadyExists, NotFound
from berth_operator.k8s import rest
from berth_operator.k8s.client import KubeClient
from berth_operator.k8s.connection import ApiSession


class DisruptionClient:
    """PodDisruptionBudget calls (policy/v1). All methods are coroutines."""

    def __init__(self, session: ApiSession) -> None:
        self.rest = rest.AsyncRest(session)
        self.done: set[str] = set()
        """Namespaces whose budget this process wrote (or found)."""
        self._locks: dict[str, asyncio.Lock] = {}

    @classmethod
    def from_kube(cls, kube: KubeClient) -> DisruptionClient:
        """Share ``kube``'s session."""
        return cls(kube.session)

    async def ensure_namespace(self, namespace: str, owner: dict[str, Any] | None) -> None:
        """Create ``namespace``'s session PDB unless it exists (its spec never changes), and
        delete the per-session PDBs of earlier versions there. Concurrent callers for one
        namespace wait for the first. Raises KubeError (e.g. 403 when RBAC lacks
        poddisruptionbudgets create); the namespace is then tried again next time."""
        if namespace in self.done:
            return
        async with self._locks.setdefault(namespace, asyncio.Lock()):
            if namespace in self.done:
                return
            body = build_namespace_pdb(namespace, owner)
            with contextlib.suppress(AlreadyExists):
                await self.rest.create(
                    f"create poddisruptionbudget {namespace}/{body['metadata']['name']}",
                    _pdbs(namespace),
                    body,
                )
            await self._delete_legacy(namespace)
            self.done.add(namespace)

    async def _delete_legacy(self, namespace: str) -> None:
        listed = await self.rest.get(
            f"list poddisruptionbudgets in {namespace}",
            _pdbs(namespace),
            labelSelector=LEGACY_SESSION_PDBS,
        )
        for item in listed.get("items") or []:
            name = item["metadata"]["name"]
            with contextlib.suppress(NotFound):
                await self.rest.delete(
                    f"delete poddisruptionbudget {namespace}/{name}", _pdbs(namespace, name)
                )


def _pdbs(namespace: str, name: str = "") -> str:
    return rest.group("policy", "v1", namespace, "poddisruptionbudgets", name)
