"""API calls of the LaneWorker autoscaler: Deployments, ``/scale``, pods, status.

The only module of the LaneWorker code that talks to the API (CONVENTIONS: only
``berth_operator.k8s`` does). Called by ``berth_operator.handlers.laneworker``. Uses the
synchronous ``kubernetes`` client in a worker thread (``asyncio.to_thread``), so the kopf event
loop never blocks; answers are decoded as plain dicts (``_preload_content=False``), in the API's
own camelCase shape, which is what the pure builders and decisions read. The ApiClient is the
operator's (:func:`berth_operator.k8s.client.make_api_client`).

Writes, and why they are shaped so:

- Deployment create: a full object (builder output) with the first replica count.
- Template change: a JSON Patch ``replace`` of ``/spec/template`` plus the template-hash
  annotation, guarded by a ``test`` of the old hash, so a concurrent edit makes it fail with
  Conflict instead of being overwritten blindly. Replicas are never part of it.
- Replicas: a merge patch on the Deployment's ``scale`` subresource (``spec.replicas`` only).
- Pod deletion cost: a merge patch of one annotation per pod.
- LaneWorker status: a merge patch on the ``status`` subresource (lists such as ``conditions`` are
  replaced whole, as the conventions ask).

Errors: ``kubernetes.client.ApiException`` and connection errors are translated to
:mod:`berth_operator.errors` (NotFound on 404, AlreadyExists/Conflict on 409, KubeError else).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from kubernetes import client

from berth_operator.api.constants import GROUP, LANEWORKER_PLURAL, VERSION
from berth_operator.errors import NotFound
from berth_operator.k8s import calls

T = TypeVar("T")

MERGE_PATCH = "application/merge-patch+json"
JSON_PATCH = "application/json-patch+json"


def _decode(response: Any) -> dict[str, Any]:
    return calls.decode_object("LaneWorker API call", response.data)


@dataclass(frozen=True)
class LaneWorkerApi:
    """API calls of the autoscaler, each an ``async`` method running the client in a thread."""

    api: client.ApiClient

    async def _call(self, what: str, fn: Callable[[], T]) -> T:
        return await calls.call(what, fn)

    # -- Deployments ---------------------------------------------------------------------------

    async def get_deployment(self, namespace: str, name: str) -> dict[str, Any] | None:
        """The Deployment as a dict, or None when it does not exist."""
        apps = client.AppsV1Api(self.api)
        try:
            return await self._call(
                f"get deployment {namespace}/{name}",
                lambda: _decode(
                    apps.read_namespaced_deployment(name, namespace, _preload_content=False)
                ),
            )
        except NotFound:
            return None

    async def create_deployment(self, body: dict[str, Any]) -> dict[str, Any]:
        """Create the Deployment ``body``. Raises AlreadyExists or KubeError."""
        apps = client.AppsV1Api(self.api)
        meta = body["metadata"]
        create: Any = apps.create_namespaced_deployment  # typed for V1Deployment; a dict is fine
        return await self._call(
            f"create deployment {meta['namespace']}/{meta['name']}",
            lambda: _decode(
                create(
                    meta["namespace"], body, field_manager="berth-operator", _preload_content=False
                )
            ),
        )

    async def replace_template(
        self,
        namespace: str,
        name: str,
        template: dict[str, Any],
        *,
        hash_annotation: str,
        new_hash: str,
        old_hash: str | None,
        has_annotations: bool = True,
    ) -> None:
        """Replace ``spec.template`` and set annotation ``hash_annotation`` to ``new_hash``.

        When ``old_hash`` is given the patch first tests that the annotation still has it, so an
        edit made meanwhile fails the patch (KubeError) instead of being overwritten blindly.
        ``has_annotations`` False (the Deployment has no annotation map at all) creates the map;
        an existing map is never replaced (it holds the controller's revision annotation).
        """
        apps = client.AppsV1Api(self.api)
        path = "/metadata/annotations/" + hash_annotation.replace("~", "~0").replace("/", "~1")
        ops: list[dict[str, Any]] = []
        if old_hash is None and not has_annotations:
            ops.append({"op": "add", "path": "/metadata/annotations", "value": {}})
        if old_hash is None:
            ops.append({"op": "add", "path": path, "value": new_hash})
        else:
            ops.append({"op": "test", "path": path, "value": old_hash})
            ops.append({"op": "replace", "path": path, "value": new_hash})
        ops.append({"op": "replace", "path": "/spec/template", "value": template})
        await self._call(
            f"update deployment {namespace}/{name}",
            lambda: apps.patch_namespaced_deployment(
                name,
                namespace,
                ops,
                field_manager="berth-operator",
                _content_type=JSON_PATCH,
                _preload_content=False,
            ),
        )

    async def scale_deployment(self, namespace: str, name: str, replicas: int) -> None:
        """Set ``spec.replicas`` through the Deployment's ``scale`` subresource."""
        apps = client.AppsV1Api(self.api)
        await self._call(
            f"scale deployment {namespace}/{name} to {replicas}",
            lambda: apps.patch_namespaced_deployment_scale(
                name,
                namespace,
                {"spec": {"replicas": replicas}},
                field_manager="berth-operator",
                _content_type=MERGE_PATCH,
                _preload_content=False,
            ),
        )

    # -- Pods ----------------------------------------------------------------------------------

    async def list_pods(self, namespace: str, selector: str) -> list[dict[str, Any]]:
        """Pods matching the label ``selector`` (``k=v,k=v``), as dicts."""
        core = client.CoreV1Api(self.api)
        body = await self._call(
            f"list pods {namespace} {selector}",
            lambda: _decode(
                core.list_namespaced_pod(namespace, label_selector=selector, _preload_content=False)
            ),
        )
        items = body.get("items") or []
        return [item for item in items if isinstance(item, dict)]

    async def annotate_pod(self, namespace: str, name: str, annotations: dict[str, str]) -> None:
        """Merge ``annotations`` into the pod's. Raises NotFound when the pod is gone."""
        core = client.CoreV1Api(self.api)
        await self._call(
            f"annotate pod {namespace}/{name}",
            lambda: core.patch_namespaced_pod(
                name,
                namespace,
                {"metadata": {"annotations": annotations}},
                field_manager="berth-operator",
                _content_type=MERGE_PATCH,
                _preload_content=False,
            ),
        )

    # -- LaneWorker status ---------------------------------------------------------------------

    async def patch_status(self, namespace: str, name: str, status: dict[str, Any]) -> None:
        """Merge ``status`` into the LaneWorker status subresource. Raises NotFound, KubeError."""
        objects = client.CustomObjectsApi(self.api)
        await self._call(
            f"patch laneworker {namespace}/{name} status",
            lambda: objects.patch_namespaced_custom_object_status(
                GROUP,
                VERSION,
                namespace,
                LANEWORKER_PLURAL,
                name,
                {"status": status},
                field_manager="berth-operator",
                _content_type=MERGE_PATCH,
                _preload_content=False,
            ),
        )
