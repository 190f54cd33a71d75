"""The front door's HTTP API (aiohttp), served by the operator's leader on its own port.

Routes (``{namespace}/{name}`` of an AgentSession)::

    POST /v1/sessions/{namespace}/{name}/messages?waitSeconds=N
         {"prompt": str, "messageId": str?, "correlationId": str?}
         → 202 {messageId, session, state, createdMs, runId, resultText, error, peer}
           (200 with state done|failed when the reply came within waitSeconds)
    GET  /v1/sessions/{namespace}/{name}/messages/{id}?waitSeconds=N   the same body
    GET  /v1/sessions/{namespace}/{name}/messages/{id}/events          Server-Sent Events:
         ``event: message`` (the body above, at every state change) and ``event: run`` (each
         event of the run the message started, as the session pod reports them), ending after
         the final ``message`` event

A message id is the idempotency key: posting the same id again returns the stored message and
queues nothing. Without one the front door makes one up.

Authentication, as for the session pod's own API: ``Authorization: Bearer <token>`` (or
``X-Berth-Token``, which the apiserver's service proxy passes on) holding the target session's
API token (its ``<name>-berth`` Secret). A session calling a peer sends its *own* token with
``X-Berth-Session-Uid: <its uid>``; then the caller's ``spec.peers`` must allow the target, and
loops and deep chains are refused (:mod:`routing`). Errors: 400 malformed, 401 no or wrong
credentials, 403 peer not allowed, 404 unknown session or message, 409 a session that takes no
messages or a loop, 503 (with ``Retry-After``) when a token cannot be read from the apiserver
right now, each ``{"error": code, "message": text}``; refusals are counted.
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import json
import re
import secrets
import time
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from aiohttp import web
from opentelemetry.trace import SpanKind
from prometheus_client import Counter
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from berth_contract import tracing as names
from berth_contract.services import SESSION_UID_HEADER
from berth_contract.state import API_TOKEN_HEADER, MESSAGE_ID_PATTERN
from berth_operator.errors import BerthOperatorError, RuntimeUnreachable
from berth_operator.gateway.delivery import Delivery
from berth_operator.gateway.inbox import FINAL, Inbox, Message
from berth_operator.gateway.routing import SessionView, refuse_message, refuse_peer
from berth_operator.tracing import tracer
from berth_telemetry.tracing import remote_parent, traceparent

REFUSED = Counter(
    "berth_operator_gateway_requests_refused_total",
    "Front door requests refused, by reason (malformed, unauthenticated, forbidden, "
    "not_found, conflict, loop, unavailable).",
    ["reason"],
)
PEER_CALLS = Counter(
    "berth_operator_gateway_peer_calls_total",
    "Peer calls accepted by the front door.",
)

MESSAGE_ID_RE = re.compile(MESSAGE_ID_PATTERN)

Lookup = Callable[[str, str], SessionView | None]
ByUid = Callable[[str], SessionView | None]
Token = Callable[[SessionView], Awaitable[str | None]]
OnPeerCall = Callable[[SessionView, SessionView, Message], None]


class PostBody(BaseModel):
    """``POST .../messages`` body."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    prompt: str = Field(min_length=1, max_length=262144)
    message_id: str | None = Field(default=None, alias="messageId", pattern=MESSAGE_ID_PATTERN)
    correlation_id: str | None = Field(default=None, alias="correlationId", max_length=256)


class Refusal(Exception):
    """An answered error: HTTP ``status``, ``code`` (also the refusal counter's reason)."""

    def __init__(self, status: int, code: str, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.code = code

    def response(self) -> web.Response:
        """The JSON answer ``{"error": code, "message": ...}`` with ``status``; counts the refusal.

        A 503 carries ``Retry-After: 1`` (the HTTP convention for a transient refusal).
        """
        REFUSED.labels(self.code).inc()
        headers = {"Retry-After": "1"} if self.status == 503 else None
        return web.json_response(
            {"error": self.code, "message": str(self)}, status=self.status, headers=headers
        )


def _presented(request: web.Request) -> str:
    auth = request.headers.get("Authorization", "")
    scheme, _, value = auth.partition(" ")
    if scheme.lower() == "bearer" and value.strip():
        return value.strip()
    return request.headers.get(API_TOKEN_HEADER, "").strip()


def _wait_seconds(request: web.Request, cap: int) -> float:
    raw = request.query.get("waitSeconds", "0")
    try:
        wait = float(raw)
    except ValueError:
        raise Refusal(400, "malformed", "waitSeconds must be a number") from None
    if wait < 0 or wait != wait:
        raise Refusal(400, "malformed", "waitSeconds must be ≥ 0")
    return min(wait, float(cap))


class GatewayService:
    """The routes of the module docstring over an :class:`Inbox` and a :class:`Delivery`.

    ``lookup(ns, name)`` and ``by_uid(uid)`` read the operator's view of AgentSessions,
    ``await tokens(view)`` their API tokens (read from the apiserver the first time; raises
    BerthOperatorError when it cannot be read); ``on_peer_call(caller, target, message)`` is told of
    every accepted peer call (Events); ``max_wait_seconds`` caps ``waitSeconds``;
    ``max_peer_depth`` bounds chains."""

    def __init__(
        self,
        inbox: Inbox,
        delivery: Delivery,
        lookup: Lookup,
        by_uid: ByUid,
        tokens: Token,
        *,
        max_wait_seconds: int,
        max_peer_depth: int,
        on_peer_call: OnPeerCall | None = None,
    ) -> None:
        self.inbox = inbox
        self.delivery = delivery
        self.lookup = lookup
        self.by_uid = by_uid
        self.tokens = tokens
        self.max_wait_seconds = max_wait_seconds
        self.max_peer_depth = max_peer_depth
        self.on_peer_call = on_peer_call

    def routes(self, app: web.Application) -> None:
        """Add the routes to ``app``."""
        base = "/v1/sessions/{namespace}/{name}/messages"
        app.router.add_post(base, self._post)
        app.router.add_get(base + "/{message_id}", self._get)
        app.router.add_get(base + "/{message_id}/events", self._events)

    # ---- who is asking -------------------------------------------------------------------

    def _target(self, request: web.Request) -> SessionView:
        ns, name = request.match_info["namespace"], request.match_info["name"]
        view = self.lookup(ns, name)
        if view is None:
            raise Refusal(404, "not_found", f"no AgentSession {ns}/{name} (or not watched)")
        return view

    async def _check(self, view: SessionView, presented: str) -> bool:
        if not presented:
            return False
        try:
            expected = await self.tokens(view) or ""
        except BerthOperatorError as exc:
            raise Refusal(503, "unavailable", f"cannot read the session's token: {exc}") from None
        return bool(expected) and hmac.compare_digest(expected, presented)

    async def _caller(self, request: web.Request, target: SessionView) -> SessionView | None:
        """The calling session for a peer call, None for the target's owner. Raises Refusal."""
        presented = _presented(request)
        caller_uid = request.headers.get(SESSION_UID_HEADER, "").strip()
        if not caller_uid:
            if not await self._check(target, presented):
                raise Refusal(401, "unauthenticated", "missing or wrong session API token")
            return None
        caller = self.by_uid(caller_uid)
        if caller is None or not await self._check(caller, presented):
            raise Refusal(401, "unauthenticated", "missing or wrong session credentials")
        return caller

    async def _caller_chain(self, caller: SessionView) -> list[str]:
        """The chain of the message the caller is answering now ([] if none)."""
        pending = await self.inbox.pending(caller.uid)
        if not pending:
            return []
        head = await self.inbox.get(caller.uid, pending[0])
        return head.chain if head is not None and head.state == "delivered" else []

    # ---- routes --------------------------------------------------------------------------

    async def _post(self, request: web.Request) -> web.Response:
        try:
            target = self._target(request)
            caller = await self._caller(request, target)
            wait = _wait_seconds(request, self.max_wait_seconds)
            try:
                body = PostBody.model_validate(await request.json())
            except (ValueError, ValidationError) as exc:
                raise Refusal(400, "malformed", f"bad message: {exc}") from None
            peer: dict[str, Any] | None = None
            chain: list[str] = []
            if caller is not None:  # a loop or a forbidden peer is the clearer error
                chain, why = refuse_peer(
                    caller, target, await self._caller_chain(caller), self.max_peer_depth
                )
                if why is not None:
                    raise Refusal(409 if "refused" in why else 403, _code(why), why)
            why = refuse_message(target)
            if why is not None:
                raise Refusal(409, "conflict", why)
            if caller is not None:
                peer = {
                    "fromSessionId": caller.key,
                    "fromTenantId": caller.tenant_id,
                    "correlationId": body.correlation_id or caller.correlation_id,
                }
            message = Message(
                id=body.message_id or f"msg-{secrets.token_hex(12)}",
                session=target.key,
                prompt=body.prompt,
                peer=peer,
                chain=chain,
                traceparent=front_door_span(request.headers, target, caller),
            )
        except Refusal as refusal:
            return refusal.response()
        stored, created = await self.inbox.enqueue(target.uid, message)
        if created:
            self.delivery.kick(target.uid)
            if caller is not None:
                PEER_CALLS.inc()
                if self.on_peer_call is not None:
                    self.on_peer_call(caller, target, stored)
        return await self._answer(target, stored, wait)

    async def _get(self, request: web.Request) -> web.Response:
        try:
            target = self._target(request)
            await self._caller(request, target)  # the owner's token, or a peer caller's
            wait = _wait_seconds(request, self.max_wait_seconds)
            message = await self._message(request, target)
        except Refusal as refusal:
            return refusal.response()
        return await self._answer(target, message, wait)

    async def _message(self, request: web.Request, target: SessionView) -> Message:
        mid = request.match_info["message_id"]
        if not MESSAGE_ID_RE.fullmatch(mid):
            raise Refusal(400, "malformed", "malformed message id")
        message = await self.inbox.get(target.uid, mid)
        if message is None:
            raise Refusal(404, "not_found", f"no message {mid} for {target.key}")
        return message

    async def _answer(self, target: SessionView, message: Message, wait: float) -> web.Response:
        deadline = time.monotonic() + wait
        while message.state not in FINAL and time.monotonic() < deadline:
            changed = self.delivery.changed(message.id)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(changed.wait(), min(1.0, deadline - time.monotonic()))
            message = await self.inbox.get(target.uid, message.id) or message
        status = 200 if message.state in FINAL else 202
        return web.json_response(message.to_json(), status=status)

    async def _events(self, request: web.Request) -> web.StreamResponse:
        try:
            target = self._target(request)
            await self._caller(request, target)
            message = await self._message(request, target)
        except Refusal as refusal:
            return refusal.response()
        resp = web.StreamResponse(
            headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"}
        )
        await resp.prepare(request)
        sent: dict[str, int] = {}
        last_state = ""
        while True:
            if message.run_id:  # the run's events first, so the final state closes the stream
                await self._forward_run_events(resp, target, message, sent)
            if message.state != last_state:
                await _sse(resp, "message", message.to_json())
                last_state = message.state
            if message.state in FINAL:
                break
            changed = self.delivery.changed(message.id)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(changed.wait(), 0.5)
            message = await self.inbox.get(target.uid, message.id) or message
        await resp.write_eof()
        return resp

    async def _forward_run_events(
        self, resp: web.StreamResponse, target: SessionView, message: Message, sent: dict[str, int]
    ) -> None:
        view = self.lookup(target.namespace, target.name)
        if view is None or not view.pod_ip:
            return
        try:
            status, answer = await self.delivery.runtime.call(
                "GET", view.pod_ip, f"/v1/messages/{message.id}/events", await self.tokens(view)
            )
        except (RuntimeUnreachable, BerthOperatorError):
            return
        runs = answer.get("runs") if status == 200 else None
        if not isinstance(runs, dict):
            return
        for run_id, events in runs.items():
            if not isinstance(events, list):
                continue
            for event in events[sent.get(run_id, 0) :]:
                await _sse(resp, "run", event)
            sent[run_id] = max(sent.get(run_id, 0), len(events))


def front_door_span(headers: Mapping[str, str], target: SessionView, caller: Any) -> str:
    """The W3C traceparent of a span ``berth.message`` for a message to ``target``: a child of
    the request's own ``traceparent`` (a caller's, a peer's ``call_peer``) if it has one. The run
    the message starts is its child (``Message.traceparent``)."""
    with remote_parent(headers):
        span = tracer.start_span(
            "berth.message",
            kind=SpanKind.SERVER,
            attributes={
                names.SESSION: target.key,
                names.SESSION_UID: target.uid,
                "berth.peer.from": caller.key if caller is not None else "",
            },
        )
    span.end()
    return traceparent(span)


def _code(why: str) -> str:
    return "loop" if "loop" in why else ("conflict" if "refused" in why else "forbidden")


async def _sse(resp: web.StreamResponse, event: str, data: Any) -> None:
    await resp.write(f"event: {event}\ndata: {json.dumps(data)}\n\n".encode())
