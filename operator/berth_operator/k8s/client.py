"""Async access to the Kubernetes API for the operator (the synchronous ``kubernetes`` client in
worker threads; one shared connection pool).

Every method translates ``ApiException`` into ``berth_operator.errors``: 404 → NotFound,
409 AlreadyExists → AlreadyExists, other 409 → Conflict, anything else → KubeError. Bodies in and
out are plain JSON dicts (``sanitize_for_serialization``), never client model objects.
Called by ``berth_operator.handlers`` and ``berth_operator.main``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from kubernetes import client, config
from kubernetes.config.config_exception import ConfigException

from berth_operator.api.constants import GROUP, LANEWORKER_PLURAL, SESSION_PLURAL, VERSION
from berth_operator.errors import AlreadyExists, Conflict, NotFound
from berth_operator.k8s import calls

T = TypeVar("T")

_load_kube_config: Callable[..., None] = config.load_kube_config
_load_incluster_config: Callable[[], None] = config.load_incluster_config


def make_api_client(pool_size: int = 32) -> Any:
    """An ApiClient from $KUBECONFIG / ~/.kube/config, else in-cluster config."""
    cfg = client.Configuration()
    try:
        _load_kube_config(client_configuration=cfg)
    except (ConfigException, FileNotFoundError, OSError):
        _load_incluster_config()
        cfg = client.Configuration.get_default_copy()
    cfg.connection_pool_maxsize = pool_size
    return client.ApiClient(cfg)


class KubeClient:
    """The operator's API calls. All methods are coroutines; errors as in the module docstring."""

    def __init__(self, api_client: Any) -> None:
        self._api = api_client
        self.core = client.CoreV1Api(api_client)
        self.custom = client.CustomObjectsApi(api_client)
        self.batch = client.BatchV1Api(api_client)
        self.coordination = client.CoordinationV1Api(api_client)

    @property
    def api_client(self) -> Any:
        """The shared ``ApiClient`` (one connection pool for every k8s/ client)."""
        return self._api

    def _json(self, obj: Any) -> dict[str, Any]:
        if isinstance(obj, dict):
            return obj
        out: dict[str, Any] = self._api.sanitize_for_serialization(obj)
        return out

    async def _call(self, what: str, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        return await calls.call(what, fn, *args, **kwargs)

    async def _json_call(
        self, what: str, fn: Callable[..., Any], *args: Any, **kwargs: Any
    ) -> dict[str, Any]:
        """Like ``_call`` but returns the raw JSON answer as a dict: ``_preload_content=False``
        skips the client's model (de)serialization, which dominates the operator's CPU at
        hundreds of sessions."""

        def run() -> dict[str, Any]:
            response = fn(*args, _preload_content=False, **kwargs)
            return calls.decode_object(what, response.data)

        return await self._call(what, run)

    # --- AgentSession ------------------------------------------------------------------------
    async def get_session(self, namespace: str, name: str) -> dict[str, Any]:
        """GET the AgentSession (fresh from the apiserver, not a cache)."""
        return await self._json_call(
            f"get agentsession {namespace}/{name}",
            self.custom.get_namespaced_custom_object,
            GROUP,
            VERSION,
            namespace,
            SESSION_PLURAL,
            name,
        )

    async def list_sessions(self, namespace: str | None = None) -> list[dict[str, Any]]:
        """LIST AgentSessions of ``namespace`` (None = every namespace), straight from the
        apiserver: the raw items (metadata, spec, status)."""
        if namespace is None:
            obj = await self._json_call(
                "list agentsessions",
                self.custom.list_cluster_custom_object,
                GROUP,
                VERSION,
                SESSION_PLURAL,
            )
        else:
            obj = await self._json_call(
                f"list agentsessions {namespace}",
                self.custom.list_namespaced_custom_object,
                GROUP,
                VERSION,
                namespace,
                SESSION_PLURAL,
            )
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
        return await self._json_call(
            f"annotate agentsession {namespace}/{name}",
            self.custom.patch_namespaced_custom_object,
            GROUP,
            VERSION,
            namespace,
            SESSION_PLURAL,
            name,
            {"metadata": {"annotations": {key: value}}},
        )

    async def replace_session_status(self, body: dict[str, Any]) -> dict[str, Any]:
        """PUT the status subresource. ``body`` carries metadata.resourceVersion: a stale
        writer gets Conflict instead of overwriting a newer status."""
        meta = body["metadata"]
        obj = await self._json_call(
            f"update status of agentsession {meta['namespace']}/{meta['name']}",
            self.custom.replace_namespaced_custom_object_status,
            GROUP,
            VERSION,
            meta["namespace"],
            SESSION_PLURAL,
            meta["name"],
            body,
        )
        return self._json(obj)

    async def get_laneworker(self, namespace: str, name: str) -> dict[str, Any]:
        """GET a LaneWorker."""
        obj = await self._json_call(
            f"get laneworker {namespace}/{name}",
            self.custom.get_namespaced_custom_object,
            GROUP,
            VERSION,
            namespace,
            LANEWORKER_PLURAL,
            name,
        )
        return self._json(obj)

    # --- Pods --------------------------------------------------------------------------------
    async def list_pods(self, namespace: str, selector: str) -> list[dict[str, Any]]:
        """LIST pods by label selector, straight from the apiserver (not a cache)."""
        obj = await self._json_call(
            f"list pods {namespace} {selector}",
            self.core.list_namespaced_pod,
            namespace,
            label_selector=selector,
        )
        return [self._json(p) for p in self._json(obj).get("items", [])]

    async def get_pod(self, namespace: str, name: str) -> dict[str, Any] | None:
        """GET a pod, straight from the apiserver (not a cache); None when it does not exist."""
        try:
            obj = await self._json_call(
                f"get pod {namespace}/{name}", self.core.read_namespaced_pod, name, namespace
            )
        except NotFound:
            return None
        return self._json(obj)

    async def create_pod(self, body: dict[str, Any]) -> dict[str, Any]:
        """POST a pod. AlreadyExists when that name exists (the epoch race guard)."""
        meta = body["metadata"]
        obj = await self._json_call(
            f"create pod {meta['namespace']}/{meta['name']}",
            self.core.create_namespaced_pod,
            meta["namespace"],
            body,
        )
        return self._json(obj)

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
        try:
            await self._json_call(
                f"delete pod {namespace}/{name}",
                self.core.delete_namespaced_pod,
                name,
                namespace,
                body=options,
            )
        except NotFound:
            return
        except Conflict:
            return  # uid precondition failed: a different pod of that name; not ours to delete

    async def get_node(self, name: str) -> dict[str, Any] | None:
        """GET a node; None when it does not exist."""
        try:
            obj = await self._json_call(f"get node {name}", self.core.read_node, name)
        except NotFound:
            return None
        return self._json(obj)

    async def label_own_pod(self, namespace: str, name: str, key: str, value: str | None) -> None:
        """Set (or with ``None`` remove) label ``key`` on pod ``namespace/name`` (a merge patch).
        Raises NotFound, KubeError."""
        await self._json_call(
            f"label pod {namespace}/{name}",
            self.core.patch_namespaced_pod,
            name,
            namespace,
            {"metadata": {"labels": {key: value}}},
            field_manager="berth-operator",
        )

    # --- PersistentVolumeClaims ---------------------------------------------------------------
    async def get_pvc(self, namespace: str, name: str) -> dict[str, Any] | None:
        """GET a PersistentVolumeClaim; None when it does not exist."""
        try:
            return await self._json_call(
                f"get persistentvolumeclaim {namespace}/{name}",
                self.core.read_namespaced_persistent_volume_claim,
                name,
                namespace,
            )
        except NotFound:
            return None

    async def create_pvc(self, body: dict[str, Any]) -> bool:
        """POST a PersistentVolumeClaim; False when one of that name already exists."""
        meta = body["metadata"]
        try:
            await self._json_call(
                f"create persistentvolumeclaim {meta['namespace']}/{meta['name']}",
                self.core.create_namespaced_persistent_volume_claim,
                meta["namespace"],
                body,
            )
        except AlreadyExists:
            return False
        return True

    # --- Jobs -------------------------------------------------------------------------------------
    async def create_job(self, body: dict[str, Any]) -> None:
        """POST a Job; AlreadyExists is fine (idempotent)."""
        meta = body["metadata"]
        try:
            await self._json_call(
                f"create job {meta['namespace']}/{meta['name']}",
                self.batch.create_namespaced_job,
                meta["namespace"],
                body,
            )
        except AlreadyExists:
            return

    # --- Leases ------------------------------------------------------------------------------
    async def get_lease(self, namespace: str, name: str) -> dict[str, Any] | None:
        """GET a Lease; None when absent."""
        try:
            obj = await self._json_call(
                f"get lease {namespace}/{name}",
                self.coordination.read_namespaced_lease,
                name,
                namespace,
            )
        except NotFound:
            return None
        return self._json(obj)

    async def create_lease(self, body: dict[str, Any]) -> dict[str, Any]:
        """POST a Lease (AlreadyExists when another replica won)."""
        meta = body["metadata"]
        obj = await self._json_call(
            f"create lease {meta['namespace']}/{meta['name']}",
            self.coordination.create_namespaced_lease,
            meta["namespace"],
            body,
        )
        return self._json(obj)

    async def replace_lease(self, body: dict[str, Any]) -> dict[str, Any]:
        """PUT a Lease with its resourceVersion (Conflict when another replica wrote first)."""
        meta = body["metadata"]
        obj = await self._json_call(
            f"replace lease {meta['namespace']}/{meta['name']}",
            self.coordination.replace_namespaced_lease,
            meta["name"],
            meta["namespace"],
            body,
        )
        return self._json(obj)

    def close(self) -> None:
        """Release the connection pool."""
        self._api.close()
