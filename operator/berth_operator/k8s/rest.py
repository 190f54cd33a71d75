"""Kubernetes API calls by path: the paths, and the operator's requests over its aiohttp session.

The operator's calls are few and their bodies are plain JSON, so they go straight to the REST
paths of the Kubernetes API (``/api/v1/namespaces/{ns}/pods``, ``/apis/{group}/{version}/...``)
over :class:`berth_operator.k8s.connection.ApiSession` (kopf's credentials, one aiohttp session
on the event loop). No client library is involved: the generated API classes of the
``kubernetes`` package cost ≈28 MiB of resident memory and ≈2 s of CPU to build, and its
synchronous transport needed a worker thread per call in flight (bench/README.md).

Every non-2xx answer raises the ``berth_operator.errors`` exception :func:`calls.error_for`
gives; no answer at all raises ``KubeError`` "cannot reach the Kubernetes API".
"""

from __future__ import annotations

import time
from typing import Any

from berth_operator.k8s import calls
from berth_operator.k8s.connection import ApiSession, Unreachable
from berth_operator.k8s.paths import JSON as JSON
from berth_operator.k8s.paths import JSON_PATCH as JSON_PATCH
from berth_operator.k8s.paths import MERGE_PATCH as MERGE_PATCH
from berth_operator.k8s.paths import cluster as cluster
from berth_operator.k8s.paths import core as core
from berth_operator.k8s.paths import group as group
from berth_operator.metrics import API_REQUEST_SECONDS, API_REQUESTS


class AsyncRest:
    """Requests by path over ``session``, each counted in ``berth_operator_api_requests_total``
    and timed in ``berth_operator_api_request_duration_seconds``. Every method raises the
    ``berth_operator.errors`` exception of a non-2xx answer (``calls.error_for``) or
    ``KubeError`` when the apiserver cannot be reached. ``secret=True`` for Secret calls:
    errors drop their chain (an answer may echo the data)."""

    def __init__(self, session: ApiSession, *, secret: bool = False) -> None:
        self.session = session
        self.secret = secret

    async def json(
        self,
        what: str,
        method: str,
        path: str,
        *,
        query: dict[str, Any] | None = None,
        body: Any = None,
        content_type: str = JSON,
    ) -> dict[str, Any]:
        """Send the request; return the answer's JSON object. ``what`` names the call
        ("get pod ns/name") in errors and metrics (``calls.request_kind``)."""
        verb, resource = calls.request_kind(what)
        API_REQUESTS.labels(verb=verb, resource=resource).inc()
        started = time.perf_counter()
        try:
            status, data = await self.session.request(
                method, path, query=query, body=body, content_type=content_type
            )
        except Unreachable as exc:
            if self.secret:
                raise calls.unreachable(what, exc) from None
            raise calls.unreachable(what, exc) from exc
        finally:
            API_REQUEST_SECONDS.labels(verb=verb).observe(time.perf_counter() - started)
        if not 200 <= status <= 299:
            raise calls.error_for(what, status, data) from None
        return calls.decode_object(what, data)

    async def get(self, what: str, path: str, **query: Any) -> dict[str, Any]:
        """GET ``path`` (query parameters as keywords, e.g. ``labelSelector=...``)."""
        return await self.json(what, "GET", path, query=query)

    async def create(
        self, what: str, path: str, body: dict[str, Any], **query: Any
    ) -> dict[str, Any]:
        """POST ``body`` to the collection ``path``."""
        return await self.json(what, "POST", path, body=body, query=query)

    async def replace(self, what: str, path: str, body: dict[str, Any]) -> dict[str, Any]:
        """PUT ``body`` (with its resourceVersion: Conflict when stale) at ``path``."""
        return await self.json(what, "PUT", path, body=body)

    async def patch(
        self, what: str, path: str, patch: dict[str, Any] | list[Any], **query: Any
    ) -> dict[str, Any]:
        """PATCH ``path``: a dict is a JSON merge patch, a list a JSON patch."""
        kind = JSON_PATCH if isinstance(patch, list) else MERGE_PATCH
        return await self.json(what, "PATCH", path, body=patch, content_type=kind, query=query)

    async def delete(
        self, what: str, path: str, options: dict[str, Any] | None = None
    ) -> dict[str, Any]:
        """DELETE ``path`` with ``DeleteOptions`` (preconditions, gracePeriodSeconds,
        propagationPolicy) as the body."""
        return await self.json(what, "DELETE", path, body=options or None)
