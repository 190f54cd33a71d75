"""kopf handlers of SessionWarmPools, and the adoption of a warm pod by a session.

- ``warm_pods``            index: (namespace, pool) → its waiting pods (label berth.dev/warm-pool;
                           an adopted pod loses the label and leaves the index).
- ``warm_pod_event``       wakes the pool's daemon on any change of one of its pods.
- ``warmpool_event``       wakes the daemon on any change of the pool (spec, /scale).
- ``warmpool_daemon``      one loop per pool: make sure ``<pool>-warm`` (the adoption token)
                           exists, ``decide_pool``, delete and create pods, write status; then
                           sleep until woken or :data:`POOL_REQUEUE_SECONDS`.
- :func:`adopt_for_session` called by the AgentSession handler instead of creating a pod when the
                           session names a pool (``spec.warmPoolRef``).

Adoption, in order: pick an eligible warm pod (``choose_warm_pod``: Ready, current template, not
on a node being drained or to be avoided), claim it in memory, ``POST /v1/adopt`` with the
pool's token and the session's epoch, options and secrets (the pod accepts one session only: a
second adopter gets 409 and tries the next pod), then patch it into the session's pod of the new
epoch (labels, annotations, owner reference, with the pod's uid as precondition). The session's
status already holds the new epoch (written before, as for a create), and the epoch's pod name
is marked in flight, so the next decision waits for the patched pod. (For the replacement of a
passivated pod whose request this process stored, the status write goes beside the adoption:
that request reserved the epoch, ``reconcile.passivation.replacement_epoch``.) If the patch
fails, or this process dies between the two calls, the pod runs the session unlabelled: it is
deleted (when the patch failed), the session's next decision finds no pod of its epoch and
places one of a higher epoch, which fences the orphan out of the store (docs/architecture.md §6) —
never two pods of one epoch.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from datetime import UTC, datetime
from typing import Any, cast

import kopf
from pydantic import ValidationError

from berth_operator.api.constants import GROUP, VERSION
from berth_operator.api.sessionwarmpool import (
    LABEL_WARM_POOL,
    WARM_TOKEN_KEY,
    WARMPOOL_PLURAL,
    SessionWarmPoolSpec,
    SessionWarmPoolStatus,
    template_hash,
)
from berth_operator.builders.claim import build_shared_claim
from berth_operator.builders.names import pod_name
from berth_operator.builders.redis_ca import redis_ca_path
from berth_operator.builders.secrets import decode_data, needs_task_master, session_data
from berth_operator.builders.session_pod import build_options
from berth_operator.builders.warm_pod import (
    adopt_body,
    adoption_patch,
    build_warm_pod,
    build_warm_secret,
    warm_secret_name,
)
from berth_operator.errors import AlreadyExists, KubeError, NotFound, RuntimeUnreachable
from berth_operator.handlers.context import OperatorContext
from berth_operator.handlers.volume_setup import claim_setup_status
from berth_operator.handlers.warm_state import PoolKey, PoolView
from berth_operator.k8s.warmpool import WarmPoolApi
from berth_operator.reconcile.passivation import Trigger
from berth_operator.reconcile.plan import CreatePod, Observation
from berth_operator.reconcile.warmpool import (
    PoolInput,
    WarmPod,
    decide_pool,
    observe_warm_pod,
)
from berth_operator.warm_metrics import (
    WARM_ADOPTION_SECONDS,
    WARM_ADOPTIONS,
    forget_pool,
    set_pool_pods,
)

log = logging.getLogger("berth.operator.warm")

WARM_POD_LABELS = {LABEL_WARM_POOL: kopf.PRESENT}
POOL_REQUEUE_SECONDS = 10.0
ERROR_RETRY_SECONDS = 5.0
SETUP_RETRY_SECONDS = 2.0
"""How soon a pool waiting for its namespace's claim set-up looks again (seconds)."""
MAX_ADOPTION_TRIES = 3
"""Warm pods tried by one adoption before the session's pod is created instead."""


def _wake_key(key: PoolKey) -> str:
    return f"swp:{key[0]}/{key[1]}"


@kopf.index("pods", labels=WARM_POD_LABELS)
async def warm_pods(
    body: kopf.Body, namespace: str | None, labels: kopf.Labels, **_: Any
) -> dict[PoolKey, WarmPod]:
    """Index warm pods by (namespace, pool)."""
    return {(namespace or "", labels[LABEL_WARM_POOL]): observe_warm_pod(cast(Any, body))}


@kopf.on.event("pods", labels=WARM_POD_LABELS)
async def warm_pod_event(
    namespace: str | None, labels: kopf.Labels, memo: kopf.Memo, **_: Any
) -> None:
    """Wake the pool whose pod changed."""
    ctx: OperatorContext = memo.ctx
    ctx.wake(_wake_key((namespace or "", labels[LABEL_WARM_POOL])))


@kopf.on.event(GROUP, VERSION, WARMPOOL_PLURAL)
async def warmpool_event(name: str, namespace: str | None, memo: kopf.Memo, **_: Any) -> None:
    """Wake the pool's daemon on any change of the object."""
    ctx: OperatorContext = memo.ctx
    ctx.wake(_wake_key((namespace or "", name)))


@kopf.daemon(GROUP, VERSION, WARMPOOL_PLURAL, cancellation_timeout=2.0)
async def warmpool_daemon(
    stopped: kopf.DaemonStopped,
    name: str,
    namespace: str | None,
    uid: str,
    memo: kopf.Memo,
    **kwargs: Any,
) -> None:
    """Reconcile one SessionWarmPool until it is deleted or the operator stops."""
    ctx: OperatorContext = memo.ctx
    index = cast("kopf.Index[PoolKey, WarmPod]", kwargs["warm_pods"])
    ctx.warm.pods_index = index
    disruptions = cast("kopf.Index[str, Trigger] | None", kwargs.get("node_disruptions"))
    key = (namespace or "", name)
    wake = ctx.wakeup(_wake_key(key))
    try:
        while not stopped:
            wake.clear()
            disrupted = frozenset(disruptions or ())
            delay = await reconcile_pool(ctx, key, uid, list(index.get(key, [])), disrupted)
            if delay is None:
                return
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(delay):
                    await wake.wait()
    finally:
        if stopped:
            ctx.warm.forget(key)
            ctx.drop_wakeup(_wake_key(key), wake)
            forget_pool(*key)


def _api(ctx: OperatorContext) -> WarmPoolApi:
    return WarmPoolApi(ctx.kube.session)


async def _ensure_token(ctx: OperatorContext, key: PoolKey, uid: str) -> None:
    """Read (or create) ``<pool>-warm`` once; keep its token in memory. The Redis CA its pods
    mount is brought up to date at the same time."""
    if key in ctx.warm.tokens or ctx.secrets is None:
        return
    ns, pool = key
    if redis_ca_path(ctx.settings.redis.for_sessions):  # mounted by the pool's pods
        await ctx.secrets.ensure_redis_ca(ns, [ctx.settings.redis.for_sessions])
    secret = await ctx.secrets.read_secret(ns, warm_secret_name(pool))
    if secret is None:
        with contextlib.suppress(AlreadyExists):
            await ctx.secrets.create_secret(build_warm_secret(ns, pool, uid))
        secret = await ctx.secrets.read_secret(ns, warm_secret_name(pool))
    token = decode_data(secret or {}).get(WARM_TOKEN_KEY)
    if not token:
        raise KubeError(f"secret {ns}/{warm_secret_name(pool)} has no {WARM_TOKEN_KEY}")
    ctx.warm.tokens[key] = token.decode()


async def _namespace_ready(ctx: OperatorContext, ns: str, spec: SessionWarmPoolSpec) -> bool:
    """Make the namespace objects warm pods need, as a session's first pod does: the managed
    shared claim (created when missing) and its one-shot set-up (``handlers.volume_setup``:
    warm pods mount ``store/<ns>`` and ``workspaces/<ns>`` below its root, so they wait for it),
    and the namespace's NetworkPolicies (warm pods are session pods to them). False while the
    set-up runs or failed (no warm pod is created yet). Raises KubeError."""
    if ctx.netpol is not None and ns not in ctx.netpol.done:
        await ctx.netpol.ensure(ns)
    if not ctx.settings.claims.managed:
        return True
    store = spec.template.store
    claim = (store.claim_name if store else None) or ctx.settings.claims.default_name
    body = await ctx.kube.get_pvc(ns, claim)
    if body is None:
        body = build_shared_claim(ns, claim, ctx.settings)
        await ctx.kube.create_pvc(body)
    status = await claim_setup_status(ctx.kube, ctx.settings, ns, claim, body)
    if status is not None:
        log.info("warm pool in %s: waiting for the shared claim: %s", ns, status[2])
    return status is None


async def reconcile_pool(
    ctx: OperatorContext,
    key: PoolKey,
    uid: str,
    cached: list[WarmPod],
    disrupted: frozenset[str],
) -> float | None:
    """One iteration; returns seconds until the next one (None: the pool is gone)."""
    try:
        return await _reconcile_pool(ctx, key, uid, cached, disrupted)
    except ValidationError as exc:
        log.error("SessionWarmPool %s/%s does not parse: %s", *key, exc)
        return 60.0
    except KubeError as exc:
        log.warning("warm pool %s/%s: %s", *key, exc)
        return ERROR_RETRY_SECONDS


async def _reconcile_pool(
    ctx: OperatorContext,
    key: PoolKey,
    uid: str,
    cached: list[WarmPod],
    disrupted: frozenset[str],
) -> float | None:
    ns, name = key
    api = _api(ctx)
    body = await api.get_pool(ns, name)
    if (
        body is None
        or body["metadata"].get("uid") != uid
        or body["metadata"].get("deletionTimestamp")
    ):
        return None
    spec = SessionWarmPoolSpec.model_validate(body.get("spec") or {})
    before = SessionWarmPoolStatus.model_validate(body.get("status") or {})
    if key not in ctx.warm.adopted_total and before.adopted_total:
        ctx.warm.adopted_total[key] = before.adopted_total  # counted by an earlier process
    thash = template_hash(spec.template, ctx.settings.images.session)
    ctx.warm.pools[key] = PoolView(uid=uid, template=spec.template, template_hash=thash)
    await _ensure_token(ctx, key, uid)
    if not await _namespace_ready(ctx, ns, spec):
        return SETUP_RETRY_SECONDS
    names = [p.name for p in cached]
    held, due = ctx.warm.refills_held(key, ctx.settings.placement.warm_refill_delay_seconds)
    inp = PoolInput(
        name=name,
        generation=int(body["metadata"].get("generation") or 0),
        replicas=spec.replicas,
        template_hash=thash,
        pods=tuple(cached),
        now=datetime.now(UTC).replace(microsecond=0),
        status=before,
        inflight=ctx.warm.inflight_names(key, names),
        claimed=ctx.warm.claimed_names(key, names),
        disrupted=disrupted,
        refills_held=held,
    )
    plan = decide_pool(inp)
    if plan.create:
        # The guard against a stale cache and a restarted operator: decide again on a LIST.
        listed = await ctx.kube.list_pods(ns, f"{LABEL_WARM_POOL}={name}")
        fresh = tuple(observe_warm_pod(p) for p in listed)
        plan = decide_pool(PoolInput(**{**_fields(inp), "pods": fresh, "inflight": frozenset()}))
    for pod_name_, pod_uid, why in plan.delete:
        log.info("warm pool %s/%s: deleting %s (%s)", ns, name, pod_name_, why)
        await ctx.kube.delete_pod(ns, pod_name_, uid=pod_uid)
    for _ in range(plan.create):
        pod = build_warm_pod(ns, name, uid, spec.template, thash, ctx.settings)
        await ctx.kube.create_pod(pod)
        ctx.warm.mark_created(key, pod["metadata"]["name"])
    if plan.warning is not None:
        reason, message = plan.warning
        kopf.event(cast(kopf.Body, body), type="Warning", reason=reason, message=message)
    await _write_status(ctx, api, key, plan.status, before)
    return POOL_REQUEUE_SECONDS if due is None else min(POOL_REQUEUE_SECONDS, due)


async def _write_status(
    ctx: OperatorContext,
    api: WarmPoolApi,
    key: PoolKey,
    st: SessionWarmPoolStatus,
    before: SessionWarmPoolStatus,
) -> None:
    """Write the pool's status ``st`` (with this process's adoption counts) when it changed, and
    its pod gauges."""
    ns, name = key
    st.adopted_total = ctx.warm.adopted_total.get(key, st.adopted_total or 0)
    st.last_adoption_at = ctx.warm.last_adoption.get(key, st.last_adoption_at)
    set_pool_pods(ns, name, st.ready_replicas or 0, st.replicas or 0, st.adopting_replicas or 0)
    if st.wire() != before.wire():
        with contextlib.suppress(NotFound):
            await api.patch_status(ns, name, st.wire())


def _fields(inp: PoolInput) -> dict[str, Any]:
    return {f: getattr(inp, f) for f in PoolInput.__dataclass_fields__}


# ---------------------------------------------------------------------------------------------
# adoption (called by handlers.agentsession)


async def _secret_data(ctx: OperatorContext, obs: Observation) -> dict[str, bytes] | None:
    """The values of the session's ``<name>-berth`` Secret as the created pod would mount them
    (the handler has just made sure the Secret exists and cached its token)."""
    ref = obs.ref
    token = ctx.memory.token(ref.uid)
    if token is None or ctx.secrets is None:
        return None
    master = None
    if needs_task_master(obs.spec):
        master = await ctx.secrets.ensure_task_master(ref.namespace)
    return session_data(ref, token, master, ctx.settings.redis.for_sessions)


async def adopt_for_session(ctx: OperatorContext, obs: Observation, create: CreatePod) -> bool:
    """Give the session a warm pod of its pool instead of creating its pod, trying the pods the
    decision chose (``create.adopt``, ``warmpool.choose_adoption``) in order (module docstring).

    True when a warm pod became the session's pod of ``create.epoch`` (marked in flight under
    the epoch's pod name, so the session's next decision waits for it), or took the epoch and
    was deleted (the next pass places the next epoch); False when the caller must create the
    pod (no pool, template differs, no eligible pod, every try lost)."""
    adoption, ref = create.adopt, obs.ref
    if adoption is None:
        return False
    key = (ref.namespace, adoption.pool)
    token = ctx.warm.tokens.get(key)
    if not adoption.candidates or token is None:
        WARM_ADOPTIONS.labels(outcome=adoption.outcome or "no_pool").inc()
        if adoption.why:
            log.info("%s: not adopted from pool %s: %s", ref.key, key[1], adoption.why)
        return False
    data = await _secret_data(ctx, obs)
    if data is None:
        return False
    options = build_options(ref, obs.spec, ctx.settings)
    body = adopt_body(
        ref, obs.spec, options, data, epoch=create.epoch, resume_run_id=create.resume_run_id
    )
    tries = 0
    for pod in adoption.candidates:  # those claimed since the decision are skipped, not tried
        if tries == MAX_ADOPTION_TRIES:
            break
        if not ctx.warm.claim(key, pod.name):
            continue
        tries += 1
        if await _adopt(ctx, obs, create, pod, body, token):
            return True
    return False


async def _adopt(
    ctx: OperatorContext,
    obs: Observation,
    create: CreatePod,
    pod: WarmPod,
    body: dict[str, Any],
    token: str,
) -> bool:
    """One try: ``POST /v1/adopt`` to the claimed warm ``pod``, then relabel it into the
    session's pod of ``create.epoch``. False when the pod refused or was unreachable (released;
    the next candidate is tried); True when it took the epoch, relabelled or (the patch
    refused) deleted."""
    ref, pool = obs.ref, create.adopt.pool if create.adopt else ""
    key = (ref.namespace, pool)
    started = time.perf_counter()
    try:
        await ctx.runtime.adopt(pod.pod_ip, body, token)
    except RuntimeUnreachable as exc:
        ctx.warm.release(key, pod.name)
        WARM_ADOPTIONS.labels(outcome="failed").inc()
        log.info("%s: warm pod %s not adopted: %s", ref.key, pod.name, exc)
        return False
    ctx.mark_inflight(ref.uid, pod_name(ref.name, create.epoch))
    ctx.wake(_wake_key(key))  # the pool's status; its refill when due (refills_held)
    patch = adoption_patch(
        ref,
        obs.spec,
        pool,
        pod.uid,
        epoch=create.epoch,
        reason=create.reason,
        resume_run_id=create.resume_run_id,
    )
    try:
        await _api(ctx).adopt_pod(ref.namespace, pod.name, patch)
    except KubeError as exc:
        WARM_ADOPTIONS.labels(outcome="failed").inc()
        log.warning("%s: adopted pod %s not relabelled (%s); deleting it", ref.key, pod.name, exc)
        # The epoch was handed to that process: never used again. Its pod name will not
        # show, so nothing is in flight; the next pass places the next epoch at once.
        ctx.clear_inflight(ref.uid)
        ctx.wake_session(ref.uid)
        await ctx.kube.delete_pod(ref.namespace, pod.name, uid=pod.uid, force=True)
        return True
    WARM_ADOPTION_SECONDS.observe(time.perf_counter() - started)
    WARM_ADOPTIONS.labels(outcome="adopted").inc()
    ctx.warm.adopted(key, datetime.now(UTC).replace(microsecond=0))
    log.info("%s: adopted warm pod %s of pool %s (epoch %d)", ref.key, pod.name, pool, create.epoch)
    return True
