"""Kubernetes calls of the ``kubectl-berth`` plugin (:mod:`kubectl_berth.cli`).

The plugin is a short-lived CLI, so this makes synchronous requests by path
(:mod:`kubectl_berth.rest`) over the ``kubernetes`` client's ``ApiClient``, with the
caller's kubeconfig (``KUBECONFIG`` or ``~/.kube/config``; in-cluster config as a fallback), not
the operator's credentials. For users it reads the AgentSession object (spec and status) and the
session's API token from its Secret ``<name>-berth``; everything the plugin changes on a session
goes through the session pod's HTTP API (docs/architecture.md §5), reached through the apiserver's
pod proxy (``/api/v1/namespaces/<ns>/pods/<pod>:8080/proxy/...``) with the token in
``X-Berth-Token`` (the proxy keeps that header; ``Authorization`` carries the caller's own
credentials to the apiserver). So the caller needs ``get`` on ``secrets`` and ``create`` on
``pods/proxy`` in the namespace: whoever may read the token may drive the session.
The chart's post-delete hook (``kubectl-berth cleanup-lease``) also lists
the operator's pods and deletes its leader-election Lease.

API errors are translated to :mod:`berth_operator.errors` by ``rest.call_sync``, so the
plugin never sees ``kubernetes.client.ApiException``.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

from berth_operator.api.constants import (
    GROUP,
    LANEWORKER_PLURAL,
    SECRET_API_TOKEN_KEY,
    VERSION,
)
from berth_operator.errors import KubeError, NotFound
from berth_operator.k8s import paths
from berth_operator.k8s.paths import lease_path, session_path
from kubernetes import client, config
from kubernetes.client.exceptions import ApiException
from kubernetes.config.config_exception import ConfigException
from urllib3.exceptions import HTTPError

from berth_contract.state import API_TOKEN_HEADER
from kubectl_berth import rest as sync_rest

# The config loaders are untyped in the kubernetes package; give them a typed seam.
_new_client_from_config: Callable[..., Any] = config.new_client_from_config
_list_contexts: Callable[..., tuple[list[dict[str, Any]], dict[str, Any] | None]] = (
    config.list_kube_config_contexts
)
_load_incluster_config: Callable[[], None] = config.load_incluster_config


@dataclass(frozen=True)
class PluginClient:
    """A configured API client and the namespace the plugin works in."""

    api: Any
    namespace: str

    @property
    def rest(self) -> sync_rest.Rest:
        """Requests by path over ``api``."""
        return sync_rest.Rest(self.api)

    def get_session(self, name: str) -> dict[str, Any]:
        """Return the AgentSession ``name`` as a dict. Raises NotFound or KubeError."""
        what = f"get agentsession {self.namespace}/{name}"
        try:
            return sync_rest.call_sync(
                what, self.rest.get, what, session_path(self.namespace, name)
            )
        except NotFound:
            raise NotFound(f"agentsession {self.namespace}/{name} not found", status=404) from None

    def session_token(self, name: str) -> str:
        """The API token of session ``name`` (Secret ``<name>-berth``, key ``api-token``).
        Raises KubeError (NotFound when the Secret does not exist); never shows the token."""
        import base64

        secret_name = f"{name}-berth"
        what = f"get secret {self.namespace}/{secret_name}"
        path = paths.core(self.namespace, "secrets", secret_name)
        try:
            secret = sync_rest.call_sync(what, self.rest.get, what, path, secret=True)
        except NotFound as exc:
            raise NotFound(f"{exc} (the session has no API token yet)", status=404) from None
        except KubeError as exc:
            if exc.status in (401, 403):
                raise KubeError(
                    f"{exc} (the plugin needs get on secrets to call the session)",
                    status=exc.status,
                    reason=exc.reason,
                ) from None
            raise
        raw = (secret.get("data") or {}).get(SECRET_API_TOKEN_KEY)
        try:
            token = base64.b64decode(str(raw or ""), validate=True).decode().strip()
        except ValueError:
            token = ""
        if not token:
            raise KubeError(
                f"secret {self.namespace}/{secret_name} holds no {SECRET_API_TOKEN_KEY}"
            )
        return token

    def proxy_post(
        self, path: str, payload: dict[str, Any], token: str, timeout: float
    ) -> tuple[int, Any]:
        """POST ``payload`` as JSON to ``path`` (an apiserver pod-proxy path) with the session's
        token in ``X-Berth-Token``; return (HTTP status, decoded body or text). Error statuses
        (the session's or the apiserver's) are returned, not raised; KubeError when the
        apiserver cannot be reached (refused, reset, timed out, TLS)."""
        return self.proxy_call("POST", path, payload, token, timeout)

    def proxy_get(self, path: str, token: str, timeout: float) -> tuple[int, Any]:
        """GET ``path`` (an apiserver pod-proxy path) with the session's token (``""`` for an
        open path such as ``/metrics``); as :meth:`proxy_post`: (status, JSON body or text)."""
        return self.proxy_call("GET", path, None, token, timeout)

    def proxy_call(
        self, method: str, path: str, payload: dict[str, Any] | None, token: str, timeout: float
    ) -> tuple[int, Any]:
        """``method path`` through the apiserver (JSON ``payload`` when given, the session's
        token in ``X-Berth-Token`` when not empty); (status, decoded JSON or text). Raises
        KubeError only when the apiserver cannot be reached."""
        headers = {"Accept": "application/json, text/plain"}
        if payload is not None:
            headers["Content-Type"] = "application/json"
        if token:
            headers[API_TOKEN_HEADER] = token
        try:
            method, url, headers, body, post = self.api.param_serialize(
                method, path, header_params=headers, body=payload, auth_settings=["BearerToken"]
            )
            response = self.api.call_api(
                method,
                url,
                header_params=headers,
                body=body,
                post_params=post,
                _request_timeout=timeout,
            )
            response.read()
            raw: str | bytes = response.data or b""
            status = int(response.status)
        except ApiException as exc:
            raw, status = exc.body or b"", int(exc.status or 0)
        except (HTTPError, OSError) as exc:  # urllib3: refused (MaxRetryError), reset, TLS
            raise KubeError(f"cannot reach the Kubernetes API: {exc}") from exc
        text = raw.decode(errors="replace") if isinstance(raw, bytes) else str(raw)
        try:
            return status, json.loads(text) if text else None
        except json.JSONDecodeError:
            return status, text

    def in_namespace(self, namespace: str) -> PluginClient:
        """The same client working in ``namespace``."""
        return replace(self, namespace=namespace)

    def list_sessions(self, all_namespaces: bool = False) -> list[dict[str, Any]]:
        """AgentSessions of the namespace (every namespace with ``all_namespaces``), as dicts.
        Raises KubeError (e.g. 403 without ``list`` on agentsessions)."""
        what = f"list agentsessions in {'all namespaces' if all_namespaces else self.namespace}"
        path = session_path(None if all_namespaces else self.namespace)
        listed = sync_rest.call_sync(what, self.rest.get, what, path)
        return [s for s in listed.get("items") or [] if isinstance(s, dict)]

    def get_laneworker(self, name: str) -> dict[str, Any]:
        """The LaneWorker ``name`` as a dict. Raises NotFound or KubeError."""
        what = f"get laneworker {self.namespace}/{name}"
        path = paths.group(GROUP, VERSION, self.namespace, LANEWORKER_PLURAL, name)
        return sync_rest.call_sync(what, self.rest.get, what, path)

    def can(self, verb: str, resource: str, subresource: str = "", group: str = "") -> bool:
        """Whether the caller may ``verb`` the ``resource`` (``subresource``) of API ``group``
        in the namespace: a SelfSubjectAccessReview (authorization.k8s.io/v1), the check
        ``kubectl auth can-i`` makes. False when the review itself is refused."""
        attributes = {"namespace": self.namespace, "verb": verb, "resource": resource}
        if subresource:
            attributes["subresource"] = subresource
        if group:
            attributes["group"] = group
        review = {
            "apiVersion": "authorization.k8s.io/v1",
            "kind": "SelfSubjectAccessReview",
            "spec": {"resourceAttributes": attributes},
        }
        what = f"create selfsubjectaccessreview {verb} {resource}"
        path = paths.group("authorization.k8s.io", "v1", None, "selfsubjectaccessreviews")
        try:
            answer = sync_rest.call_sync(what, self.rest.create, what, path, review)
        except KubeError:
            return False
        return bool((answer.get("status") or {}).get("allowed"))

    def set_suspend(self, name: str, suspend: bool) -> dict[str, Any]:
        """Merge-patch ``spec.suspend`` of AgentSession ``name``; returns the object. Raises
        NotFound or KubeError (e.g. 403 without ``patch`` on agentsessions)."""
        what = f"patch agentsession {self.namespace}/{name}"
        patch = {"spec": {"suspend": suspend}}
        return sync_rest.call_sync(
            what, self.rest.patch, what, session_path(self.namespace, name), patch
        )

    def annotate(self, name: str, key: str, value: str) -> dict[str, Any]:
        """Merge-patch the annotation ``key`` of AgentSession ``name`` to ``value``; returns the
        object. Raises NotFound or KubeError (e.g. 403 without ``patch`` on agentsessions)."""
        what = f"annotate agentsession {self.namespace}/{name}"
        patch = {"metadata": {"annotations": {key: value}}}
        return sync_rest.call_sync(
            what, self.rest.patch, what, session_path(self.namespace, name), patch
        )

    def events_of(self, kind: str, name: str) -> list[dict[str, Any]]:
        """Events of the ``kind`` object ``name`` (core/v1 Events, involvedObject field
        selector), as dicts, oldest first. Raises KubeError."""
        what = f"list events of {kind} {self.namespace}/{name}"
        listed = sync_rest.call_sync(
            what,
            self.rest.get,
            what,
            paths.core(self.namespace, "events"),
            fieldSelector=f"involvedObject.kind={kind},involvedObject.name={name}",
        )
        items = [e for e in listed.get("items") or [] if isinstance(e, dict)]
        return sorted(items, key=lambda e: str(e.get("lastTimestamp") or e.get("eventTime") or ""))

    def pod_log_lines(self, pod: str, container: str, follow: bool) -> Any:
        """An iterator over the log lines (bytes) of ``container`` in ``pod``; with ``follow``
        it lasts until the container stops. Raises NotFound or KubeError."""
        response: Any = sync_rest.call_sync(
            f"read log of pod {self.namespace}/{pod}",
            self.rest.open,
            "GET",
            paths.core(self.namespace, "pods", pod, "log"),
            query={"container": container, "follow": follow},
            accept="*/*",
        )
        if follow:
            return response.response.stream()
        response.read()
        return iter((response.data or b"").splitlines(keepends=True))

    def count_pods(self, selector: str) -> int:
        """Pods in the namespace matching the label ``selector``. Raises KubeError."""
        what = f"list pods {selector!r} in {self.namespace}"
        pods = sync_rest.call_sync(
            what, self.rest.get, what, paths.core(self.namespace, "pods"), labelSelector=selector
        )
        return len(pods.get("items") or [])

    def delete_lease(self, name: str) -> bool:
        """Delete the Lease ``name``; False when it did not exist. Raises KubeError."""
        what = f"delete lease {self.namespace}/{name}"
        path = lease_path(self.namespace, name)
        try:
            sync_rest.call_sync(what, self.rest.delete, what, path)
        except NotFound:
            return False
        return True


def connect(
    *, kubeconfig: str | None = None, context: str | None = None, namespace: str | None = None
) -> PluginClient:
    """Load credentials like kubectl does and pick the namespace.

    The namespace is ``namespace`` when given, else the current context's namespace, else
    ``default``. Raises KubeError when no configuration can be loaded.
    """
    try:
        api = _new_client_from_config(config_file=kubeconfig, context=context)
        if namespace is None:
            _, active = _list_contexts(config_file=kubeconfig)
            if context is not None:
                contexts, _ = _list_contexts(config_file=kubeconfig)
                active = next((c for c in contexts if c.get("name") == context), active)
            namespace = (active or {}).get("context", {}).get("namespace") or "default"
    except (ConfigException, OSError) as kube_exc:
        if kubeconfig is not None or context is not None:
            raise KubeError(f"cannot load kubeconfig: {kube_exc}") from kube_exc
        try:
            _load_incluster_config()
        except ConfigException as exc:
            raise KubeError(
                f"no kubeconfig found ({kube_exc}) and not running in a cluster ({exc})"
            ) from exc
        api = client.ApiClient()
        namespace = namespace or _incluster_namespace()
    return PluginClient(api=api, namespace=namespace)


def _incluster_namespace() -> str:
    path = "/var/run/secrets/kubernetes.io/serviceaccount/namespace"
    try:
        with open(path, encoding="utf-8") as fh:
            return fh.read().strip() or "default"
    except OSError:
        return "default"
