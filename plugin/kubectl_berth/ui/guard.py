"""Who may talk to the local web view, and which requests may change anything.

The server listens on the loopback only, but any page the user's browser opens may send it
requests. So (OWASP's cross-site request forgery defences, and a DNS-rebinding guard):

- every request must name the server itself in ``Host`` (``127.0.0.1:PORT`` or
  ``localhost:PORT``): a rebound host name is refused with 421;
- every POST must come from the view's own origin: ``Origin`` (else ``Referer``) must be the
  server's, and ``Sec-Fetch-Site`` when the browser sends it must be ``same-origin``;
- every POST must carry the form field ``csrf`` equal to this process's random token (written
  into the view's own forms, readable by no other origin); compared in constant time.

A refused POST is answered 403 with the reason and changes nothing.
"""

from __future__ import annotations

import hmac
import secrets
from collections.abc import Awaitable, Callable
from urllib.parse import urlsplit

from aiohttp import web
from aiohttp.typedefs import Middleware

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


class Guard:
    """The Host, Origin and token checks of a server on ``port``."""

    def __init__(self, port: int, token: str | None = None) -> None:
        self.port = port
        self.token = token or secrets.token_urlsafe(32)
        self.hosts = {f"127.0.0.1:{port}", f"localhost:{port}"}
        self.origins = {f"http://{h}" for h in self.hosts}

    def host_ok(self, request: web.Request) -> bool:
        """Whether ``Host`` names this server."""
        return request.headers.get("Host", "") in self.hosts

    def post_refusal(self, request: web.Request, form_token: str) -> str:
        """Why a POST is refused (``""`` when it is not): origin, fetch site or token."""
        origin = request.headers.get("Origin")
        if origin is None:
            referer = request.headers.get("Referer", "")
            parts = urlsplit(referer)
            origin = f"{parts.scheme}://{parts.netloc}" if referer else ""
        if origin not in self.origins:
            return f"cross-site request refused (origin {origin or 'not given'})"
        site = request.headers.get("Sec-Fetch-Site")
        if site is not None and site not in ("same-origin", "none"):
            return f"cross-site request refused (Sec-Fetch-Site {site})"
        if not hmac.compare_digest(form_token.encode(), self.token.encode()):
            return "cross-site request refused (missing or wrong form token)"
        return ""

    def middleware(self) -> Middleware:
        """An aiohttp middleware refusing requests whose ``Host`` is not this server (421)."""

        @web.middleware
        async def check_host(request: web.Request, handler: Handler) -> web.StreamResponse:
            if not self.host_ok(request):
                return web.Response(status=421, text="misdirected request: unknown Host\n")
            response = await handler(request)
            response.headers.setdefault("X-Frame-Options", "DENY")
            response.headers.setdefault("Referrer-Policy", "same-origin")
            response.headers.setdefault(
                "Content-Security-Policy",
                "default-src 'self'; style-src 'self' 'unsafe-inline'; img-src 'self' data:; "
                "frame-ancestors 'none'; form-action 'self'",
            )
            return response

        return check_host
