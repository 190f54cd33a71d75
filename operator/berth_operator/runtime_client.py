"""HTTP client of the session pod API (docs/architecture.md §5): ``GET /v1/state``,
``POST /v1/passivate`` and ``GET /v1/outcome`` (and a warm pod's ``POST /v1/adopt``) on
``http://<status.podIP>:8080`` (no Services or DNS needed).

Every call carries ``Authorization: Bearer <token>``, the session's API token from its
``<name>-berth`` Secret (docs/architecture.md §11); the token is never part of an error
message. A ``/v1/state`` body larger than ``MAX_STATE_BODY_BYTES`` (1 MiB) is refused after
reading at most that much, so a hostile or broken pod cannot make the operator buffer an
unbounded answer.

Errors: ``RuntimeUnreachable`` for connection failures, timeouts, non-2xx answers (401/403 too:
``status`` on the exception) and bodies that are too large or not a JSON object. Called by
``berth_operator.handlers``.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import aiohttp
from pydantic import ValidationError

from berth_contract.state import HTTP_PORT, PassivateRequest, RuntimeState
from berth_operator.api.constants import MAX_STATE_BODY_BYTES
from berth_operator.errors import RuntimeUnauthorized, RuntimeUnreachable

MAX_OUTCOME_BYTES = 4096
"""The largest ``GET /v1/outcome`` body read: a termination message (the kubelet's limit)."""

KEEPALIVE_SECONDS = 2.0
"""How long an idle connection to a session pod is kept for the next request. Shorter than the
state refresh interval (10 s by default), so the operator does not hold one open connection per
session between refreshes (a thousand sessions were a thousand idle sockets); requests a second
apart (a starting pod, a passivation) still reuse it."""


class RuntimeClient:
    """One aiohttp session shared by all requests of the operator; idle connections to a pod
    close after ``KEEPALIVE_SECONDS``."""

    def __init__(self, timeout_seconds: float, session_port: int = HTTP_PORT) -> None:
        """``session_port``: the port of the session pod API (8080 in every pod; a test that
        runs ``berth-session`` as a local process gives its own)."""
        self._timeout = aiohttp.ClientTimeout(total=timeout_seconds)
        self._session: aiohttp.ClientSession | None = None
        self.session_port = session_port

    def _http(self) -> aiohttp.ClientSession:
        if self._session is None or self._session.closed:
            self._session = aiohttp.ClientSession(
                timeout=self._timeout,
                connector=aiohttp.TCPConnector(keepalive_timeout=KEEPALIVE_SECONDS),
            )
        return self._session

    @staticmethod
    def base_url(pod_ip: str, port: int = HTTP_PORT) -> str:
        """``http://<ip>:<port>`` (IPv6 addresses bracketed)."""
        host = f"[{pod_ip}]" if ":" in pod_ip else pod_ip
        return f"http://{host}:{port}"

    @staticmethod
    def auth_headers(token: str | None) -> dict[str, str]:
        """``Authorization: Bearer <token>`` (no header without a token: the pod answers 401)."""
        return {"Authorization": f"Bearer {token}"} if token else {}

    async def state(
        self, pod_ip: str, token: str | None = None, *, limit: int = MAX_STATE_BODY_BYTES
    ) -> RuntimeState:
        """GET /v1/state → RuntimeState; bodies over ``limit`` bytes are refused.
        Raises RuntimeUnreachable."""
        url = self.base_url(pod_ip) + "/v1/state"
        try:
            async with self._http().get(url, headers=self.auth_headers(token)) as resp:
                if resp.status in (401, 403):
                    raise RuntimeUnauthorized(f"GET {url}: HTTP {resp.status}")
                if resp.status != 200:
                    raise RuntimeUnreachable(f"GET {url}: HTTP {resp.status}")
                if resp.content_length is not None and resp.content_length > limit:
                    raise RuntimeUnreachable(
                        f"GET {url}: body of {resp.content_length} bytes exceeds {limit}"
                    )
                raw = bytearray()
                while len(raw) <= limit:
                    chunk = await resp.content.read(limit + 1 - len(raw))
                    if not chunk:
                        break
                    raw += chunk
                if len(raw) > limit:
                    raise RuntimeUnreachable(f"GET {url}: body exceeds {limit} bytes")
                data: Any = json.loads(raw)
        except (aiohttp.ClientError, TimeoutError, ValueError) as exc:
            raise RuntimeUnreachable(f"GET {url}: {exc or type(exc).__name__}") from exc
        if not isinstance(data, dict):
            raise RuntimeUnreachable(f"GET {url}: body is not a JSON object")
        try:
            return RuntimeState.model_validate(data)
        except ValidationError as exc:
            raise RuntimeUnreachable(f"GET {url}: unexpected body: {exc}") from exc

    async def passivate(
        self, pod_ip: str, reason: str, deadline_ms: int, token: str | None = None
    ) -> None:
        """POST /v1/passivate {reason, deadlineMs} (202 expected; idempotent)."""
        url = self.base_url(pod_ip) + "/v1/passivate"
        try:
            async with self._http().post(
                url,
                json=PassivateRequest(reason=reason, deadline_ms=deadline_ms).wire(),
                headers=self.auth_headers(token),
            ) as resp:
                if resp.status in (401, 403):
                    raise RuntimeUnauthorized(f"POST {url}: HTTP {resp.status}")
                if resp.status >= 300:
                    raise RuntimeUnreachable(f"POST {url}: HTTP {resp.status}")
        except (aiohttp.ClientError, TimeoutError) as exc:
            raise RuntimeUnreachable(f"POST {url}: {exc or type(exc).__name__}") from exc

    async def outcome(self, pod_ip: str, token: str | None, wait_seconds: int) -> str | None:
        """GET /v1/outcome?waitSeconds=N: the session process's termination message (its JSON
        text, as it writes it to its termination log) once it is done with its session; None
        when it was not within ``wait_seconds`` (204). A body over ``MAX_OUTCOME_BYTES`` is
        refused. Raises RuntimeUnauthorized (401/403), RuntimeUnreachable (anything else)."""
        url = f"{self.base_url(pod_ip)}/v1/outcome?waitSeconds={wait_seconds}"
        timeout = aiohttp.ClientTimeout(total=wait_seconds + (self._timeout.total or 0))
        try:
            async with self._http().get(
                url, headers=self.auth_headers(token), timeout=timeout
            ) as resp:
                if resp.status in (401, 403):
                    raise RuntimeUnauthorized(f"GET {url}: HTTP {resp.status}")
                if resp.status == 204:
                    return None
                if resp.status != 200:
                    raise RuntimeUnreachable(f"GET {url}: HTTP {resp.status}")
                raw = await resp.content.read(MAX_OUTCOME_BYTES + 1)
        except (aiohttp.ClientError, TimeoutError) as exc:
            raise RuntimeUnreachable(f"GET {url}: {exc or type(exc).__name__}") from exc
        if len(raw) > MAX_OUTCOME_BYTES:
            raise RuntimeUnreachable(f"GET {url}: body exceeds {MAX_OUTCOME_BYTES} bytes")
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise RuntimeUnreachable(f"GET {url}: body is not UTF-8") from exc

    async def adopt(self, pod_ip: str, body: dict[str, Any], token: str) -> None:
        """POST /v1/adopt to a warm pod with its pool's adoption ``token`` (202 expected;
        idempotent for the same session and epoch). Raises RuntimeUnauthorized (401/403),
        RuntimeUnreachable (anything else; the body carries secrets and is never shown)."""
        url = self.base_url(pod_ip) + "/v1/adopt"
        try:
            async with self._http().post(url, json=body, headers=self.auth_headers(token)) as resp:
                if resp.status in (401, 403):
                    raise RuntimeUnauthorized(f"POST {url}: HTTP {resp.status}")
                if resp.status != 202:
                    detail = (await resp.text())[:300]
                    raise RuntimeUnreachable(f"POST {url}: HTTP {resp.status} {detail}")
        except (aiohttp.ClientError, TimeoutError) as exc:
            raise RuntimeUnreachable(f"POST {url}: {exc or type(exc).__name__}") from None

    async def call(
        self,
        method: str,
        pod_ip: str,
        path: str,
        token: str | None,
        body: dict[str, Any] | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> tuple[int, dict[str, Any]]:
        """One request of the session pod API (messages: ``POST /v1/messages``, ``GET
        /v1/messages/{id}[/events]``): (HTTP status, JSON object body; {} when the body is not
        one). Raises RuntimeUnreachable for connection failures and timeouts only; statuses are
        the caller's to judge. Bodies over MAX_STATE_BODY_BYTES are refused. ``headers`` go with
        the request's (a message's W3C ``traceparent``)."""
        url = self.base_url(pod_ip, self.session_port) + path
        sent = {**self.auth_headers(token), **(headers or {})}
        try:
            async with self._http().request(method, url, json=body, headers=sent) as resp:
                raw = await resp.content.read(MAX_STATE_BODY_BYTES + 1)
                if len(raw) > MAX_STATE_BODY_BYTES:
                    raise RuntimeUnreachable(f"{method} {url}: body too large")
                try:
                    data: Any = json.loads(raw) if raw else {}
                except ValueError:
                    data = {}
                return resp.status, data if isinstance(data, dict) else {}
        except (aiohttp.ClientError, TimeoutError) as exc:
            raise RuntimeUnreachable(f"{method} {url}: {exc or type(exc).__name__}") from None

    async def close(self) -> None:
        """Close the connection pool."""
        if self._session is not None:
            await self._session.close()
