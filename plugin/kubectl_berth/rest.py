"""Synchronous requests by path for the ``kubectl-berth`` plugin, over the ``kubernetes``
client's ``ApiClient`` (the caller's kubeconfig, ``--context``, exec plugins, TLS, urllib3).

The operator does not use this module (it sends its requests over ``k8s.connection``'s aiohttp
session); the plugin is a short-lived CLI on the user's machine, where the client's kubeconfig
loader is worth its import. Errors read as everywhere in ``berth_operator.k8s``
(:func:`berth_operator.k8s.calls.error_for`, the one translation of API errors):
:func:`call_sync` translates the client's ``ApiException`` and its transport errors. Uses
``ApiClient.param_serialize``/``call_api`` (kubernetes ≥ 37).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, TypeVar

from berth_operator.k8s import calls
from berth_operator.k8s.paths import JSON, JSON_PATCH, MERGE_PATCH, query_value
from kubernetes.client.exceptions import ApiException
from urllib3.exceptions import HTTPError

T = TypeVar("T")


def call_sync(
    what: str, fn: Callable[..., T], *args: Any, secret: bool = False, **kwargs: Any
) -> T:
    """``fn(*args, **kwargs)`` with its errors translated: ``ApiException`` by
    ``calls.error_for``, urllib3's ``HTTPError`` family (e.g. ``MaxRetryError`` after a refused
    connection) and ``OSError`` by ``calls.unreachable``. ``secret=True`` drops the chain."""
    try:
        return fn(*args, **kwargs)
    except ApiException as exc:
        error = calls.error_for(what, int(exc.status or 0), exc.body, str(exc.reason or ""))
        if secret:
            raise error from None
        raise error from exc
    except (HTTPError, OSError) as exc:  # urllib3: refused, reset, timed out, TLS
        if secret:
            raise calls.unreachable(what, exc) from None
        raise calls.unreachable(what, exc) from exc


class Rest:
    """Synchronous requests by path; every method raises ``ApiException`` for a non-2xx answer
    and urllib3's ``HTTPError`` (e.g. ``MaxRetryError``) or ``OSError`` when the apiserver cannot
    be reached — :func:`call_sync` translates all of them."""

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
        params = [(k, query_value(v)) for k, v in (query or {}).items()]
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
