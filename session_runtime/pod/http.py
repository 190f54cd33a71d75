"""The session pod's HTTP API (docs/architecture.md §5): routes, token check, request bodies.

Owned by the ``berth-session`` entrypoint (``session_runtime.server``), which serves
:func:`make_app` for its :class:`~session_runtime.server.SessionPod` (anything with the
:class:`PodApi` surface).

Routes: ``GET /healthz`` ``/readyz`` ``/metrics`` (no token), ``GET /v1/state``,
``POST /v1/passivate {reason, deadlineMs}``, ``POST /v1/messages {prompt, messageId?, peer?}``,
``GET /v1/messages/{id}`` (the run a message started: status and result) and
``GET /v1/messages/{id}/events`` (``{"runs": {runId: [event, ...]}}``, the retained events of
those runs), ``GET /v1/runs/{runId}/events?after=&limit=`` (one run's tool calls and
conversation, :mod:`berth_contract.runview`) and ``GET /v1/outcome?waitSeconds=N`` (token in
``Authorization: Bearer`` or ``X-Berth-Token``; 401 without, 403 when wrong).

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

from berth_contract.runview import DEFAULT_LIMIT, MAX_LIMIT, RUN_EVENTS_PATH, RUN_ID_PATTERN
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
RUN_ID_RE = re.compile(RUN_ID_PATTERN)
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

    def run_view(self, run_id: str, after: int, limit: int) -> dict[str, Any] | None:
        """The ``GET /v1/runs/{id}/events`` body (:mod:`berth_contract.runview`), or None when
        no such run is retained."""
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


def make_app(
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
    routes = PodRoutes(pod, outcome)
    app = web.Application(middlewares=[auth_middleware(token, refused)])
    app.router.add_get("/healthz", routes.healthz)
    app.router.add_get("/readyz", routes.readyz)
    app.router.add_get("/metrics", routes.metrics)
    app.router.add_get("/v1/state", routes.state)
    app.router.add_post("/v1/passivate", routes.passivate)
    app.router.add_post("/v1/messages", routes.messages)
    app.router.add_get("/v1/messages/{message_id}", routes.message)
    app.router.add_get("/v1/messages/{message_id}/events", routes.message_events)
    app.router.add_get(RUN_EVENTS_PATH, routes.run_events)
    app.router.add_get("/v1/outcome", routes.outcome_of_session)
    return app


class PodRoutes:
    """The handlers of the pod API over one :class:`PodApi` (``outcome``: see ``make_app``)."""

    def __init__(self, pod: PodApi, outcome: asyncio.Future[str | None] | None) -> None:
        self.pod = pod
        self.outcome = outcome

    async def healthz(self, _: web.Request) -> web.Response:
        """``GET /healthz``: the process answers."""
        return _json(200, {"ok": True})

    async def readyz(self, _: web.Request) -> web.Response:
        """``GET /readyz``: 200 once the session is built and has not ended, else 503."""
        ready = self.pod.built and outcome_of(self.pod.phase) is None
        return _json(200 if ready else 503, {"ready": ready, "state": self.pod.phase})

    async def metrics(self, _: web.Request) -> web.Response:
        """``GET /metrics``: the pod's Prometheus registry."""
        return web.Response(body=self.pod.metrics.render(), headers={"Content-Type": CONTENT_TYPE})

    async def state(self, _: web.Request) -> web.Response:
        """``GET /v1/state``: the runtime state (``berth_contract.state``)."""
        return _json(200, self.pod.state_json())

    async def passivate(self, request: web.Request) -> web.Response:
        """``POST /v1/passivate``: 202 with the passivation, 409 once the session has ended."""
        body = await _body(request, PassivateRequest)
        if isinstance(body, web.Response):
            return body
        if self.pod.phase in ("completed", "failed", "fenced"):
            return _json(409, {"error": "finished", "state": self.pod.phase})
        p = self.pod.request_passivation(body.reason, body.deadline_ms)
        return _json(202, {"accepted": True, "state": self.pod.phase, "passivation": p.to_json()})

    async def messages(self, request: web.Request) -> web.Response:
        """``POST /v1/messages``: a message for the session (front door, peers)."""
        body = await _body(request, MessageRequest)
        if isinstance(body, web.Response):
            return body
        status, answer = await self.pod.post_message(body.prompt, body.message_id, body.peer)
        return _json(status, answer)

    def _message_runs(
        self, request: web.Request
    ) -> tuple[str, list[dict[str, Any]]] | web.Response:
        """(message id, the runs it started), or the 400/404 answer."""
        mid = request.match_info["message_id"]
        if not MESSAGE_ID_RE.fullmatch(mid):
            return _json(400, {"error": "bad_request", "detail": "malformed message id"})
        runs = self.pod.message_runs(mid)
        if not runs:
            return _json(404, {"error": "unknown_message", "messageId": mid})
        return mid, runs

    async def message(self, request: web.Request) -> web.Response:
        """``GET /v1/messages/{id}``: the runs a message started."""
        found = self._message_runs(request)
        if isinstance(found, web.Response):
            return found
        return _json(200, message_body(*found))

    async def message_events(self, request: web.Request) -> web.Response:
        """``GET /v1/messages/{id}/events``: the events of each run the message started."""
        found = self._message_runs(request)
        if isinstance(found, web.Response):
            return found
        mid, runs = found
        events = {str(r["id"]): self.pod.run_events(str(r["id"])) for r in runs}
        return _json(200, {"messageId": mid, "runs": events})

    async def run_events(self, request: web.Request) -> web.Response:
        """``GET /v1/runs/{id}/events?after=&limit=``: one run's tool calls (those that started
        after event ``after``, at most ``limit``) and the last ``limit`` messages; 400 for a
        malformed id or query, 404 for a run the session does not retain."""
        run_id = request.match_info["run_id"]
        if not RUN_ID_RE.fullmatch(run_id):
            return _json(400, {"error": "bad_request", "detail": "malformed run id"})
        try:
            after = int(request.query.get("after", "-1"))
            limit = int(request.query.get("limit", str(DEFAULT_LIMIT)))
        except ValueError:
            limit = 0
        if not 1 <= limit <= MAX_LIMIT:
            detail = f"after must be an integer and limit one from 1 to {MAX_LIMIT}"
            return _json(400, {"error": "bad_request", "detail": detail})
        body = self.pod.run_view(run_id, after, limit)
        if body is None:
            return _json(404, {"error": "unknown_run", "runId": run_id})
        return _json(200, body)

    async def outcome_of_session(self, request: web.Request) -> web.Response:
        """``GET /v1/outcome?waitSeconds=S``: the termination message once the process is done
        with its session, waiting up to S seconds (0..``MAX_OUTCOME_WAIT_SECONDS``); 204 while
        there is none; 400 for a bad ``waitSeconds``."""
        raw = request.query.get("waitSeconds", "0")
        try:
            wait = float(raw)
        except ValueError:
            wait = -1.0
        if not 0 <= wait <= MAX_OUTCOME_WAIT_SECONDS:
            detail = f"waitSeconds must be a number from 0 to {MAX_OUTCOME_WAIT_SECONDS}"
            return _json(400, {"error": "bad_request", "detail": detail})
        if self.outcome is None:
            return web.Response(status=204)
        try:
            text = await asyncio.wait_for(asyncio.shield(self.outcome), wait)
        except TimeoutError:
            text = None
        if text is None:
            return web.Response(status=204)
        return web.Response(text=text, content_type="application/json")
