"""Carry out an AgentSession's :class:`~berth_operator.reconcile.plan.Plan` (I/O only).

``reconcile.session.decide`` chooses everything a pass does — the status, the deletes and which of
them wait for the create, the passivate call, the Events, the pod to create, the epoch the write
reserves; :func:`apply_plan` makes the calls in the order the design fixes:

1. the status write (the bumped epoch is durable before any pod of that epoch exists; a reserved
   epoch is durable already, so its create goes beside the write: ``CreatePod.reserved``), with
   the objects a new pod needs and the guard's LIST beside it;
2. what this process remembers of the pass (``SessionMemory``: the reservation, the phase);
3. the deletes, the passivate call, the Events;
4. the create, then the deletes of pods that have ended, off the pass (``delete_ended``).

A status write that waits in the coalescing window (``reconcile.coalesce``) skips the rest but the
repeat of a stored passivate request.
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass, replace
from typing import Any, cast

import kopf

from berth_operator.api.common import SessionRef
from berth_operator.errors import KubeError
from berth_operator.handlers.context import OperatorContext
from berth_operator.handlers.session_calls import passivate
from berth_operator.handlers.session_placement import (
    create_failed,
    create_pod,
    prepare,
    prepare_and_create,
    recheck_objects,
)
from berth_operator.handlers.session_workers import LiveSession
from berth_operator.handlers.status_writes import write_status
from berth_operator.metrics import observe_passivation
from berth_operator.reconcile.coalesce import write_delay
from berth_operator.reconcile.observe import ObservedPod
from berth_operator.reconcile.plan import CreatePod, DeletePod, Observation, Plan
from berth_operator.reconcile.session import decide

log = logging.getLogger(__name__)


@dataclass(slots=True)
class Prepared:
    """What went beside the status write for a create: the pod placed already (a reserved
    epoch: ``prepare_and_create``'s result) or the guard's LIST (``prepare``'s; None when not
    made), or the error either raised (raised again at the create, after the write is kept)."""

    placed: tuple[ObservedPod, ...] | BaseException = ()
    listed: list[dict[str, Any]] | BaseException | None = None


async def apply_plan(
    ctx: OperatorContext,
    body: dict[str, Any],
    obs: Observation,
    plan: Plan,
    *,
    live: LiveSession,
    early: asyncio.Task[None] | None = None,
) -> float:
    """Carry out ``plan`` for the session ``body`` as observed in ``obs`` (module docstring);
    ``early``: the task writing the objects a first pod needs, started before the decision
    (``session_placement.prepare_early``). Returns the seconds until the next pass.

    Raises what the status write, a delete or the passivate call raised (the caller's error
    translation); a failed create is remembered instead (``create_failed``)."""
    wait = await coalesced(ctx, obs, plan, live)
    if wait is not None:
        return wait
    stored, prepared = await write_beside(ctx, body, obs, plan, early)
    written, body = stored is not body, stored
    if written:
        live.body.written(stored, time.monotonic())
        live.last_write = time.monotonic()
    remember(ctx, obs, plan, written=written)
    failed = await act(ctx, body, obs, plan)
    if failed is not None:
        return failed
    if plan.create is not None:
        first = not obs.status.epoch and plan.create.epoch == 1 and written
        return await create_then(
            ctx, body, obs, plan, plan.create, prepared, first_pod=first, live=live
        )
    return next_pass(ctx, plan)


def next_pass(ctx: OperatorContext, plan: Plan) -> float:
    """Seconds until the session's next pass: the plan's, else the status refresh period."""
    if plan.requeue_after is not None:
        return plan.requeue_after
    return ctx.settings.session_api.status_refresh_seconds


async def act(
    ctx: OperatorContext, body: dict[str, Any], obs: Observation, plan: Plan
) -> float | None:
    """The deletes, the passivate call and the Events. A refused delete before a create whose
    epoch is stored is that create's failure (remembered; its delay returned, and the pod is
    not made); else None."""
    create = plan.create
    try:
        for d in plan.delete_now():
            await delete(ctx, obs.ref.namespace, d)
    except Exception as exc:
        if create is None or create.reserved:
            raise
        return create_failed(ctx, obs, create, exc)  # its epoch is stored: kept
    if plan.passivate is not None:
        await passivate(ctx, obs.ref, plan.passivate)
    post_events(body, plan)
    return None


async def create_then(
    ctx: OperatorContext,
    body: dict[str, Any],
    obs: Observation,
    plan: Plan,
    create: CreatePod,
    prepared: Prepared,
    *,
    first_pod: bool,
    live: LiveSession,
) -> float:
    """Place the plan's pod, then start the deletes of ended pods (``delete_ended``). When the
    guard's LIST found other pods (a stale cache), decide again with them and apply that plan
    without a create (never two live pods of one session: that decision waits for them)."""
    try:
        listed = await place(ctx, obs, create, prepared, first_pod=first_pod)
    except Exception as exc:
        return create_failed(ctx, obs, create, exc)
    for d in plan.delete_after_create:
        ctx.spawn(delete_ended(ctx, obs.ref, d))
    if not listed:
        return next_pass(ctx, plan)
    log.info("%s: %d other pod(s) exist; deciding again", obs.ref.key, len(listed))
    again = replace(obs, status=plan.status, pods=listed, inflight=None)
    then = decide(again, ctx.settings).without_create()
    return await apply_plan(ctx, body, again, then, live=live)


async def coalesced(
    ctx: OperatorContext, obs: Observation, plan: Plan, live: LiveSession
) -> float | None:
    """Seconds until the next pass when this pass's status write waits in the coalescing window
    (information only: it goes out with the next write, ``reconcile.coalesce``), else None.
    Only the write waits: the session is looked at again at its own pace (its status refresh,
    a passivation's deadline), so what must go out at once is seen no later than without the
    window. A stored passivate request is repeated meanwhile."""
    since = None if live.last_write is None else time.monotonic() - live.last_write
    wait = write_delay(obs.status, plan, since, ctx.settings.session_api.status_coalesce_seconds)
    if wait is None:
        return None
    if plan.passivate is not None:
        await passivate(ctx, obs.ref, plan.passivate)
    return min(wait, plan.requeue_after or ctx.settings.session_api.status_refresh_seconds)


async def write_beside(
    ctx: OperatorContext,
    body: dict[str, Any],
    obs: Observation,
    plan: Plan,
    early: asyncio.Task[None] | None,
) -> tuple[dict[str, Any], Prepared]:
    """Write the status (returns the stored body: ``body`` itself when nothing changed) with
    what a create needs beside it: the objects of a new pod and the guard's LIST (both
    independent of the epoch), or for a reserved epoch the create itself. Raises the status
    write's error (a pod created beside it is adopted next pass); the others' errors are kept
    in the returned :class:`Prepared`."""
    create = plan.create
    status_write = write_status(ctx.kube, body, obs.status, plan.status)
    prepared = Prepared()
    stored: dict[str, Any] | BaseException
    if create is not None and create.reserved:
        ctx.memory(obs.ref.uid).reservation = None  # used now, whatever comes of it
        stored, prepared.placed = await asyncio.gather(
            status_write, prepare_and_create(ctx, obs, create, early), return_exceptions=True
        )
    elif create is not None:
        stored, prepared.listed = await asyncio.gather(
            status_write, prepare(ctx, obs, early), return_exceptions=True
        )
    else:
        stored = await status_write
    if isinstance(stored, BaseException):
        raise stored
    return stored, prepared


def remember(ctx: OperatorContext, obs: Observation, plan: Plan, *, written: bool) -> None:
    """Keep what the pass leaves with this process: the epoch its stored write reserved
    (``Plan.reserve``), the phase (for the metrics), the passivation latencies; and, when the
    session runs on a pod placed without this process writing its objects (an adopted pod),
    a look at them in the background (``recheck_objects``)."""
    if written and plan.reserve is not None:
        ctx.memory(obs.ref.uid).reservation = plan.reserve
    ctx.phases.set(obs.ref.uid, plan.status.phase)
    if plan.create is None and obs.state is not None:
        recheck_objects(ctx, obs.ref, obs.spec)
    for metric in plan.metrics:
        observe_passivation(metric.kind, metric.reason, metric.outcome, metric.seconds)


async def place(
    ctx: OperatorContext,
    obs: Observation,
    create: CreatePod,
    prepared: Prepared,
    *,
    first_pod: bool,
) -> tuple[ObservedPod, ...]:
    """Create the pod of ``create`` unless it was created beside the write already; raises the
    error of what went beside the write. Returns the other pods the guard's LIST found (empty
    when the pod was created: ``session_placement.create_pod``)."""
    if isinstance(prepared.placed, BaseException):
        raise prepared.placed
    if isinstance(prepared.listed, BaseException):
        raise prepared.listed
    if create.reserved:
        return prepared.placed
    return await create_pod(ctx, obs, create, first_pod=first_pod, existing=prepared.listed)


def post_events(body: dict[str, Any], plan: Plan) -> None:
    """Post the plan's Events on the AgentSession (message cut to the API's 1024 characters)."""
    for event in plan.events:
        kopf.event(
            cast(kopf.Body, body),
            type=event.type,
            reason=event.reason,
            message=event.message[:1024],
        )


async def delete(ctx: OperatorContext, namespace: str, d: DeletePod) -> None:
    """Delete one pod with its uid as precondition (``DeletePod``)."""
    await ctx.kube.delete_pod(
        namespace, d.name, uid=d.uid, force=d.force, grace_seconds=d.grace_seconds
    )


async def delete_ended(ctx: OperatorContext, ref: SessionRef, d: DeletePod) -> None:
    """Delete a pod that has ended, beside the session's next pass rather than before it: the
    replacement is placed already, and the pass that the new pod's first event queues (the one
    that sees the resumed run) does not wait for this round trip. A failed delete is logged;
    every decision deletes the session's pods that are neither current nor being deleted
    (``reconcile.session``), so the next pass asks again."""
    try:
        await delete(ctx, ref.namespace, d)
    except KubeError as exc:
        log.warning("%s: ended pod %s not deleted yet: %s", ref.key, d.name, exc)
