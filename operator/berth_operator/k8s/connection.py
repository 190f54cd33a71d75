"""The operator's connection to the Kubernetes API: one aiohttp session for its own requests.

:class:`ApiSession` sends the operator's requests (``k8s.rest.AsyncRest``) over aiohttp on the
event loop — no worker threads. Its credentials come from a ``login`` callable returning
:class:`Credentials` (kopf's ``ConnectionInfo``: ``handlers.login.credentials`` finds them the way
kopf's default login does, so in a pod it is the service account and no client library is
needed). A 401 answer logs in again (a projected service-account token is rotated on disk by the
kubelet) and sends the request once more.

One connection pool to the apiserver: the session's ``TCPConnector`` (at most ``limit``
connections in use) also carries kopf's own session (``handlers.login`` asks
:meth:`ApiSession.client_session` for it): kopf's watch streams and requests and Berth's requests
share one bound. Each TLS connection holds asyncio's 256 KiB read buffer, so two pools
(kopf's and Berth's) cost a quarter MiB for every connection the second one opened
(bench/README.md). Sessions and the pool are opened on first use (they belong to a running loop).
"""

from __future__ import annotations

import json
import ssl
from collections.abc import Callable, Mapping
from typing import Any, Protocol

import aiohttp
from yarl import URL

from berth_operator.errors import KubeError
from berth_operator.k8s.paths import JSON as JSON
from berth_operator.k8s.paths import query_value as query_value

REQUEST_TIMEOUT_SECONDS = 60.0
"""Whole-request bound: the apiserver's own default request timeout (``--request-timeout``),
so a call never waits longer than the server would work on it."""


class Credentials(Protocol):
    """What a session needs of its credentials: the shape of ``kopf.ConnectionInfo``."""

    @property
    def server(self) -> str | None:
        """The API server's URL."""
        ...

    @property
    def proxy_url(self) -> str | None:
        """An HTTP proxy to go through, if any."""
        ...

    @property
    def trust_env(self) -> bool:
        """Whether aiohttp reads proxy settings from the environment."""
        ...

    def as_ssl_context(self) -> ssl.SSLContext:
        """TLS: the cluster's CA (or none with ``insecure``), the client certificate."""
        ...

    def as_http_headers(self) -> dict[str, str]:
        """``Authorization`` (bearer token) and the like."""
        ...

    def as_aiohttp_basic_auth(self) -> aiohttp.BasicAuth | None:
        """Username and password, when the kubeconfig uses them."""
        ...


class Unreachable(Exception):
    """The request got no HTTP answer: refused, reset, timed out, TLS failure. ``str`` says why."""


class ApiSession:
    """Requests to the apiserver over one aiohttp session (module docstring).

    ``login`` returns the credentials; it is called on first use and after a 401 (its errors,
    e.g. ``kopf.LoginError``, become ``KubeError``). ``limit`` bounds the connections in use by
    every session over the pool, kopf's included (requests beyond it wait their turn).
    """

    def __init__(self, login: Callable[[], Credentials], *, limit: int = 32) -> None:
        self._login = login
        self._limit = limit
        self._server: URL | None = None
        self._session: aiohttp.ClientSession | None = None
        self._retired: list[aiohttp.ClientSession] = []
        self._pool: aiohttp.TCPConnector | None = None

    def client_session(self, info: Credentials) -> aiohttp.ClientSession:
        """An aiohttp session for ``info`` (its bearer token or basic auth, proxy) over the shared
        pool, which does not close with it. The pool's TLS settings are those of the first
        credentials (the cluster's CA and client certificate; a new token keeps them); call from
        a running event loop."""
        if self._pool is None or self._pool.closed:
            self._pool = aiohttp.TCPConnector(limit=self._limit, ssl=info.as_ssl_context())
        return aiohttp.ClientSession(
            connector=self._pool,
            connector_owner=False,
            headers=info.as_http_headers(),
            auth=info.as_aiohttp_basic_auth(),
            proxy=info.proxy_url,
            trust_env=info.trust_env,
        )

    def _current(self) -> tuple[URL, aiohttp.ClientSession]:
        if self._session is None or self._server is None:
            try:
                info = self._login()
            except Exception as exc:  # the login callable's own errors (kopf.LoginError, I/O)
                raise KubeError(f"cannot log in to the Kubernetes API: {exc}") from exc
            if not info.server:
                raise KubeError("the Kubernetes credentials name no API server")
            self._server = URL(info.server.rstrip("/"))
            self._session = self.client_session(info)
        return self._server, self._session

    def _log_in_again(self, stale: aiohttp.ClientSession) -> None:
        if self._session is stale:
            self._retired.append(stale)
            self._session = None

    async def request(
        self,
        method: str,
        path: str,
        *,
        query: Mapping[str, str | int | bool] | None = None,
        body: Any = None,
        content_type: str = JSON,
    ) -> tuple[int, bytes]:
        """Send ``method path?query`` (``path`` already percent-encoded, as ``k8s.rest`` builds
        it) with ``body`` as JSON; return (HTTP status, answer body) whatever the status.
        Raises ``Unreachable`` when no answer came, ``KubeError`` when ``login`` fails."""
        data = None if body is None else json.dumps(body).encode()
        sent = {"Accept": JSON}
        if data is not None:
            sent["Content-Type"] = content_type
        params = {k: query_value(v) for k, v in (query or {}).items()}
        bound = aiohttp.ClientTimeout(total=REQUEST_TIMEOUT_SECONDS)
        for attempt in (1, 2):
            server, session = self._current()
            url = URL(f"{server}{path}", encoded=True)
            if params:
                url = url.update_query(params)
            try:
                async with session.request(
                    method, url, data=data, headers=sent, timeout=bound
                ) as response:
                    status, answer = response.status, await response.read()
            except (TimeoutError, aiohttp.ClientError, OSError) as exc:
                raise Unreachable(str(exc) or type(exc).__name__) from exc
            if status == 401 and attempt == 1:
                self._log_in_again(session)
                continue
            return status, answer
        raise AssertionError("unreachable: the second attempt returns")

    async def close(self) -> None:
        """Close the session, any replaced after a 401, and the pool (kopf's session too)."""
        sessions = [*self._retired, *([self._session] if self._session else [])]
        self._session, self._retired = None, []
        for session in sessions:
            await session.close()
        if self._pool is not None:
            await self._pool.close()
