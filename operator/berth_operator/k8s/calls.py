"""The one place where Kubernetes API error answers become :mod:`berth_operator.errors`.

Every call of ``berth_operator.k8s`` reads its errors through :func:`error_for` (the
operator's ``rest.AsyncRest``; the plugin's synchronous client through its own thin wrapper),
so the rest of the operator sees one set of errors and every one reads the same way:

- 404 → ``NotFound``; 409 with reason ``AlreadyExists`` → ``AlreadyExists``; other 409 →
  ``Conflict``; any other status → ``KubeError`` (``status`` and ``reason`` set from the
  apiserver's ``Status`` body, as in the Kubernetes API conventions);
- no answer at all (refused, reset, timed out, TLS) → ``KubeError`` "cannot reach the
  Kubernetes API" (:func:`unreachable`).

Callers raise them ``from None`` for Secret calls: an apiserver answer about a Secret may echo
its data.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from berth_operator.errors import AlreadyExists, Conflict, KubeError, NotFound

T = TypeVar("T")


def error_for(what: str, status: int, body: bytes | str | None, phrase: str = "") -> KubeError:
    """The ``berth_operator.errors`` exception for an answer of HTTP ``status`` with ``body``
    (the apiserver's ``Status`` object, when it sent one; its ``reason`` and ``message`` are
    used, else ``phrase``, the HTTP reason phrase). ``what`` names the call (e.g.
    ``"create pod ns/name"``) and starts the message."""
    reason = ""
    message = phrase
    try:
        decoded = json.loads(body or b"{}")
        reason = str(decoded.get("reason") or "")
        message = str(decoded.get("message") or message)
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


def unreachable(what: str, why: object) -> KubeError:
    """The error of a call that got no answer (``why``: the transport's exception or text)."""
    return KubeError(f"{what}: cannot reach the Kubernetes API: {why}")


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


async def with_backoff(fn: Callable[[], Awaitable[T]], attempt_for_seconds: float) -> T:
    """``await fn()``, tried again with exponential backoff (0.5 s doubling, at most 5 s apart;
    tenacity) while it raises a :class:`KubeError`, for ``attempt_for_seconds``; then the last
    error is raised.

    tenacity is imported here, not at the top: the kubectl plugin reads its errors through this
    module (:func:`error_for`) and installs without the operator's dependencies."""
    from tenacity import (
        AsyncRetrying,
        retry_if_exception_type,
        stop_after_delay,
        wait_exponential,
    )

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
