"""The one place where ``kubernetes`` client errors become :mod:`berth_operator.errors`.

Every module of ``berth_operator.k8s`` makes its API calls through :func:`call_sync` (the
short-lived plugin) or :func:`call` (the operator: the synchronous client in a worker thread), so
the rest of the operator never sees ``ApiException`` and every error reads the same way:

- 404 → ``NotFound``; 409 with reason ``AlreadyExists`` → ``AlreadyExists``; other 409 →
  ``Conflict``; any other status → ``KubeError`` (``status`` and ``reason`` set from the
  apiserver's ``Status`` body, as in the Kubernetes API conventions);
- connection failures (urllib3's ``HTTPError`` family, e.g. ``MaxRetryError`` after a refused
  connection, and ``OSError``) → ``KubeError`` "cannot reach the Kubernetes API".

``secret=True`` drops the exception chain: an apiserver answer about a Secret may echo its data.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from kubernetes.client.exceptions import ApiException
from tenacity import AsyncRetrying, retry_if_exception_type, stop_after_delay, wait_exponential
from urllib3.exceptions import HTTPError

from berth_operator.errors import AlreadyExists, Conflict, KubeError, NotFound
from berth_operator.metrics import API_REQUEST_SECONDS, API_REQUESTS

T = TypeVar("T")


def translate(exc: ApiException, what: str) -> KubeError:
    """The ``berth_operator.errors`` exception for ``exc``; ``what`` names the call
    (e.g. ``"create pod ns/name"``) and starts the message."""
    status = int(exc.status or 0)
    reason = ""
    message = str(exc.reason or "")
    try:
        body = json.loads(exc.body or "{}")
        reason = str(body.get("reason") or "")
        message = str(body.get("message") or message)
    except (ValueError, TypeError, AttributeError):
        pass
    text = f"{what}: {status} {reason} {message}".strip()
    if status == 404:
        return NotFound(text, status=status, reason=reason)
    if status == 409 and reason == "AlreadyExists":
        return AlreadyExists(text, status=status, reason=reason)
    if status == 409:
        return Conflict(text, status=status, reason=reason)
    return KubeError(text, status=status, reason=reason)


def call_sync(
    what: str, fn: Callable[..., T], *args: Any, secret: bool = False, **kwargs: Any
) -> T:
    """``fn(*args, **kwargs)`` with its errors translated (module docstring)."""
    try:
        return fn(*args, **kwargs)
    except ApiException as exc:
        if secret:
            raise translate(exc, what) from None
        raise translate(exc, what) from exc
    except (HTTPError, OSError) as exc:  # urllib3: refused, reset, timed out, TLS
        error = KubeError(f"{what}: cannot reach the Kubernetes API: {exc}")
        if secret:
            raise error from None
        raise error from exc


def request_kind(what: str) -> tuple[str, str]:
    """(verb, resource) of a call named ``what`` ("<verb> <resource> ...", as every call of
    ``berth_operator.k8s`` is named; "update status of <resource> ..." → the status
    subresource), with the resource in its plural API form: ``("create", "pods")``,
    ``("update", "agentsessions/status")``. Label values for metrics: never object names."""
    words = what.split()
    if len(words) < 2:
        return (words[0] if words else "unknown"), "unknown"
    verb, resource = words[0], words[1]
    if resource == "status" and len(words) > 3 and words[2] == "of":
        return verb, f"{_plural(words[3])}/status"
    if resource == "log" and len(words) > 3 and words[2] == "of":
        return verb, f"{_plural(words[3])}/log"
    if len(words) > 2 and words[-1] == "status" and resource.isalpha():
        return verb, f"{_plural(resource)}/status"
    return verb, _plural(resource)


def _plural(kind: str) -> str:
    return kind if kind.endswith("s") else f"{kind}s"


async def call(
    what: str, fn: Callable[..., T], *args: Any, secret: bool = False, **kwargs: Any
) -> T:
    """:func:`call_sync` in a worker thread (the default executor, sized like the pool),
    counted in ``berth_operator_api_requests_total`` and timed (thread wait included) in
    ``berth_operator_api_request_duration_seconds``."""

    def run() -> T:
        return call_sync(what, fn, *args, secret=secret, **kwargs)

    verb, resource = request_kind(what)
    API_REQUESTS.labels(verb=verb, resource=resource).inc()
    started = time.perf_counter()
    try:
        return await asyncio.to_thread(run)
    finally:
        API_REQUEST_SECONDS.labels(verb=verb).observe(time.perf_counter() - started)


async def with_backoff(fn: Callable[[], Awaitable[T]], attempt_for_seconds: float) -> T:
    """``await fn()``, tried again with exponential backoff (0.5 s doubling, at most 5 s apart;
    tenacity) while it raises a :class:`KubeError`, for ``attempt_for_seconds``; then the last
    error is raised."""
    async for attempt in AsyncRetrying(
        retry=retry_if_exception_type(KubeError),
        wait=wait_exponential(multiplier=0.5, max=5),
        stop=stop_after_delay(attempt_for_seconds),
        reraise=True,
    ):
        with attempt:
            return await fn()
    raise AssertionError("unreachable: tenacity re-raises the last error")


def decode_object(what: str, data: bytes | str | None) -> dict[str, Any]:
    """The JSON object of a raw answer (``rest.Rest.request``). Raises ``KubeError`` when
    the answer is not a JSON object."""
    try:
        out = json.loads(data or b"{}")
    except ValueError as exc:
        raise KubeError(f"{what}: answer is not JSON: {exc}") from exc
    if not isinstance(out, dict):
        raise KubeError(f"{what}: unexpected (non-object) answer from the API")
    return out
