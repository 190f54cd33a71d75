"""Async access to the Kubernetes API for the operator: requests by path (``k8s.rest``) over
one aiohttp session (``k8s.connection.ApiSession``) shared by every ``berth_operator.k8s`` client.

AgentSessions are read and written without ``metadata.managedFields``
(:func:`without_managed_fields`): no decision reads them, and they are half of a session's JSON,
kept once per session between reconciles.

Every method raises ``berth_operator.errors``: 404 → NotFound, 409 AlreadyExists →
AlreadyExists, other 409 → Conflict, anything else → KubeError. Bodies in and out are plain JSON
dicts.
Called by ``berth_operator.handlers`` and ``berth_operator.main``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from berth_operator.api.constants import GROUP, LANEWORKER_PLURAL, VERSION
from berth_operator.errors import AlreadyExists, Conflict, NotFound
from berth_operator.k8s import rest
from berth_operator.k8s.connection import ApiSession
from berth_operator.k8s.paths import lease_path as lease_path
from berth_operator.k8s.paths import session_path as session_path


def without_managed_fields(obj: dict[str, Any]) -> dict[str, Any]:
    """``obj`` without ``metadata.managedFields``: ``obj`` itself when it has none, else a
    top-level copy with a copy of ``metadata`` (``obj`` is never changed; other nested values
    are shared). managedFields are server-side apply's record of field ownership, which the
    operator never reads; an update that omits them leaves the stored ones as they are (the
    apiserver never lets a client unaware of the field strip it)."""
    meta = obj.get("metadata")
    if not isinstance(meta, dict) or "managedFields" not in meta:
        return obj
    return {**obj, "metadata": {k: v for k, v in meta.items() if k != "managedFields"}}


def sharing_unchanged(answer: dict[str, Any], sent: Mapping[str, Any]) -> dict[str, Any]:
    """``answer`` (what a write returned) with every top-level value, and every ``metadata``
    value, that equals ``sent``'s (what was written) replaced by ``sent``'s own object: the
    caller then holds one copy of the spec, labels, annotations and status it already had, not
    two (a parsed AgentSession is ≈10 KB and a daemon keeps the answer of its last write until
    kopf's view catches up; bench/README.md, operator memory). Values are compared, never
    mutated; ``answer``'s top level and ``metadata`` are updated in place and ``answer`` is
    returned. Callers never mutate nested values of an object they hold, so sharing is safe."""
    for key, value in answer.items():
        if key != "metadata" and key in sent and sent[key] == value:
            answer[key] = sent[key]
    meta, sent_meta = answer.get("metadata"), sent.get("metadata")
    if isinstance(meta, dict) and isinstance(sent_meta, Mapping):
        for key, value in meta.items():
            if key in sent_meta and sent_meta[key] == value:
                meta[key] = sent_meta[key]
    return answer


class KubeClient:
    """The operator's API calls. All methods are coroutines; errors as in the module docstring."""

    def __init__(self, session: ApiSession) -> None:
        self.session = session
        """The shared connection (one pool for every ``berth_operator.k8s`` client)."""
        self.rest = rest.AsyncRest(session)

    # --- AgentSession ------------------------------------------------------------------------
    async def get_session(self, namespace: str, name: str) -> dict[str, Any]:
        """GET the AgentSession (fresh from the apiserver, not a cache), without
        ``metadata.managedFields``."""
        return without_managed_fields(
            await self.rest.get(
                f"get agentsession {namespace}/{name}", session_path(namespace, name)
            )
        )

    async def list_sessions(self, namespace: str | None = None) -> list[dict[str, Any]]:
        """LIST AgentSessions of ``namespace`` (None = every namespace), straight from the
        apiserver: the raw items (metadata, spec, status)."""
        what = "list agentsessions" + (f" {namespace}" if namespace is not None else "")
        obj = await self.rest.get(what, session_path(namespace))
        return list(obj.get("items") or [])

    async def list_sessions_in(self, namespaces: Sequence[str]) -> list[dict[str, Any]]:
        """LIST AgentSessions of the watched ``namespaces`` (empty = every namespace)."""
        if not namespaces:
            return await self.list_sessions()
        items: list[dict[str, Any]] = []
        for namespace in namespaces:
            items.extend(await self.list_sessions(namespace))
        return items

    async def annotate_session(
        self, namespace: str, name: str, key: str, value: str
    ) -> dict[str, Any]:
        """Set one annotation of an AgentSession (a merge patch of ``metadata.annotations``)."""
        what = f"annotate agentsession {namespace}/{name}"
        patch = {"metadata": {"annotations": {key: value}}}
        return await self.rest.patch(what, session_path(namespace, name), patch)

    async def replace_session_status(self, body: dict[str, Any]) -> dict[str, Any]:
        """PUT the status subresource; the stored object, without ``metadata.managedFields``
        and sharing with ``body`` every part the write left equal (:func:`sharing_unchanged`).
        ``body`` carries metadata.resourceVersion: a stale writer gets Conflict instead of
        overwriting a newer status. Its managedFields are not sent (the apiserver keeps an
        object's managedFields when an update omits them)."""
        meta = body["metadata"]
        what = f"update status of agentsession {meta['namespace']}/{meta['name']}"
        path = session_path(meta["namespace"], meta["name"], "status")
        answer = await self.rest.replace(what, path, without_managed_fields(body))
        return sharing_unchanged(without_managed_fields(answer), body)

    async def get_laneworker(self, namespace: str, name: str) -> dict[str, Any]:
        """GET a LaneWorker."""
        path = rest.group(GROUP, VERSION, namespace, LANEWORKER_PLURAL, name)
        return await self.rest.get(f"get laneworker {namespace}/{name}", path)

    # --- Pods --------------------------------------------------------------------------------
    async def list_pods(self, namespace: str, selector: str) -> list[dict[str, Any]]:
        """LIST pods by label selector, straight from the apiserver (not a cache)."""
        obj = await self.rest.get(
            f"list pods {namespace} {selector}",
            rest.core(namespace, "pods"),
            labelSelector=selector,
        )
        return list(obj.get("items") or [])

    async def get_pod(self, namespace: str, name: str) -> dict[str, Any] | None:
        """GET a pod, straight from the apiserver (not a cache); None when it does not exist."""
        try:
            return await self.rest.get(
                f"get pod {namespace}/{name}", rest.core(namespace, "pods", name)
            )
        except NotFound:
            return None

    async def create_pod(self, body: dict[str, Any]) -> dict[str, Any]:
        """POST a pod. AlreadyExists when that name exists (the epoch race guard)."""
        meta = body["metadata"]
        what = f"create pod {meta['namespace']}/{meta['name']}"
        return await self.rest.create(what, rest.core(meta["namespace"], "pods"), body)

    async def delete_pod(
        self,
        namespace: str,
        name: str,
        *,
        uid: str = "",
        force: bool = False,
        grace_seconds: int | None = None,
    ) -> None:
        """DELETE a pod (uid precondition when given; grace 0 when ``force``, else
        ``grace_seconds`` when given, else the pod's own). 404 is fine."""
        options: dict[str, Any] = {}
        if uid:
            options["preconditions"] = {"uid": uid}
        if force:
            options["gracePeriodSeconds"] = 0
        elif grace_seconds is not None:
            options["gracePeriodSeconds"] = grace_seconds
        what = f"delete pod {namespace}/{name}"
        try:
            await self.rest.delete(what, rest.core(namespace, "pods", name), options)
        except NotFound:
            return
        except Conflict:
            return  # uid precondition failed: a different pod of that name; not ours to delete

    async def get_node(self, name: str) -> dict[str, Any] | None:
        """GET a node; None when it does not exist."""
        try:
            return await self.rest.get(f"get node {name}", rest.cluster("nodes", name))
        except NotFound:
            return None

    async def label_own_pod(self, namespace: str, name: str, key: str, value: str | None) -> None:
        """Set (or with ``None`` remove) label ``key`` on pod ``namespace/name`` (a merge patch).
        Raises NotFound, KubeError."""
        what = f"label pod {namespace}/{name}"
        patch = {"metadata": {"labels": {key: value}}}
        path = rest.core(namespace, "pods", name)
        await self.rest.patch(what, path, patch, fieldManager="berth-operator")

    # --- PersistentVolumeClaims ---------------------------------------------------------------
    async def get_pvc(self, namespace: str, name: str) -> dict[str, Any] | None:
        """GET a PersistentVolumeClaim; None when it does not exist."""
        try:
            return await self.rest.get(
                f"get persistentvolumeclaim {namespace}/{name}",
                rest.core(namespace, "persistentvolumeclaims", name),
            )
        except NotFound:
            return None

    async def create_pvc(self, body: dict[str, Any]) -> bool:
        """POST a PersistentVolumeClaim; False when one of that name already exists."""
        meta = body["metadata"]
        what = f"create persistentvolumeclaim {meta['namespace']}/{meta['name']}"
        path = rest.core(meta["namespace"], "persistentvolumeclaims")
        try:
            await self.rest.create(what, path, body)
        except AlreadyExists:
            return False
        return True

    async def annotate_pvc(self, namespace: str, name: str, key: str, value: str) -> None:
        """Set one annotation of a PersistentVolumeClaim (a merge patch)."""
        what = f"annotate persistentvolumeclaim {namespace}/{name}"
        patch = {"metadata": {"annotations": {key: value}}}
        path = rest.core(namespace, "persistentvolumeclaims", name)
        await self.rest.patch(what, path, patch, fieldManager="berth-operator")

    # --- Jobs -------------------------------------------------------------------------------------
    async def get_job(self, namespace: str, name: str) -> dict[str, Any] | None:
        """GET a Job; None when it does not exist."""
        try:
            return await self.rest.get(
                f"get job {namespace}/{name}", rest.group("batch", "v1", namespace, "jobs", name)
            )
        except NotFound:
            return None

    async def create_job(self, body: dict[str, Any]) -> None:
        """POST a Job; AlreadyExists is fine (idempotent)."""
        meta = body["metadata"]
        what = f"create job {meta['namespace']}/{meta['name']}"
        path = rest.group("batch", "v1", meta["namespace"], "jobs")
        try:
            await self.rest.create(what, path, body)
        except AlreadyExists:
            return

    # --- Leases ------------------------------------------------------------------------------
    async def get_lease(self, namespace: str, name: str) -> dict[str, Any] | None:
        """GET a Lease; None when absent."""
        try:
            return await self.rest.get(f"get lease {namespace}/{name}", lease_path(namespace, name))
        except NotFound:
            return None

    async def create_lease(self, body: dict[str, Any]) -> dict[str, Any]:
        """POST a Lease (AlreadyExists when another replica won)."""
        meta = body["metadata"]
        what = f"create lease {meta['namespace']}/{meta['name']}"
        return await self.rest.create(what, lease_path(meta["namespace"]), body)

    async def replace_lease(self, body: dict[str, Any]) -> dict[str, Any]:
        """PUT a Lease with its resourceVersion (Conflict when another replica wrote first)."""
        meta = body["metadata"]
        what = f"replace lease {meta['namespace']}/{meta['name']}"
        path = lease_path(meta["namespace"], meta["name"])
        return await self.rest.replace(what, path, body)

    async def close(self) -> None:
        """Close the connection pool."""
        await self.session.close()
