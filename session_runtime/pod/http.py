"""The session pod's HTTP API (docs/architecture.md §5): routes, token check, request bodies.

Owned by the ``berth-session`` entrypoint (``session_runtime.server``), which serves
:func:`make_app` for its :class:`~session_runtime.server.SessionPod` (anything with the
:class:`PodApi` surface).

Routes: ``GET /healthz`` ``/readyz`` ``/metrics`` (no token), ``GET /v1/state``,
``POST /v1/passivate {reason, deadlineMs}``, ``POST /v1/messages {prompt, messageId?, peer?}``,
``GET /v1/messages/{id}`` (the run a message started: status and result) and
``GET /v1/messages/{id}/events`` (``{"runs": {runId: [event, ...]}}``, the retained events of
those runs) and ``GET /v1/outcome?waitSeconds=N`` (token in ``Authorization: Bearer`` or
``X-Berth-Token``; 401 without, 403 when wrong).

``GET /v1/outcome`` answers 200 with the termination message (the JSON the process writes to its
termination log, docs/architecture.md §8) once the process is done with its session: the run has
ended, every task is cancelled and awaited and the session and its store are closed, so nothing it
does afterwards touches the store. Until then it waits up to ``waitSeconds`` (0-300, default 0) and
answers 204. The operator asks it after a passivation request, and places the replacement on the
answer instead of waiting for the kubelet to report the container's end (its relist and status
write, seconds on a busy node).
"""

from __future__ import annotations

import asyncio
import hmac
import re
from collections.abc import Mapping
from typing import Any, Protocol, TypeVar, cast

from aiohttp import web
from prometheus_client import Counter
from pydantic import BaseModel, ValidationError

from berth_contract.state import (
    API_TOKEN_HEADER,
    MESSAGE_ID_PATTERN,
    MessageRequest,
    PassivateRequest,
    Passivation,
    PeerInvocation,
    Phase,
    message_body,
    outcome_of,
)
from berth_telemetry.tracing import remote_parent
from session_runtime.metrics import CONTENT_TYPE, SessionMetrics

BodyT = TypeVar("BodyT", bound=BaseModel)
MESSAGE_ID_RE = re.compile(MESSAGE_ID_PATTERN)
MAX_OUTCOME_WAIT_SECONDS = 300
"""The longest ``waitSeconds`` of ``GET /v1/outcome``."""


class PodApi(Protocol):
    """What the HTTP API needs of the pod."""

    metrics: SessionMetrics
    phase: Phase

    @property
    def built(self) -> bool:
        """Whether the session exists (``/readyz`` answers 200 only then)."""
        ...

    def run_events(self, run_id: str) -> list[dict[str, Any]]:
        """The retained events of run ``run_id`` ([] if none)."""
        ...

    def state_json(self) -> dict[str, Any]:
        """The ``GET /v1/state`` body."""
        ...

    def request_passivation(self, reason: str, deadline_ms: int | None) -> Passivation:
        """Accept a passivation request."""
        ...

    async def post_message(
        self, prompt: str, message_id: str | None = None, peer: PeerInvocation | None = None
    ) -> tuple[int, dict[str, Any]]:
        """(HTTP status, body) of ``POST /v1/messages``."""
        ...

    def message_runs(self, message_id: str) -> list[dict[str, Any]]:
        """The runs message ``message_id`` started, oldest first."""
        ...


#: Paths served without the API token (probes and scraping carry no session data).
OPEN_PATHS = frozenset({"/healthz", "/readyz", "/metrics"})
#: Header accepted besides ``Authorization: Bearer`` (kept by the apiserver's pod proxy).


def presented_token(request: web.Request) -> bytes | None:
    """The token a request carries (``Authorization: Bearer`` first, then ``X-Berth-Token``),
    or None when it carries none."""
    auth = request.headers.get("Authorization", "")
    scheme, _, value = auth.partition(" ")
    if scheme.lower() == "bearer" and value.strip():
        return value.strip().encode()
    alt = request.headers.get(API_TOKEN_HEADER, "").strip()
    return alt.encode() if alt else None


def auth_middleware(token: bytes, refused: Counter) -> Any:
    """aiohttp middleware: 401 without a token, 403 with a wrong one (``hmac.compare_digest``),
    except on :data:`OPEN_PATHS`. ``refused`` counts refusals by reason. An authenticated
    request's W3C ``traceparent`` (the front door's) is the current context of its handler."""

    @web.middleware
    async def check(request: web.Request, handler: Any) -> web.StreamResponse:
        if request.path in OPEN_PATHS:
            return cast(web.StreamResponse, await handler(request))
        given = presented_token(request)
        if given is None:
            refused.labels(reason="missing").inc()
            return web.json_response(
                {"error": "unauthenticated"},
                status=401,
                headers={"WWW-Authenticate": 'Bearer realm="berth-session"'},
            )
        if not hmac.compare_digest(given, token):
            refused.labels(reason="wrong").inc()
            return web.json_response({"error": "forbidden"}, status=403)
        with remote_parent(request.headers):  # a run a message starts: the caller's child
            return cast(web.StreamResponse, await handler(request))

    return check


def _json(status: int, body: Mapping[str, Any]) -> web.Response:
    return web.json_response(dict(body), status=status)


async def _body(request: web.Request, model: type[BodyT]) -> BodyT | web.Response:
    """Parse and validate a JSON body, or the 400 answer saying what is wrong with it."""
    try:
        return model.model_validate(await request.json())
    except ValidationError as exc:
        detail = "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors())
    except ValueError:
        detail = "body is not JSON"
    return _json(400, {"error": "bad_request", "detail": detail})


def make_app(  # noqa: C901, PLR0915
    pod: PodApi, token: bytes, outcome: asyncio.Future[str | None] | None = None
) -> web.Application:
    """The pod API (routes in the module docstring), guarded by ``token`` (non-empty bytes).
    ``outcome``: resolved with the rendered termination message once the process is done with
    its session, or with None when it ends without saying so (``GET /v1/outcome`` answers 204
    then, and always without ``outcome``). Raises ValueError for an empty token."""
    if not token:
        raise ValueError("the session API needs a non-empty token")
    refused = Counter(
        "berth_session_api_refused_total",
        "Requests to the session API refused for a missing (401) or wrong (403) token.",
        ["reason"],
        registry=pod.metrics.registry,
    )

    async def healthz(_: web.Request) -> web.Response:
        return _json(200, {"ok": True})

    async def readyz(_: web.Request) -> web.Response:
        ready = pod.built and outcome_of(pod.phase) is None
        return _json(200 if ready else 503, {"ready": ready, "state": pod.phase})

    async def metrics(_: web.Request) -> web.Response:
        return web.Response(body=pod.metrics.render(), headers={"Content-Type": CONTENT_TYPE})

    async def state(_: web.Request) -> web.Response:
        return _json(200, pod.state_json())

    async def passivate(request: web.Request) -> web.Response:
        body = await _body(request, PassivateRequest)
        if isinstance(body, web.Response):
            return body
        if pod.phase in ("completed", "failed", "fenced"):
            return _json(409, {"error": "finished", "state": pod.phase})
        p = pod.request_passivation(body.reason, body.deadline_ms)
        return _json(202, {"accepted": True, "state": pod.phase, "passivation": p.to_json()})

    async def messages(request: web.Request) -> web.Response:
        body = await _body(request, MessageRequest)
        if isinstance(body, web.Response):
            return body
        status, answer = await pod.post_message(body.prompt, body.message_id, body.peer)
        return _json(status, answer)

    def _message_runs(request: web.Request) -> tuple[str, list[dict[str, Any]]] | web.Response:
        """(message id, the runs it started), or the 400/404 answer."""
        mid = request.match_info["message_id"]
        if not MESSAGE_ID_RE.fullmatch(mid):
            return _json(400, {"error": "bad_request", "detail": "malformed message id"})
        runs = pod.message_runs(mid)
        if not runs:
            return _json(404, {"error": "unknown_message", "messageId": mid})
        return mid, runs

    async def message(request: web.Request) -> web.Response:
        found = _message_runs(request)
        if isinstance(found, web.Response):
            return found
        return _json(200, message_body(*found))

    async def message_events(request: web.Request) -> web.Response:
        found = _message_runs(request)
        if isinstance(found, web.Response):
            return found
        mid, runs = found
        events = {str(r["id"]): pod.run_events(str(r["id"])) for r in runs}
        return _json(200, {"messageId": mid, "runs": events})

    async def outcome_of_session(request: web.Request) -> web.Response:
        raw = request.query.get("waitSeconds", "0")
        try:
            wait = float(raw)
        except ValueError:
            wait = -1.0
        if not 0 <= wait <= MAX_OUTCOME_WAIT_SECONDS:
            detail = f"waitSeconds must be a number from 0 to {MAX_OUTCOME_WAIT_SECONDS}"
            return _json(400, {"error": "bad_request", "detail": detail})
        if outcome is None:
            return web.Response(status=204)
        try:
            text = await asyncio.wait_for(asyncio.shield(outcome), wait)
        except TimeoutError:
            text = None
        if text is None:
            return web.Response(status=204)
        return web.Response(text=text, content_type="application/json")

    app = web.Application(middlewares=[auth_middleware(token, refused)])
    app.router.add_get("/healthz", healthz)
    app.router.add_get("/readyz", readyz)
    app.router.add_get("/metrics", metrics)
    app.router.add_get("/v1/state", state)
    app.router.add_post("/v1/passivate", passivate)
    app.router.add_post("/v1/messages", messages)
    app.router.add_get("/v1/messages/{message_id}", message)
    app.router.add_get("/v1/messages/{message_id}/events", message_events)
    app.router.add_get("/v1/outcome", outcome_of_session)
    return app
