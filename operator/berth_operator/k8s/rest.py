"""Kubernetes API calls by path over the ``kubernetes`` client's ``ApiClient``.

The operator's calls are few and their bodies are plain JSON, so they go straight to the REST
paths of the Kubernetes API (``/api/v1/namespaces/{ns}/pods``, ``/apis/{group}/{version}/...``)
through the client's transport (kubeconfig or in-cluster credentials, TLS, the urllib3 pool).
The generated API classes (``CoreV1Api`` and its siblings) are never built: ``CoreV1Api`` alone
is 4.4 MB of source with hundreds of pydantic-validated methods, and constructing the six the
operator used cost ≈28 MiB of resident memory and ≈2 s of CPU at start-up (bench/README.md).

Errors are those of the client (``ApiException`` with ``status``, ``reason`` and the apiserver's
``Status`` body), raised for every non-2xx answer, so ``calls.translate`` reads them as before.
Uses ``ApiClient.param_serialize``/``call_api`` of the client's generator (kubernetes ≥ 37).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any
from urllib.parse import quote

from kubernetes.client.exceptions import ApiException

from berth_operator.k8s import calls

JSON = "application/json"
MERGE_PATCH = "application/merge-patch+json"
"""RFC 7386 JSON merge patch: what a dict patch means here (keys set; ``None`` removes)."""
JSON_PATCH = "application/json-patch+json"
"""RFC 6902 JSON patch: a list of operations."""


def core(namespace: str, plural: str, name: str = "", sub: str = "") -> str:
    """Path of a namespaced core (``/api/v1``) resource: the collection, or one object, or one
    object's subresource (``status``, ``log``, ``eviction``)."""
    return _path("/api/v1", namespace, plural, name, sub)


def group(
    api_group: str, version: str, namespace: str | None, plural: str, name: str = "", sub: str = ""
) -> str:
    """Path of a resource of a named API group (``/apis/{group}/{version}``); ``namespace`` None
    for a cluster-scoped resource or a list across every namespace."""
    return _path(f"/apis/{api_group}/{version}", namespace, plural, name, sub)


def cluster(plural: str, name: str = "") -> str:
    """Path of a cluster-scoped core resource (``/api/v1/nodes/{name}``)."""
    return _path("/api/v1", None, plural, name, "")


def _path(prefix: str, namespace: str | None, plural: str, name: str, sub: str) -> str:
    parts = [prefix]
    if namespace is not None:
        parts += ["namespaces", _segment(namespace)]
    parts.append(plural)
    if name:
        parts.append(_segment(name))
    if sub:
        parts.append(sub)
    return "/".join(parts)


def _segment(value: str) -> str:
    """One path segment, percent-encoded; an empty one or a dot segment is refused (ValueError)
    so that no name can address another path."""
    if value in ("", ".", ".."):
        raise ValueError(f"not a valid object name in an API path: {value!r}")
    return quote(value, safe="")


class Rest:
    """Synchronous requests by path; every method raises ``ApiException`` for a non-2xx answer
    and urllib3's ``HTTPError`` (e.g. ``MaxRetryError``) or ``OSError`` when the apiserver cannot
    be reached — ``calls.call``/``call_sync`` translate all of them."""

    def __init__(self, api_client: Any) -> None:
        self.api_client = api_client

    def open(
        self,
        method: str,
        path: str,
        *,
        query: Mapping[str, str | int | bool] | None = None,
        body: Any = None,
        content_type: str = JSON,
        accept: str = JSON,
        timeout: float | None = None,
    ) -> Any:
        """Send ``method path?query`` with the JSON ``body``; return the client's
        ``RESTResponse`` with its body not read yet (``.response.stream()`` follows it, as for
        a followed pod log). A non-2xx answer is read and raised as ``ApiException``."""
        headers = {"Accept": accept}
        if body is not None:
            headers["Content-Type"] = content_type
        params = [(k, _query_value(v)) for k, v in (query or {}).items()]
        serialized = self.api_client.param_serialize(
            method=method,
            resource_path=path,
            query_params=params or None,
            header_params=headers,
            body=body,
            auth_settings=["BearerToken"],
        )
        response = self.api_client.call_api(*serialized, _request_timeout=timeout)
        if not 200 <= response.status <= 299:
            response.read()
            raise ApiException.from_response(http_resp=response, body=None, data=None)
        return response

    def request(self, method: str, path: str, **kwargs: Any) -> bytes:
        """The raw answer body of ``open(method, path, **kwargs)``."""
        response = self.open(method, path, **kwargs)
        response.read()
        data: bytes = response.data or b""
        return data

    def json(self, what: str, method: str, path: str, **kwargs: Any) -> dict[str, Any]:
        """``request`` decoded as a JSON object (``KubeError`` naming ``what`` when it is not)."""
        return calls.decode_object(what, self.request(method, path, **kwargs))

    def get(self, what: str, path: str, **query: str | int | bool) -> dict[str, Any]:
        """GET ``path`` (query parameters as keywords, e.g. ``labelSelector=...``)."""
        return self.json(what, "GET", path, query=query)

    def create(self, what: str, path: str, body: dict[str, Any], **query: Any) -> dict[str, Any]:
        """POST ``body`` to the collection ``path``."""
        return self.json(what, "POST", path, body=body, query=query)

    def replace(self, what: str, path: str, body: dict[str, Any]) -> dict[str, Any]:
        """PUT ``body`` (with its resourceVersion: Conflict when stale) at ``path``."""
        return self.json(what, "PUT", path, body=body)

    def patch(
        self, what: str, path: str, patch: dict[str, Any] | list[Any], **query: Any
    ) -> dict[str, Any]:
        """PATCH ``path``: a dict is a JSON merge patch, a list a JSON patch."""
        kind = JSON_PATCH if isinstance(patch, list) else MERGE_PATCH
        return self.json(what, "PATCH", path, body=patch, content_type=kind, query=query)

    def delete(self, what: str, path: str, options: dict[str, Any] | None = None) -> dict[str, Any]:
        """DELETE ``path`` with ``DeleteOptions`` (preconditions, gracePeriodSeconds,
        propagationPolicy) as the body."""
        return self.json(what, "DELETE", path, body=options or None)


def _query_value(value: str | int | bool) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


class AsyncRest:
    """``Rest`` for the operator's event loop: each call runs in a worker thread through
    ``calls.call`` (errors translated into ``berth_operator.errors``, counted and timed).
    ``secret=True`` for Secret calls: errors drop their chain (an answer may echo the data)."""

    def __init__(self, api_client: Any, *, secret: bool = False) -> None:
        self.sync = Rest(api_client)
        self.secret = secret

    async def get(self, what: str, path: str, **query: Any) -> dict[str, Any]:
        """GET ``path``; ``what`` names the call ("get pod ns/name") in errors and metrics."""
        return await calls.call(what, self.sync.get, what, path, secret=self.secret, **query)

    async def create(
        self, what: str, path: str, body: dict[str, Any], **query: Any
    ) -> dict[str, Any]:
        """POST ``body`` to the collection ``path``."""
        return await calls.call(
            what, self.sync.create, what, path, body, secret=self.secret, **query
        )

    async def replace(self, what: str, path: str, body: dict[str, Any]) -> dict[str, Any]:
        """PUT ``body`` at ``path`` (Conflict when its resourceVersion is stale)."""
        return await calls.call(what, self.sync.replace, what, path, body, secret=self.secret)

    async def patch(
        self, what: str, path: str, patch: dict[str, Any] | list[Any], **query: Any
    ) -> dict[str, Any]:
        """PATCH ``path``: a dict is a JSON merge patch, a list a JSON patch."""
        return await calls.call(
            what, self.sync.patch, what, path, patch, secret=self.secret, **query
        )

    async def delete(
        self, what: str, path: str, options: dict[str, Any] | None = None
    ) -> dict[str, Any]:
        """DELETE ``path`` with ``DeleteOptions`` ``options``."""
        return await calls.call(what, self.sync.delete, what, path, options, secret=self.secret)
