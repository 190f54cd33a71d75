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

from kubernetes import client

from berth_operator.api.constants import GROUP, VERSION
from berth_operator.api.sessionwarmpool import WARMPOOL_PLURAL
from berth_operator.errors import NotFound
from berth_operator.k8s import calls

MERGE_PATCH = "application/merge-patch+json"


def _decode(response: Any) -> dict[str, Any]:
    return calls.decode_object("SessionWarmPool API call", response.data)


@dataclass(frozen=True)
class WarmPoolApi:
    """API calls of the warm-pool handlers, each running the client in a worker thread."""

    api: client.ApiClient

    async def get_pool(self, namespace: str, name: str) -> dict[str, Any] | None:
        """The SessionWarmPool as a dict, or None when it does not exist."""
        objects = client.CustomObjectsApi(self.api)
        try:
            return await calls.call(
                f"get sessionwarmpool {namespace}/{name}",
                lambda: _decode(
                    objects.get_namespaced_custom_object(
                        GROUP, VERSION, namespace, WARMPOOL_PLURAL, name, _preload_content=False
                    )
                ),
            )
        except NotFound:
            return None

    async def patch_status(self, namespace: str, name: str, status: dict[str, Any]) -> None:
        """Merge ``status`` into the pool's status subresource. Raises NotFound, KubeError."""
        objects = client.CustomObjectsApi(self.api)
        await calls.call(
            f"patch sessionwarmpool status {namespace}/{name}",
            lambda: objects.patch_namespaced_custom_object_status(
                GROUP,
                VERSION,
                namespace,
                WARMPOOL_PLURAL,
                name,
                {"status": status},
                field_manager="berth-operator",
                _content_type=MERGE_PATCH,
                _preload_content=False,
            ),
        )

    async def adopt_pod(self, namespace: str, name: str, patch: dict[str, Any]) -> dict[str, Any]:
        """Apply the adoption merge ``patch`` (it carries the pod's uid) to pod ``name``; return
        the patched pod. Raises Conflict (another pod of that name), NotFound, KubeError."""
        core = client.CoreV1Api(self.api)
        return await calls.call(
            f"adopt pod {namespace}/{name}",
            lambda: _decode(
                core.patch_namespaced_pod(
                    name,
                    namespace,
                    patch,
                    field_manager="berth-operator",
                    _content_type=MERGE_PATCH,
                    _preload_content=False,
                )
            ),
        )
