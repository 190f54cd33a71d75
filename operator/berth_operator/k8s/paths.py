"""Kubernetes API paths, media types and query values: pure functions, no client and no I/O.

Shared by the operator's requests (:mod:`berth_operator.k8s.rest` over aiohttp) and the
kubectl plugin's (:mod:`kubectl_berth.rest` over the ``kubernetes`` client), so the
plugin can import them without the operator's dependencies (aiohttp, tenacity,
prometheus-client). Paths follow the Kubernetes API's REST layout:
``/api/v1/namespaces/{ns}/{plural}/{name}/{sub}`` for the core group and
``/apis/{group}/{version}/...`` for named groups.
"""

from __future__ import annotations

from urllib.parse import quote

from berth_operator.api.constants import GROUP, SESSION_PLURAL, VERSION

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


def query_value(value: str | int | bool) -> str:
    """A query parameter as the apiserver reads it (booleans ``true``/``false``)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def session_path(namespace: str | None, name: str = "", sub: str = "") -> str:
    """API path of AgentSessions (``group`` of berth.dev); ``namespace`` None = all."""
    return group(GROUP, VERSION, namespace, SESSION_PLURAL, name, sub)


def lease_path(namespace: str, name: str = "") -> str:
    """API path of coordination.k8s.io/v1 Leases of ``namespace``."""
    return group("coordination.k8s.io", "v1", namespace, "leases", name)
