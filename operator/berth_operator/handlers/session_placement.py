"""What a new pod of an AgentSession needs, and its create (docs/architecture.md §5, §8).

- ``prepare_early``   on a session's first pass, the pod's Secrets written beside the reads.
- ``prepare_pod``     the Secrets (``<name>-berth`` with options.json, the namespace's
                      ``berth-task-key`` for external lanes), and once per namespace and process
                      its session PodDisruptionBudget, NetworkPolicies and managed shared claim,
                      written concurrently; the Secrets are not waited for again when this
                      process wrote them for the generation already
                      (``SessionMemory.objects_ready``), but written again after the
                      placement (``recheck_objects``).
- ``prepare``         ``prepare_pod`` and the guard's LIST of the session's pods.
- ``create_pod``      the pod of an epoch, unless the apiserver (listed directly: the guard against
                      a stale cache and a restarted operator; not for a session's first pod nor a
                      reserved replacement, for which it could show nothing new) shows other pods of
                      the session that have not ended; for a session naming a SessionWarmPool, a
                      warm pod is adopted instead when one is eligible
                      (``handlers.sessionwarmpool``).
- ``create_failed``   remembers a placement whose stored epoch got no pod, for the next pass.

Called by ``handlers.session_apply.apply_plan`` only after the status with the epoch is stored, or
beside that write for an epoch reserved by this process (``reconcile.passivation``).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Mapping
from typing import Any, cast

from pydantic import ValidationError

from berth_contract import tracing as names
from berth_operator.api.agentsession import AgentSessionSpec
from berth_operator.api.common import SessionRef
from berth_operator.api.constants import LABEL_SESSION_UID
from berth_operator.builders.claim import build_shared_claim, claim_name
from berth_operator.builders.redis_ca import redis_ca_path
from berth_operator.builders.secrets import needs_task_master
from berth_operator.builders.session_pod import (
    build_options,
    build_session_pod,
)
from berth_operator.errors import AlreadyExists, KubeError
from berth_operator.handlers.context import OperatorContext
from berth_operator.handlers.sessionwarmpool import adopt_for_session
from berth_operator.metrics import PLACEMENTS, RECONCILE_ERRORS
from berth_operator.reconcile.observe import ObservedPod, observe_pod
from berth_operator.reconcile.plan import CreatePod, Observation
from berth_operator.tracing import PLACE, RESUME, active, decision_span, identity_of
from berth_telemetry.tracing import traceparent

log = logging.getLogger("berth.operator")


async def ensure_secrets(ctx: OperatorContext, ref: SessionRef, spec: AgentSessionSpec) -> None:
    """Before a pod is created: the namespace master (external lanes) and ``<name>-berth`` with
    the options.json of the spec's current generation."""
    if ctx.secrets is None:
        return
    master = None
    if needs_task_master(spec):
        master = await ctx.secrets.ensure_task_master(ref.namespace)
    if redis_ca_path(ctx.settings.redis.for_sessions):  # the pod mounts the CA its URL names
        await ctx.secrets.ensure_redis_ca(ref.namespace, [ctx.settings.redis.for_sessions])
    ctx.memory(ref.uid).token = await ctx.secrets.ensure_session_secret(
        ref,
        master,
        ctx.settings.redis.for_sessions,
        options=build_options(ref, spec, ctx.settings).render(),
        known=ctx.memory.token(ref.uid) is not None,
    )


def prepare_early(
    ctx: OperatorContext, body: Mapping[str, Any], cached: list[ObservedPod]
) -> asyncio.Task[None] | None:
    """On a session's first pass (no status written yet, no pod, none being created), when its
    spec parses: start writing the objects its first pod needs (``prepare_objects``) now,
    beside the reads that decide its placement, instead of after them. Almost every new
    session is placed on its first pass, and its pod — created, or adopted from a warm pool —
    waits for the status write and for these objects, so the slower of the two sets the pace,
    not their sum. When the decision is not to place it yet (a condition the user must fix),
    the objects wait for its first pod; they are owned by the session and go with it. Later
    passes never write ahead (the status is written by then). None when not written ahead."""
    meta = body.get("metadata") or {}
    uid = str(meta.get("uid") or "")
    if body.get("status") or cached or ctx.memory(uid).inflight is not None:
        return None
    try:
        spec = AgentSessionSpec.model_validate(body.get("spec") or {})
    except ValidationError:
        return None  # observe reports it
    ref = SessionRef(meta["namespace"], meta["name"], uid, int(meta.get("generation") or 0))
    return asyncio.create_task(prepare_objects(ctx, ref, spec))


def create_failed(
    ctx: OperatorContext, obs: Observation, create: CreatePod, exc: Exception
) -> float:
    """The epoch of ``create`` is stored and its pod was never made (a write it waits for
    failed): remember it, so the next pass places the same epoch again after a backoff and
    says why (``reconcile.session_place._place_again``). Returns the requeue delay (0: that
    pass records the failure in status)."""
    failure = ctx.create_failed(obs.ref.uid, create, exc)
    RECONCILE_ERRORS.labels(kind="api" if isinstance(exc, KubeError) else "unexpected").inc()
    log.warning(
        "%s: pod of epoch %d not created (attempt %d): %s",
        obs.ref.key,
        create.epoch,
        failure.attempts,
        failure.message,
    )
    return 0.0


async def concurrently(*awaitables: Awaitable[Any]) -> list[Any]:
    """Await all; return their results in argument order. Every awaitable runs to its end; then
    the first error in argument order is raised."""
    results = await asyncio.gather(*awaitables, return_exceptions=True)
    for result in results:
        if isinstance(result, BaseException):
            raise result
    return results


class PodNameTaken(KubeError):
    """The pod name of this epoch belongs to a pod of an earlier AgentSession of the same name
    (another ``metadata.uid``), still being deleted."""


async def name_taken_by_earlier_object(ctx: OperatorContext, ref: SessionRef, name: str) -> None:
    """After an AlreadyExists on create: raise :class:`PodNameTaken` when pod ``name`` is not
    this session's (its ``berth.dev/session-uid`` label names another object). Pod names are
    ``<session>-e<epoch>`` and a re-created session starts at epoch 1 again, so the pod of a
    deleted object of the same name can hold the name until garbage collection has removed it
    (a few seconds). Counting it as this session's pod in flight would wait out
    ``placement.inflight_ttl_seconds`` (60 s) for a pod that never comes; the failed create is
    placed again after the placement backoff instead, with this wait named in Ready."""
    existing = await ctx.kube.get_pod(ref.namespace, name)
    labels = ((existing or {}).get("metadata") or {}).get("labels") or {}
    other = labels.get(LABEL_SESSION_UID)
    if existing is not None and other != ref.uid:
        raise PodNameTaken(
            f"the name is still held by pod {name} of an earlier AgentSession {ref.name} "
            f"(uid {other or 'unknown'}) that is being deleted; waiting for it to go"
        )


async def list_pods(ctx: OperatorContext, ref: SessionRef) -> list[dict[str, Any]]:
    """The session's pods as the apiserver lists them (not the cache): ``create_pod``'s guard."""
    return await ctx.kube.list_pods(ref.namespace, f"{LABEL_SESSION_UID}={ref.uid}")


async def prepare(
    ctx: OperatorContext, obs: Observation, early: asyncio.Task[None] | None
) -> list[dict[str, Any]] | None:
    """``prepare_pod`` and, when the session has a stored epoch, the guard's LIST of its pods
    (``list_pods``), concurrently; the LIST, or None when not made (a session's first pod:
    none can exist before its epoch is stored). Raises the first error of the two."""
    if not obs.status.epoch:
        await prepare_pod(ctx, obs, early)
        return None
    _, existing = await concurrently(prepare_pod(ctx, obs, early), list_pods(ctx, obs.ref))
    return cast("list[dict[str, Any]]", existing)


async def prepare_and_create(
    ctx: OperatorContext, obs: Observation, create: CreatePod, early: asyncio.Task[None] | None
) -> tuple[ObservedPod, ...]:
    """``prepare_pod`` then ``create_pod``: the placement of an epoch reserved already
    (``CreatePod.reserved``), beside the status write that stores it, without the guard's LIST
    (``create_pod`` says why)."""
    await prepare_pod(ctx, obs, early)
    return await create_pod(ctx, obs, create)


async def prepare_pod(
    ctx: OperatorContext, obs: Observation, early: asyncio.Task[None] | None = None
) -> None:
    """Make sure what a new pod of the session needs exists (none depends on another, nor on
    the epoch, so they are written concurrently): the Secrets (``prepare_objects``, or the task
    ``early`` already writing them), the namespace's PDB and NetworkPolicies (once per process)
    and a managed shared claim. When this process wrote the Secrets for the session's
    generation already (``SessionMemory.objects_ready``: a resume, a restart after a crash),
    the pod does not wait for a round trip that finds them so (a Secret GET). They are
    written again, so one deleted meanwhile comes back (``SessionMemory.objects_recheck``):
    for a created pod, which mounts the Secret, once it is created (``create_pod``); for an
    adopted warm pod, which is given the Secret's values in the adopt call, once its runtime
    answers (``session_apply.remember``), so a burst of resumes from a pool (a drain) does not
    send those writes beside its placements."""
    ref, spec, settings = obs.ref, obs.spec, ctx.settings
    needs: list[Awaitable[Any]] = []
    if early is not None:
        needs.append(early)
    elif ctx.memory(ref.uid).objects_ready == ref.generation and (
        ctx.secrets is None or ctx.memory.token(ref.uid) is not None
    ):
        # Written for this generation by this process already (a resume): written again after
        # the placement, so a deleted Secret comes back, off the placement's path.
        ctx.memory(ref.uid).objects_recheck = True
    else:
        needs.append(prepare_objects(ctx, ref, spec))
    if ctx.netpol is not None and ref.namespace not in ctx.netpol.done:
        needs.append(ctx.netpol.ensure(ref.namespace))  # the namespace's NetworkPolicies
    if ctx.disruption is not None and ref.namespace not in ctx.disruption.done:
        needs.append(ensure_disruption_budget(ctx, ref.namespace))
    if obs.claim is not None and obs.claim[1] == "ClaimCreating":
        needs.append(
            ctx.kube.create_pvc(
                build_shared_claim(ref.namespace, claim_name(spec, settings), settings)
            )
        )
    await concurrently(*needs)


async def ensure_disruption_budget(ctx: OperatorContext, namespace: str) -> None:
    """The namespace's session PodDisruptionBudget (``builders.pdb``), owned like its
    NetworkPolicies by the release's ClusterRole when one is configured."""
    assert ctx.disruption is not None
    owner = await ctx.netpol.owner_ref() if ctx.netpol is not None else None
    await ctx.disruption.ensure_namespace(namespace, owner)


async def prepare_objects(ctx: OperatorContext, ref: SessionRef, spec: AgentSessionSpec) -> None:
    """The Secrets of the session (options.json of ``ref``'s generation in ``<name>-berth``)."""
    try:
        await ensure_secrets(ctx, ref, spec)
    except BaseException:
        ctx.memory(ref.uid).objects_ready = None
        raise
    ctx.memory(ref.uid).objects_ready = ref.generation


def recheck_objects(ctx: OperatorContext, ref: SessionRef, spec: AgentSessionSpec) -> None:
    """When the session's pod was placed without waiting for its Secret
    (``SessionMemory.objects_recheck``), write them again now, in the background, once."""
    memory = ctx.memory(ref.uid)
    if memory.objects_recheck:
        memory.objects_recheck = False
        ctx.spawn(rewrite_objects(ctx, ref, spec))


async def rewrite_objects(ctx: OperatorContext, ref: SessionRef, spec: AgentSessionSpec) -> None:
    """``prepare_objects`` after a placement that did not wait for them
    (``SessionMemory.objects_recheck``): a failure is logged, and the session's next pod
    waits for them again (``SessionMemory.objects_ready`` forgets the generation)."""
    try:
        await prepare_objects(ctx, ref, spec)
    except Exception as exc:
        log.warning("%s: session Secret not written: %s", ref.key, exc)


async def create_pod(
    ctx: OperatorContext,
    obs: Observation,
    create: CreatePod,
    *,
    first_pod: bool = False,
    existing: list[dict[str, Any]] | None = None,
) -> tuple[ObservedPod, ...]:
    """:func:`place_pod` in a span (``berth_operator.tracing``): ``berth.resume`` when the pod
    resumes a run, else ``berth.place``, with the epoch, the reason, the nodes avoided (the one
    a passivation moved the session away from) and whether other pods held it back."""
    span = decision_span(
        RESUME if create.resume_run_id else PLACE,
        obs.ref,
        epoch=create.epoch,
        reason=create.reason,
        node=create.avoid_nodes[0] if create.avoid_nodes else None,
        identity=identity_of(obs.spec),
        parent=ctx.memory(obs.ref.uid).run_trace if create.resume_run_id else "",
        **{names.RUN_ID: create.resume_run_id},
    )
    with active(span):
        listed = await place_pod(ctx, obs, create, first_pod, existing, traceparent(span))
        span.set_attribute("berth.placement.held_back_by", len(listed))
        return listed


async def place_pod(
    ctx: OperatorContext,
    obs: Observation,
    create: CreatePod,
    first_pod: bool = False,
    existing: list[dict[str, Any]] | None = None,
    trace: str = "",
) -> tuple[ObservedPod, ...]:
    """Create the pod of ``create.epoch`` (``prepare_pod`` has run) unless the apiserver
    (listed directly: the guard against a stale cache and a restarted operator) shows other
    pods of the session that have not ended (``ObservedPod.ended``); return the pods listed
    then (empty when the pod was created or already exists).

    The LIST is skipped when it cannot show anything this process does not know:
    - ``first_pod``: this iteration stored epoch 1 over a status without an epoch (a PUT with
      the resourceVersion of that status). Pods of an epoch are only created after the epoch
      is stored, so no pod of this session can exist.
    - ``create.reserved``: the replacement of the current pod, whose passivation request this
      process stored (``reconcile.passivation.reservation``; kept in memory only, so a
      restarted operator or a new leader never holds one and lists). That pod has ended (the
      replacement is decided on its end), and when it was placed every other pod of the
      session had ended (that placement's own guard, or by the same rule one epoch earlier).
      Any failed or lost placement since then used the reservation up, so the next placement
      lists again.

    ``existing``: the LIST, made already (``list_pods``, beside the status write); None lists
    here."""
    ref = obs.ref
    pod = build_session_pod(
        ref,
        obs.spec,
        ctx.settings,
        epoch=create.epoch,
        resume_run_id=create.resume_run_id,
        reason=create.reason,
        avoid_nodes=create.avoid_nodes,
        traceparent=trace,
    )
    target = pod["metadata"]["name"]
    if not first_pod and not create.reserved:
        if existing is None:
            existing = await list_pods(ctx, ref)
        if any(p["metadata"]["name"] == target for p in existing):
            ctx.mark_inflight(ref.uid, target)
            return ()
        listed = ctx.reported_ends(ref.uid, (observe_pod(p) for p in existing))
        if any(not p.ended for p in listed):  # an ended pod never runs again: no obstacle
            return tuple(listed)
    if create.adopt is not None and await adopt_for_session(ctx, obs, create):
        return ()  # a warm pod of the named pool became this epoch's pod
    try:
        await ctx.kube.create_pod(pod)
        PLACEMENTS.labels(reason=create.reason).inc()
    except AlreadyExists:
        await name_taken_by_earlier_object(ctx, ref, target)
    ctx.mark_inflight(ref.uid, target)
    recheck_objects(ctx, ref, obs.spec)  # a created pod mounts the Secret: not later than now
    return ()
