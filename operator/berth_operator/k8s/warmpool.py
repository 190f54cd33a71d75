"""API calls of SessionWarmPools: the pool object and its status, and the adoption patch of a
warm pod. Pods are created, listed and deleted with :class:`berth_operator.k8s.client.KubeClient`;
the pool's Secret with :class:`berth_operator.k8s.secrets.SecretApi`.

- Adoption: one merge patch of the pod's metadata that carries ``metadata.uid`` as a
  precondition, so it never lands on another pod of the same name.
- Status: a merge patch on the ``status`` subresource (conditions replaced whole).

Errors are :mod:`berth_operator.errors` (NotFound, Conflict, KubeError).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from berth_operator.api.constants import GROUP, VERSION
from berth_operator.api.sessionwarmpool import WARMPOOL_PLURAL
from berth_operator.errors import NotFound
from berth_operator.k8s import rest
from berth_operator.k8s.connection import ApiSession

MANAGER = {"fieldManager": "berth-operator"}


@dataclass(frozen=True)
class WarmPoolApi:
    """API calls of the warm-pool handlers, each an ``async`` method. ``session`` is the
    operator's connection to the apiserver."""

    session: ApiSession

    @property
    def rest(self) -> rest.AsyncRest:
        """Requests over ``session`` (a light wrapper, built per call)."""
        return rest.AsyncRest(self.session)

    async def get_pool(self, namespace: str, name: str) -> dict[str, Any] | None:
        """The SessionWarmPool as a dict, or None when it does not exist."""
        try:
            return await self.rest.get(
                f"get sessionwarmpool {namespace}/{name}",
                rest.group(GROUP, VERSION, namespace, WARMPOOL_PLURAL, name),
            )
        except NotFound:
            return None

    async def patch_status(self, namespace: str, name: str, status: dict[str, Any]) -> None:
        """Merge ``status`` into the pool's status subresource. Raises NotFound, KubeError."""
        await self.rest.patch(
            f"patch sessionwarmpool status {namespace}/{name}",
            rest.group(GROUP, VERSION, namespace, WARMPOOL_PLURAL, name, "status"),
            {"status": status},
            **MANAGER,
        )

    async def adopt_pod(self, namespace: str, name: str, patch: dict[str, Any]) -> dict[str, Any]:
        """Apply the adoption merge ``patch`` (it carries the pod's uid) to pod ``name``; return
        the patched pod. Raises Conflict (another pod of that name), NotFound, KubeError."""
        return await self.rest.patch(
            f"adopt pod {namespace}/{name}", rest.core(namespace, "pods", name), patch, **MANAGER
        )
