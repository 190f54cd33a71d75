"""kopf handlers of LaneWorker: the worker Deployment and the scaling loop.

Thin: they read (spec, Deployment, pods, pressure), call the pure builders and decisions
(:mod:`berth_operator.builders.laneworker`, :mod:`berth_operator.reconcile.scaling`; the status
in :mod:`berth_operator.handlers.laneworker_status`) and apply the
result through :mod:`berth_operator.k8s.laneworker`; ``berth_operator.main`` registers them.

- ``laneworker_apply`` (create, update of ``spec``, resume): make the namespace's task master
  key Secret ``berth-task-key`` exist (the workers mount it) and the Deployment exist with the
  current pod template; when ``spec.scaling`` is omitted, copy ``spec.replicas`` (the ``/scale``
  subresource) to it.
- ``laneworker_scaler`` (a kopf daemon per LaneWorker): every ``scaling.pollingIntervalSeconds``
  (5 s for pools without ``scaling``), and with the ``broker`` source also as soon as tasks land
  that call for a scale-up, read pressure, decide replicas, mark busy/idle pods with a
  deletion cost before a scale-down, scale the Deployment, write the status and the
  ``berth_operator_laneworker_desired_replicas`` / ``berth_operator_lane_pressure`` gauges. The
  stabilization history lives in the daemon (memory); a restarted operator seeds it with the
  running replica count, so it never shrinks a pool on its first reading.
  ``status.pressure`` is ``{backlog: lag, inFlight: pending}`` with source ``broker``; with source
  ``prometheus`` the query gives one number, reported as ``backlog`` (``inFlight`` 0). Deletion
  costs always use the broker's per-consumer pending counts (workers consume from Redis).

Errors: a spec the operator cannot act on is ``kopf.PermanentError``; API failures in the
create/update handler are ``kopf.TemporaryError`` (retried); in the daemon any failure of one tick
is logged and the next tick retries (pressure failures leave replicas unchanged and set
``ScalingActive=False, reason=PressureUnavailable``).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any, cast

import kopf
from pydantic import ValidationError

from berth_operator import metrics
from berth_operator.api.constants import GROUP, LANEWORKER_PLURAL, VERSION
from berth_operator.api.laneworker import LaneWorkerSpec, LaneWorkerStatus
from berth_operator.builders.claim import build_shared_claim, claim_name
from berth_operator.builders.laneworker import (
    ANNOTATION_TEMPLATE_HASH,
    LaneWorkerRef,
    build_deployment,
    deployment_name,
    selector_string,
)
from berth_operator.builders.redis_ca import redis_ca_path
from berth_operator.errors import (
    AlreadyExists,
    BerthOperatorError,
    KubeError,
    NotFound,
    SpecError,
)
from berth_operator.handlers.context import LaneClients, OperatorContext
from berth_operator.handlers.laneworker_status import LoopState, Tick, event_target, write_status
from berth_operator.handlers.volume_setup import claim_setup_status
from berth_operator.pressure import (
    BrokerPressure,
    PressureUnavailable,
    broker_pressure,
    prometheus_pressure,
    task_arrival,
)
from berth_operator.reconcile.scaling import (
    DELETION_COST_ANNOTATION,
    decide,
    deletion_cost_plan,
    external_replicas,
    owns_replicas,
    scale_up_due,
    seed_history,
    wakes_on_arrival,
)
from berth_operator.reconcile.scaling_status import (
    DeploymentCounts,
    pod_view,
)

UNSCALED_REFRESH_SECONDS = 5.0
"""Status refresh period of a LaneWorker without ``spec.scaling`` (seconds)."""
ARRIVAL_WAIT_SECONDS = 1.0
"""Longest single blocking read for new tasks between ticks (seconds): how often at least the
waiting loop looks at whether the operator is stopping."""
ARRIVAL_SETTLE_SECONDS = 0.1
"""After a task lands between ticks, how long the rest of its burst is given to land before the
pressure is read (seconds)."""


def _lanes(memo: Any) -> LaneClients:
    """The LaneWorker clients of this operator process (built by ``berth_operator.main``)."""
    ctx: OperatorContext = memo.ctx
    if ctx.lanes is None:
        raise kopf.PermanentError("the operator was started without LaneWorker clients")
    return ctx.lanes


def _now() -> datetime:
    """The time of a reading (microseconds kept: the loop may read twice within a second)."""
    return datetime.now(UTC)


def _seconds(at: datetime) -> datetime:
    """``at`` to whole seconds, as the status' timestamps are written (metav1.Time)."""
    return at.replace(microsecond=0)


def _parse(spec: Mapping[str, Any]) -> LaneWorkerSpec:
    try:
        return LaneWorkerSpec.model_validate(dict(spec))
    except ValidationError as exc:
        raise kopf.PermanentError(f"invalid LaneWorker spec: {exc}") from exc


async def _ensure_deployment(
    ctx: LaneClients, ref: LaneWorkerRef, spec: LaneWorkerSpec, logger: logging.Logger | Any
) -> dict[str, Any] | None:
    """Create the Deployment, or replace its template when the built one changed.

    Returns the Deployment as read before any template change (None right after creating it).
    """
    name = deployment_name(ref.name)
    await ctx.secrets.ensure_task_master(ref.namespace)  # mounted by every worker pod
    await ctx.secrets.ensure_worker_redis(ref.namespace, ctx.settings.redis.for_workers)
    if ctx.netpol is not None:  # the namespace's NetworkPolicies (once per process)
        await ctx.netpol.ensure(ref.namespace)
    if redis_ca_path(ctx.settings.redis.for_workers):  # mounted by every worker pod
        await ctx.secrets.ensure_redis_ca(ref.namespace, [ctx.settings.redis.for_workers])
    if ctx.settings.claims.managed:  # the workers mount the namespace's shared claim
        claim = claim_name(spec, ctx.settings)
        body = await ctx.kube.get_pvc(ref.namespace, claim)
        if body is None:
            body = build_shared_claim(ref.namespace, claim, ctx.settings)
            await ctx.kube.create_pvc(body)
        # Workers only use directories sessions made; the set-up is started, not waited for.
        await claim_setup_status(ctx.kube, ctx.settings, ref.namespace, claim, body)
    current = await ctx.api.get_deployment(ref.namespace, name)
    counts = DeploymentCounts.of(current)
    if owns_replicas(spec):
        replicas = counts.spec_replicas if counts else spec.min_replicas
    else:
        wanted = external_replicas(spec, counts.spec_replicas if counts else None)
        replicas = wanted if wanted is not None else (counts.spec_replicas if counts else 0)
    body = build_deployment(ref, spec, ctx.settings, replicas=replicas)
    new_hash = body["metadata"]["annotations"][ANNOTATION_TEMPLATE_HASH]
    if current is None:
        try:
            await ctx.api.create_deployment(body)
        except AlreadyExists:
            # The create handler and the scaler's first tick raced; the other one created it.
            return await ctx.api.get_deployment(ref.namespace, name)
        logger.info(f"created deployment {name} with {replicas} replicas")
        return None
    annotations = current.get("metadata", {}).get("annotations") or {}
    old_hash = annotations.get(ANNOTATION_TEMPLATE_HASH)
    if old_hash != new_hash:
        await ctx.api.replace_template(
            ref.namespace,
            name,
            body["spec"]["template"],
            hash_annotation=ANNOTATION_TEMPLATE_HASH,
            new_hash=new_hash,
            old_hash=old_hash,
            has_annotations=bool(annotations),
        )
        logger.info(f"updated the pod template of deployment {name}")
    if not owns_replicas(spec) and counts is not None and replicas != counts.spec_replicas:
        await ctx.api.scale_deployment(ref.namespace, name, replicas)
        logger.info(f"scaled deployment {name} to {replicas} (spec.replicas, /scale)")
    return current


@kopf.on.resume(GROUP, VERSION, LANEWORKER_PLURAL)
@kopf.on.create(GROUP, VERSION, LANEWORKER_PLURAL)
@kopf.on.update(GROUP, VERSION, LANEWORKER_PLURAL, field="spec")
async def laneworker_apply(
    name: str,
    namespace: str | None,
    uid: str,
    spec: kopf.Spec,
    logger: kopf.Logger,
    memo: Any,
    **_: Any,
) -> None:
    """Make the worker Deployment match the spec (and ``spec.replicas`` when scaling is off)."""
    if namespace is None:
        raise kopf.PermanentError("LaneWorker is namespaced")
    parsed = _parse(spec)
    ctx = _lanes(memo)
    try:
        await _ensure_deployment(ctx, LaneWorkerRef(namespace, name, uid), parsed, logger)
    except SpecError as exc:
        raise kopf.PermanentError(str(exc)) from exc
    except KubeError as exc:
        raise kopf.TemporaryError(str(exc), delay=5) from exc


async def _read_pressure(
    ctx: LaneClients, namespace: str, name: str, spec: LaneWorkerSpec
) -> tuple[int | None, BrokerPressure | None, str]:
    """(pressure, broker reading or None, error text) for this tick."""
    scaling = spec.scaling
    if scaling is None:
        return None, None, "spec.scaling is omitted"
    broker: BrokerPressure | None = None
    broker_error = ""
    try:
        broker = await broker_pressure(ctx.redis, namespace, name)
    except PressureUnavailable as exc:
        broker_error = str(exc)
    if scaling.source == "broker":
        return (broker.total if broker else None), broker, broker_error
    if scaling.prometheus is None:
        return None, broker, "scaling.prometheus is not set"
    try:
        value = await prometheus_pressure(
            ctx.http, scaling.prometheus.url, scaling.prometheus.query
        )
    except PressureUnavailable as exc:
        return None, broker, str(exc)
    return value, broker, ""


async def _tick(
    ctx: LaneClients,
    ref: LaneWorkerRef,
    spec: LaneWorkerSpec,
    generation: int | None,
    state: LoopState,
    logger: Any,
) -> Tick:
    """One polling interval of one LaneWorker: read, decide and scale, write the status.
    Returns what it read and decided (``desired`` is the Deployment's replicas now)."""
    dep_name = deployment_name(ref.name)
    deployment = await ctx.api.get_deployment(ref.namespace, dep_name)
    if deployment is None:
        await _ensure_deployment(ctx, ref, spec, logger)
        deployment = await ctx.api.get_deployment(ref.namespace, dep_name)
    counts = DeploymentCounts.of(deployment)
    current = counts.spec_replicas if counts else 0
    now = _now()
    tick = Tick(current=current, desired=current)
    if owns_replicas(spec):
        await _scale(ctx, ref, spec, counts is not None, state, tick, now, logger)
    await write_status(ctx, ref, spec, counts, generation, state, tick, _seconds(now))
    metrics.observe_laneworker(
        ref.namespace, ref.name, desired=tick.desired, pressure=tick.pressure
    )
    return tick


async def _until_next_tick(
    ctx: LaneClients,
    ref: LaneWorkerRef,
    spec: LaneWorkerSpec | None,
    last: Tick | None,
    state: LoopState,
    due: float,
    stopped: kopf.DaemonStopped,
) -> None:
    """Wait until ``due`` (the event loop's clock) or until the operator stops.

    With the ``broker`` source (``reconcile.scaling.wakes_on_arrival``) the wait also ends when
    tasks land and the pressure then read would scale up from ``last.desired``
    (``reconcile.scaling.scale_up_due``, the tick's own decision): a burst is scaled for as it
    lands, not up to one polling interval later. Each arrival is given
    :data:`ARRIVAL_SETTLE_SECONDS` for the rest of its burst before the reading; the wait is for
    tasks newer than the last reading (the tick's, then each arrival's), so tasks that land
    while a reading is made and acted on are never missed. Scale-downs, and
    pools at ``maxReplicas``, wait for the tick. A failed read ends the watching; the tick
    reports the problem.
    """
    loop = asyncio.get_running_loop()
    watch = (
        spec is not None
        and last is not None
        and wakes_on_arrival(spec)
        and last.desired < spec.max_replicas
    )
    # Tasks newer than the tick's reading end the wait: those that landed while the tick
    # decided and scaled (the rest of a burst it saw the start of) count too.
    after = last.broker.last_entry_id if last is not None and last.broker is not None else "$"
    while not stopped and (left := due - loop.time()) > 0:
        if not watch or spec is None or last is None:
            await stopped.wait(left)
            return
        try:
            wait = min(left, ARRIVAL_WAIT_SECONDS)
            if not await task_arrival(ctx.redis, ref.namespace, ref.name, wait, after):
                continue
            await stopped.wait(min(ARRIVAL_SETTLE_SECONDS, max(0.0, due - loop.time())))
            reading = await broker_pressure(ctx.redis, ref.namespace, ref.name)
            after = reading.last_entry_id
        except PressureUnavailable:
            watch = False
            continue
        if scale_up_due(
            spec,
            pressure=reading.total,
            current=last.desired,
            history=state.history,
            now=_now(),
        ):
            return


async def _scale(
    ctx: LaneClients,
    ref: LaneWorkerRef,
    spec: LaneWorkerSpec,
    deployment_exists: bool,
    state: LoopState,
    tick: Tick,
    now: datetime,
    logger: Any,
) -> None:
    """Read the pressure, decide the replicas (``reconcile.scaling.decide``) and scale: before a
    scale-down the busy pods get a high deletion cost, so the idle ones go first. An Event
    ``SuccessfulRescale`` says old and new replicas and the pressure (as the HPA does)."""
    tick.pressure, tick.broker, tick.error = await _read_pressure(
        ctx, ref.namespace, ref.name, spec
    )
    if not state.history:
        state.history = seed_history(tick.current, now)
    decision = decide(
        spec, pressure=tick.pressure, current=tick.current, history=state.history, now=now
    )
    state.history = decision.history
    tick.desired = decision.desired
    tick.recommendation = decision.recommendation
    if not deployment_exists or decision.action == "none":
        return
    if decision.action == "down" and tick.broker is not None:
        pods = [
            pod_view(p) for p in await ctx.api.list_pods(ref.namespace, selector_string(ref.name))
        ]
        plan = deletion_cost_plan(
            pods, tick.broker.per_consumer, current=tick.current, desired=tick.desired
        )
        for pod, cost in plan.items():
            with contextlib.suppress(NotFound):
                await ctx.api.annotate_pod(ref.namespace, pod, {DELETION_COST_ANNOTATION: cost})
    dep_name = deployment_name(ref.name)
    await ctx.api.scale_deployment(ref.namespace, dep_name, tick.desired)
    state.last_scale_time = _seconds(now)
    source = spec.scaling.source if spec.scaling else "-"
    message = (
        f"New size: {tick.desired} (was {tick.current}); reason: pressure {tick.pressure} "
        f"from {source}"
    )
    logger.info(f"scaled {dep_name}: {message}")
    target = cast(kopf.Body, event_target(ref))
    kopf.event(target, type="Normal", reason="SuccessfulRescale", message=message[:1024])


@kopf.daemon(GROUP, VERSION, LANEWORKER_PLURAL, cancellation_timeout=10.0)
async def laneworker_scaler(
    name: str,
    namespace: str | None,
    uid: str,
    spec: kopf.Spec,
    meta: kopf.Meta,
    status: kopf.Status,
    stopped: kopf.DaemonStopped,
    logger: kopf.Logger,
    memo: Any,
    **_: Any,
) -> None:
    """The scaling loop of one LaneWorker; runs until the object is deleted or the operator stops.

    ``spec``, ``meta`` and ``status`` are kopf's live views, so an edit of the polling interval or
    the bounds applies from the next tick.
    """
    if namespace is None:
        return
    ref = LaneWorkerRef(namespace, name, uid)
    state = LoopState()
    try:
        previous = LaneWorkerStatus.model_validate(dict(status or {}))
        state.last_scale_time = previous.last_scale_time
        state.conditions = list(previous.conditions or [])
    except ValidationError:
        pass
    ctx = _lanes(memo)
    try:
        loop = asyncio.get_running_loop()
        while not stopped:
            started = loop.time()
            interval = UNSCALED_REFRESH_SECONDS
            parsed: LaneWorkerSpec | None = None
            last: Tick | None = None
            try:
                parsed = LaneWorkerSpec.model_validate(dict(spec))
                if parsed.scaling is not None:
                    interval = float(parsed.scaling.polling_interval_seconds)
                last = await _tick(ctx, ref, parsed, meta.get("generation"), state, logger)
            except (ValidationError, SpecError) as exc:
                logger.error(f"cannot scale: {exc}")
            except BerthOperatorError as exc:
                logger.warning(f"scaling tick failed, retrying next interval: {exc}")
            # Ticks start every ``interval`` seconds (the tick's own time is not added to it),
            # or sooner when a burst of tasks calls for more replicas.
            await _until_next_tick(ctx, ref, parsed, last, state, started + interval, stopped)
    finally:
        metrics.forget_laneworker(namespace, name)
