"""API calls of the LaneWorker autoscaler: Deployments, ``/scale``, pods, status.

The only module of the LaneWorker code that talks to the API (CONVENTIONS: only
``berth_operator.k8s`` does). Called by ``berth_operator.handlers.laneworker``. Requests by
path (:mod:`berth_operator.k8s.rest`) over the operator's aiohttp session, on kopf's event loop;
answers are plain dicts in the API's own camelCase shape, which is what
the pure builders and decisions read. The session is the operator's
(:class:`berth_operator.k8s.connection.ApiSession`).

Writes, and why they are shaped so:

- Deployment create: a full object (builder output) with the first replica count.
- Template change: a JSON Patch ``replace`` of ``/spec/template`` plus the template-hash
  annotation, guarded by a ``test`` of the old hash, so a concurrent edit makes it fail with
  Conflict instead of being overwritten blindly. Replicas are never part of it.
- Replicas: a merge patch on the Deployment's ``scale`` subresource (``spec.replicas`` only).
- Pod deletion cost: a merge patch of one annotation per pod.
- LaneWorker status: a merge patch on the ``status`` subresource (lists such as ``conditions`` are
  replaced whole, as the conventions ask).

Errors are :mod:`berth_operator.errors` (NotFound on 404, AlreadyExists/Conflict on 409,
KubeError else).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from berth_operator.api.constants import GROUP, LANEWORKER_PLURAL, VERSION
from berth_operator.errors import NotFound
from berth_operator.k8s import rest
from berth_operator.k8s.connection import ApiSession

MANAGER = {"fieldManager": "berth-operator"}


def _deployments(namespace: str, name: str = "", sub: str = "") -> str:
    return rest.group("apps", "v1", namespace, "deployments", name, sub)


@dataclass(frozen=True)
class LaneWorkerApi:
    """API calls of the autoscaler, each an ``async`` method. ``session`` is the operator's
    connection to the apiserver."""

    session: ApiSession

    @property
    def rest(self) -> rest.AsyncRest:
        """Requests over ``session`` (a light wrapper, built per call)."""
        return rest.AsyncRest(self.session)

    # -- Deployments ---------------------------------------------------------------------------

    async def get_deployment(self, namespace: str, name: str) -> dict[str, Any] | None:
        """The Deployment as a dict, or None when it does not exist."""
        try:
            return await self.rest.get(
                f"get deployment {namespace}/{name}", _deployments(namespace, name)
            )
        except NotFound:
            return None

    async def create_deployment(self, body: dict[str, Any]) -> dict[str, Any]:
        """Create the Deployment ``body``. Raises AlreadyExists or KubeError."""
        meta = body["metadata"]
        return await self.rest.create(
            f"create deployment {meta['namespace']}/{meta['name']}",
            _deployments(meta["namespace"]),
            body,
            **MANAGER,
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
        await self.rest.patch(
            f"update deployment {namespace}/{name}", _deployments(namespace, name), ops, **MANAGER
        )

    async def scale_deployment(self, namespace: str, name: str, replicas: int) -> None:
        """Set ``spec.replicas`` through the Deployment's ``scale`` subresource."""
        await self.rest.patch(
            f"scale deployment {namespace}/{name} to {replicas}",
            _deployments(namespace, name, "scale"),
            {"spec": {"replicas": replicas}},
            **MANAGER,
        )

    # -- Pods ----------------------------------------------------------------------------------

    async def list_pods(self, namespace: str, selector: str) -> list[dict[str, Any]]:
        """Pods matching the label ``selector`` (``k=v,k=v``), as dicts."""
        body = await self.rest.get(
            f"list pods {namespace} {selector}",
            rest.core(namespace, "pods"),
            labelSelector=selector,
        )
        items = body.get("items") or []
        return [item for item in items if isinstance(item, dict)]

    async def annotate_pod(self, namespace: str, name: str, annotations: dict[str, str]) -> None:
        """Merge ``annotations`` into the pod's. Raises NotFound when the pod is gone."""
        await self.rest.patch(
            f"annotate pod {namespace}/{name}",
            rest.core(namespace, "pods", name),
            {"metadata": {"annotations": annotations}},
            **MANAGER,
        )

    # -- LaneWorker status ---------------------------------------------------------------------

    async def patch_status(self, namespace: str, name: str, status: dict[str, Any]) -> None:
        """Merge ``status`` into the LaneWorker status subresource. Raises NotFound, KubeError."""
        await self.rest.patch(
            f"patch laneworker {namespace}/{name} status",
            rest.group(GROUP, VERSION, namespace, LANEWORKER_PLURAL, name, "status"),
            {"status": status},
            **MANAGER,
        )
