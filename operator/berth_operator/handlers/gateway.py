"""Front door handlers: keep the gateway's view of AgentSessions current, wake sessions at rest
for it, and post Events for peer calls.

- Every AgentSession event puts the session's view (phase, pod, at rest, spec.peers, identity)
  into the gateway's directory (drops it on deletion), makes sure its API token is cached, and
  nudges its delivery loop, which then looks at the session again at once.
- :func:`token_reader` reads a session's API token for the front door (cached).
- :func:`waker` asks a session at rest to wake: the ``berth.dev/wake-requested-at`` annotation,
  exactly what ``kubectl berth wake`` sets, so the wake is durable and visible.
- :func:`peer_call_poster` posts a ``PeerInvocation`` Event on both sessions of a peer call,
  through kopf's poster from the front door's own tasks (kopf reads its settings and queue
  from context variables, which the event handler captures for it).

Nothing here runs unless the front door is enabled (``BERTH_GATEWAY_ENABLED``).
"""

from __future__ import annotations

import contextvars
import logging
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from typing import Any, cast

import kopf

from berth_operator.api.constants import (
    ANNOTATION_WAKE_REQUESTED_AT,
    GROUP,
    SESSION_PLURAL,
    VERSION,
)
from berth_operator.errors import BerthOperatorError
from berth_operator.gateway.directory import view_of
from berth_operator.gateway.inbox import Message
from berth_operator.gateway.routing import SessionView
from berth_operator.handlers.context import OperatorContext

log = logging.getLogger(__name__)


@kopf.on.event(GROUP, VERSION, SESSION_PLURAL)
async def gateway_session_event(
    type: str | None,
    body: kopf.Body,
    name: str,
    namespace: str | None,
    uid: str,
    memo: Any,
    logger: kopf.Logger,
    **_: Any,
) -> None:
    """Record (or forget) a session's view in the front door's directory."""
    ctx: OperatorContext = memo.ctx
    gateway = ctx.gateway
    if gateway is None or namespace is None or not uid:
        return
    if type == "DELETED":
        gateway.directory.drop(uid)
        gateway.delivery.nudge(uid)  # its messages fail: the session is gone
        return
    view = view_of(
        uid,
        namespace,
        name,
        body.get("metadata") or {},
        body.get("spec") or {},
        body.get("status") or {},
    )
    if gateway.kopf_context is None:
        gateway.kopf_context = contextvars.copy_context()
    gateway.directory.put(view)
    try:
        await ctx.api_token(namespace, name, uid)
    except BerthOperatorError as exc:
        logger.warning(f"cannot read the API token of {namespace}/{name}: {exc}")
    gateway.delivery.nudge(uid)


def token_reader(ctx: OperatorContext) -> Callable[[SessionView], Awaitable[str | None]]:
    """The gateway's ``await tokens(view)``: the session's API token from the operator's cache,
    read from its ``<name>-berth`` Secret the first time (a new leader, a session created a
    moment ago). None when the Secret has none; raises BerthOperatorError for API errors."""

    async def token(view: SessionView) -> str | None:
        return await ctx.api_token(view.namespace, view.name, view.uid)

    return token


def waker(ctx: OperatorContext) -> Callable[[SessionView], Awaitable[None]]:
    """The gateway's wake: stamp ``berth.dev/wake-requested-at`` on the session (then its
    reconcile places a pod, through a warm pool when it has one) and queue it now."""

    async def wake(view: SessionView) -> None:
        stamp = datetime.now(UTC).isoformat(timespec="milliseconds")
        await ctx.kube.annotate_session(
            view.namespace, view.name, ANNOTATION_WAKE_REQUESTED_AT, stamp
        )
        ctx.wake_session(view.uid)

    return wake


def _ref(view: SessionView) -> kopf.Body:
    return cast(
        kopf.Body,
        {
            "apiVersion": f"{GROUP}/{VERSION}",
            "kind": "AgentSession",
            "metadata": {"name": view.name, "namespace": view.namespace, "uid": view.uid},
        },
    )


def peer_call_poster(ctx: OperatorContext) -> Callable[[SessionView, SessionView, Message], None]:
    """``post(caller, target, message)``: a ``PeerInvocation`` Event on the caller and the callee
    of an accepted peer call. Without a captured kopf context (no session seen yet, so no peer
    call can have been accepted) it only logs."""

    def post(caller: SessionView, target: SessionView, message: Message) -> None:
        correlation = (message.peer or {}).get("correlationId")
        tail = f" (message {message.id}" + (f", correlation {correlation})" if correlation else ")")
        saved = ctx.gateway.kopf_context if ctx.gateway is not None else None
        if saved is None:
            log.warning(
                "peer call %s → %s%s: no kopf context to post Events", caller.key, target.key, tail
            )
            return
        for ref, text in (
            (caller, f"asked peer {target.key}{tail}"),
            (target, f"asked by peer {caller.key}{tail}"),
        ):
            saved.run(kopf.event, _ref(ref), type="Normal", reason="PeerInvocation", message=text)

    return post
