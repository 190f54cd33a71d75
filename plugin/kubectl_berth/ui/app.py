"""The web view's routes: pages rendered on the server (Jinja2 templates of this package) and kept
live by server-sent events that carry re-rendered page parts.

Routes::

    GET  /                               -> /sessions
    GET  /sessions?namespace=&tenant=&phase=     the sessions list
    GET  /sessions/{ns}/{name}           one session: runs, tool calls, tokens, conditions, Events
    GET  /workers/{ns}/{name}            one LaneWorker: backlog, in flight, replicas, sessions
    GET  /live/...                       the same paths' parts as SSE (``text/event-stream``)
    GET  /sessions/{ns}/{name}/{action}  the confirmation page of an action
    POST /sessions/{ns}/{name}/{action}  carry it out (same-origin, with the form token)
    GET  /static/{file}                  the stylesheet and the SSE glue script

An SSE message is ``data: {"id": <element id>, "html": <its new content>}``, sent when that part
changed; the script (static/live.js) swaps it in. Parts are re-read every ``POLL_SECONDS``.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from importlib.resources import files
from typing import Any
from urllib.parse import urlencode

import jinja2
from aiohttp import web
from berth_operator.errors import BerthOperatorError, NotFound

from kubectl_berth.errors import PluginError
from kubectl_berth.ui import pages
from kubectl_berth.ui.guard import Guard
from kubectl_berth.ui.source import ACTIONS, Source

POLL_SECONDS = 0.5
"""How often a live page's parts are re-read (a change shows within about this plus a read)."""
Parts = Callable[[], Awaitable[dict[str, str]]]

SOURCE = web.AppKey("source", Source)
GUARD = web.AppKey("guard", Guard)
TEMPLATES = web.AppKey("templates", jinja2.Environment)


def environment() -> jinja2.Environment:
    """The package's templates, HTML-escaped."""
    return jinja2.Environment(
        loader=jinja2.PackageLoader("kubectl_berth.ui", "templates"),
        autoescape=True,
        undefined=jinja2.StrictUndefined,
    )


def render(request: web.Request, template: str, **context: Any) -> str:
    """``template`` rendered with ``context``, the form token and the view's namespace."""
    env = request.app[TEMPLATES]
    source = request.app[SOURCE]
    return env.get_template(template).render(
        csrf=request.app[GUARD].token, scope=source.namespace or "", **context
    )


def page(request: web.Request, template: str, status: int = 200, **context: Any) -> web.Response:
    """An HTML response of ``template``."""
    return web.Response(
        text=render(request, template, **context), status=status, content_type="text/html"
    )


async def sessions_page(request: web.Request) -> web.Response:
    """The sessions list, filtered by the query's namespace, tenant and phase."""
    ctx = await pages.sessions(request.app[SOURCE], dict(request.query))
    return page(request, "sessions.html", **ctx)


async def session_page(request: web.Request) -> web.Response:
    """One session's page (404 page when it does not exist or may not be read)."""
    ns, name = request.match_info["ns"], request.match_info["name"]
    try:
        ctx = await pages.session(request.app[SOURCE], ns, name)
    except BerthOperatorError as exc:
        return page(request, "error.html", status=_status(exc), message=str(exc))
    ctx["said"] = request.query.get("said", "")
    return page(request, "session.html", **ctx)


async def worker_page(request: web.Request) -> web.Response:
    """One LaneWorker's page."""
    ns, name = request.match_info["ns"], request.match_info["name"]
    try:
        ctx = await pages.worker(request.app[SOURCE], ns, name)
    except BerthOperatorError as exc:
        return page(request, "error.html", status=_status(exc), message=str(exc))
    return page(request, "worker.html", **ctx)


def _status(exc: BerthOperatorError) -> int:
    if isinstance(exc, NotFound):
        return 404
    return int(getattr(exc, "status", 0) or 502)


async def confirm_page(request: web.Request) -> web.Response:
    """The confirmation of an action (the only way to its POST from the page)."""
    ns, name, action = (request.match_info[k] for k in ("ns", "name", "action"))
    if action not in ACTIONS:
        raise web.HTTPNotFound()
    allowed = await request.app[SOURCE].allowed(ns)
    if not allowed.get(action):
        return page(request, "error.html", status=403, message=f"{action} is not allowed for you")
    return page(request, "confirm.html", ns=ns, name=name, action=action)


async def act(request: web.Request) -> web.Response:
    """Carry out a confirmed action: same origin and form token, then RBAC (the user's)."""
    ns, name, action = (request.match_info[k] for k in ("ns", "name", "action"))
    form = await request.post()
    refusal = request.app[GUARD].post_refusal(request, str(form.get("csrf") or ""))
    if refusal:
        return web.Response(status=403, text=refusal + "\n")
    if action not in ACTIONS:
        raise web.HTTPNotFound()
    try:
        said = await request.app[SOURCE].act(ns, name, action, str(form.get("prompt") or ""))
    except (BerthOperatorError, PluginError) as exc:
        return page(request, "error.html", status=400, message=str(exc))
    raise web.HTTPSeeOther(f"/sessions/{ns}/{name}?" + urlencode({"said": said}))


async def stream(request: web.Request, parts: Parts) -> web.StreamResponse:
    """Server-sent events of ``parts()``: each part whose HTML changed since the last send, as
    ``data: {"id", "html"}``, every ``POLL_SECONDS`` until the browser goes away."""
    response = web.StreamResponse(
        headers={"Content-Type": "text/event-stream", "Cache-Control": "no-store"}
    )
    await response.prepare(request)
    sent: dict[str, str] = {}
    try:
        while True:
            try:
                fresh = await parts()
            except BerthOperatorError as exc:
                fresh = {"live-error": f"cannot read the cluster: {exc}"}
            for key, html in fresh.items():
                if sent.get(key) != html:
                    data = json.dumps({"id": key, "html": html, "at": _now_ms()})
                    await response.write(f"data: {data}\n\n".encode())
                    sent[key] = html
            await response.write(b": keep-alive\n\n")
            await asyncio.sleep(POLL_SECONDS)
    except (ConnectionResetError, asyncio.CancelledError):
        pass
    return response


def _now_ms() -> int:
    return int(datetime.now(UTC).timestamp() * 1000)


async def live_sessions(request: web.Request) -> web.StreamResponse:
    """The sessions table, live."""
    query = dict(request.query)

    async def parts() -> dict[str, str]:
        ctx = await pages.sessions(request.app[SOURCE], query)
        return {"sessions": render(request, "_sessions_table.html", **ctx)}

    return await stream(request, parts)


async def live_session(request: web.Request) -> web.StreamResponse:
    """A session's parts, live."""
    ns, name = request.match_info["ns"], request.match_info["name"]

    async def parts() -> dict[str, str]:
        ctx = await pages.session(request.app[SOURCE], ns, name)
        return {p: render(request, f"_{p}.html", **ctx) for p in pages.SESSION_PARTS}

    return await stream(request, parts)


async def live_worker(request: web.Request) -> web.StreamResponse:
    """A LaneWorker's parts, live."""
    ns, name = request.match_info["ns"], request.match_info["name"]

    async def parts() -> dict[str, str]:
        ctx = await pages.worker(request.app[SOURCE], ns, name)
        return {"worker": render(request, "_worker.html", **ctx)}

    return await stream(request, parts)


async def static(request: web.Request) -> web.Response:
    """A file of the package's ``static`` folder (the stylesheet and the SSE glue)."""
    name = request.match_info["file"]
    types = {".css": "text/css", ".js": "text/javascript"}
    kind = next((t for ext, t in types.items() if name.endswith(ext)), None)
    item = files("kubectl_berth.ui").joinpath("static", name)
    if kind is None or "/" in name or not item.is_file():
        raise web.HTTPNotFound()
    return web.Response(text=item.read_text(), content_type=kind)


async def index(_request: web.Request) -> web.Response:
    """The front page is the sessions list."""
    raise web.HTTPFound("/sessions")


def make_app(source: Source, guard: Guard) -> web.Application:
    """The view's aiohttp application over ``source``, guarded by ``guard``."""
    app = web.Application(middlewares=[guard.middleware()])
    app[SOURCE] = source
    app[GUARD] = guard
    app[TEMPLATES] = environment()
    app.router.add_get("/", index)
    app.router.add_get("/sessions", sessions_page)
    app.router.add_get("/sessions/{ns}/{name}", session_page)
    app.router.add_get("/sessions/{ns}/{name}/{action}", confirm_page)
    app.router.add_post("/sessions/{ns}/{name}/{action}", act)
    app.router.add_get("/workers/{ns}/{name}", worker_page)
    app.router.add_get("/live/sessions", live_sessions)
    app.router.add_get("/live/sessions/{ns}/{name}", live_session)
    app.router.add_get("/live/workers/{ns}/{name}", live_worker)
    app.router.add_get("/static/{file}", static)
    return app
