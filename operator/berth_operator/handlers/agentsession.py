"""kopf handlers of AgentSession and of session pods.

- ``session_pods``            index: session uid → observed pods (the watch cache of pods).
- ``migrating_sessions``      index: uids of the sessions whose status says they are migrating to
                              a new image (``reconcile.migration.in_flight``); kopf fills every
                              index from its first listing before any handler runs, so a restarted
                              operator counts the migrations in flight before it admits more.
- ``pod_event``               queues the owning session on any pod change.
- ``agentsession_event``      stores the object (without managedFields) and queues the session on
                              any change (spec, annotations, status); starts the workers. On
                              deletion it drops all kept for the session and makes sure a store
                              to be deleted is (``owes_store_cleanup``).
- ``reconcile_queued``        one pass of a session, run by one of ``max_concurrent_reconciles``
                              workers (``handlers.session_workers``); the session is queued again
                              after the plan's requeue time (status refresh from /v1/state on a
                              timer) or at its next event, whichever comes first.
- ``agentsession_delete``     for a session with ``berth.dev/delete-store: "true"``: stops its
                              pods, then runs the store-cleanup Job. kopf adds its finalizer only
                              to such a session once it has an epoch (``needs_delete_handler``);
                              other sessions need no finalizer: their pods, Secret and PDB are
                              owned by them, so garbage collection removes them.

One reconcile pass (``reconcile_session``): take the newest known object — as the watch showed it,
or the answer of the session's last status write until the watch has caught up with it, or a fresh
GET after a lost race (``handlers.session_body``) — gather pods (cache + in-flight), nodes (the node
watch cache), /v1/state (with the session's API token, read once from its ``<name>-berth`` Secret
and cached) and — when a pod is to be placed — missing LaneWorkers, whether the LLM Secret may be
used (label ``berth.dev/llm-credentials: "true"``, allowed baseURL) and the shared claim (a Bound
claim is remembered for a few seconds, an LLM Secret allowed for Berth for two); ``decide``; then
write status (PUT with resourceVersion; skipped when unchanged, and deferred briefly when only
information changed: ``reconcile.coalesce``), delete pods that may still run, and — only after
the status with the bumped epoch is stored, or beside that write for the replacement of a pod
whose passivation request this process stored (that request reserved the epoch:
``reconcile.passivation.replacement_epoch``) — LIST the session's pods straight from the apiserver
(skipped for a session's first pod, which cannot exist before its epoch does) and create the new
pod if none that has not ended is there (``ObservedPod.ended``), or, for a session naming a
SessionWarmPool, have a warm pod of the pool adopted instead (``handlers.sessionwarmpool``);
ended pods are deleted after that. What the pod needs (the namespace's ``berth-task-key`` for
external lanes, the ``<name>-berth`` Secret with options.json, the PDB) is written concurrently
with the status — on a session's first pass already beside the reads (``_prepare_early``). A
Conflict restarts the iteration on a fresh GET; other API errors back off. When what follows
the stored epoch fails (those objects, the LIST, the create), the failure is remembered
(``OperatorContext.create_failed``) and the next passes place the same epoch again after the
placement backoff, saying why in status (``reconcile.session._place_again``). Secret values never
reach logs, status or Events.

kopf writes nothing to an AgentSession unless its store is to be deleted with it (no kopf
diff-base: ``berth_operator.persistence``; its finalizer only then: ``needs_delete_handler``,
on the watch event of the session's first status write, so that write never races it).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import time
from collections.abc import Awaitable, Iterable, Mapping
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any, cast

import kopf
from pydantic import ValidationError

from berth_operator.api.agentsession import AgentSessionSpec, AgentSessionStatus
from berth_operator.api.common import SessionRef
from berth_operator.api.constants import (
    ANNOTATION_DELETE_STORE,
    COMPONENT_SESSION,
    GROUP,
    LABEL_COMPONENT,
    LABEL_SESSION_UID,
    SESSION_PLURAL,
    VERSION,
)
from berth_operator.api.options import RuntimeState
from berth_operator.builders.claim import build_shared_claim, claim_name, claim_status
from berth_operator.builders.cleanup_job import build_store_cleanup_job
from berth_operator.builders.pdb import build_session_pdb, pdb_name
from berth_operator.builders.secrets import (
    credentials_allowed,
    credentials_view,
    llm_credentials_problem,
    needs_task_master,
)
from berth_operator.builders.session_pod import (
    build_options,
    build_session_pod,
    render_options,
)
from berth_operator.errors import (
    AlreadyExists,
    Conflict,
    KubeError,
    NotFound,
    RuntimeUnauthorized,
    RuntimeUnreachable,
)
from berth_operator.handlers.context import OperatorContext
from berth_operator.handlers.session_body import SessionBody
from berth_operator.handlers.session_workers import LiveSession
from berth_operator.handlers.sessionwarmpool import adopt_for_session
from berth_operator.handlers.status_writes import write_status
from berth_operator.metrics import (
    PLACEMENTS,
    RECONCILE_ERRORS,
    RECONCILE_SECONDS,
    STATE_REFRESH_FAILURES,
    observe_passivation,
)
from berth_operator.reconcile import idle, migration
from berth_operator.reconcile import passivation as pv
from berth_operator.reconcile.coalesce import write_delay
from berth_operator.reconcile.observe import ObservedNode, ObservedPod, observe_node, observe_pod
from berth_operator.reconcile.passivation import Trigger, node_disruption
from berth_operator.reconcile.plan import CreatePod, DeletePod, Observation, PassivateCall, Plan
from berth_operator.reconcile.replacement import parse_termination
from berth_operator.reconcile.session import decide

log = logging.getLogger("berth.operator")

POD_LABELS = {LABEL_SESSION_UID: kopf.PRESENT, LABEL_COMPONENT: COMPONENT_SESSION}
ERROR_RETRY_SECONDS = 5.0
CLAIM_READY_TTL_SECONDS = 10.0
"""How long a Bound shared claim is taken as still Bound without reading it again."""
LLM_SECRET_TTL_SECONDS = 2.0
"""How long an LLM Secret allowed for Berth is taken as still allowed without reading it again."""
STORE_CLEANUP_WAIT_SECONDS = 120.0
"""How long a deleted session's store cleanup waits for its pods to go (``owes_store_cleanup``)."""
STORE_CLEANUP_POLL_SECONDS = 2.0
"""How often that wait lists the pods."""
UNPARSEABLE_RETRY_SECONDS = 60.0
"""Seconds before an object that does not parse is read again (an edit wakes it sooner)."""
OUTCOME_WAIT_SECONDS = 30
"""The longest single ``GET /v1/outcome`` long poll of a passivating pod."""
OUTCOME_SLACK_SECONDS = 10
"""How long past a passivation's deadline its pod's own report of its end is still awaited."""


@kopf.index("pods", labels=POD_LABELS)  # type: ignore[arg-type]
async def session_pods(body: kopf.Body, labels: kopf.Labels, **_: Any) -> dict[str, ObservedPod]:
    """Index session pods by the uid of their AgentSession."""
    return {labels[LABEL_SESSION_UID]: observe_pod(body)}


@kopf.index(GROUP, VERSION, SESSION_PLURAL)
async def migrating_sessions(uid: str, status: kopf.Status, **_: Any) -> dict[str, bool]:
    """Index the AgentSessions whose status says they are migrating to a new image, by uid.

    Only those: ``{}`` for any other session, which drops its earlier entry (kopf keeps an
    object's previous entry when its indexing function returns None, and replaces it with
    what it returns otherwise), so reading the index costs the migrating sessions, not all."""
    try:
        parsed = AgentSessionStatus.model_validate(dict(status))
    except ValidationError:
        return {}
    return {uid: True} if migration.in_flight(parsed) else {}


def migrating_uids(index: kopf.Index[str, bool] | None) -> list[str]:
    """The uids the ``migrating_sessions`` index marks as migrating ([] outside kopf)."""
    if index is None:
        return []
    return list(index)  # only migrating sessions have an entry


@kopf.on.event("pods", labels=POD_LABELS)  # type: ignore[arg-type]
async def pod_event(labels: kopf.Labels, memo: kopf.Memo, **_: Any) -> None:
    """Wake the session whose pod changed."""
    ctx: OperatorContext = memo.ctx
    ctx.wake_session(labels[LABEL_SESSION_UID])


@kopf.on.event(GROUP, VERSION, SESSION_PLURAL)
async def agentsession_event(
    type: str | None,  # kopf's name for the watch event's type
    uid: str,
    body: kopf.Body,
    memo: kopf.Memo,
    **kwargs: Any,
) -> None:
    """Store the object (without managedFields) and queue the session for a worker; drop it
    once deleted. The first event starts the ``max_concurrent_reconciles`` workers in this
    handler's context (``handlers.session_workers``).

    kopf passes its indices by name: ``session_pods`` (the pod index), ``node_disruptions``
    (the disrupted nodes), ``node_states`` (every node's observed state, handlers.nodes) and
    ``migrating_sessions`` (the sessions migrating to a new image as the watch shows them);
    the workers read those the first event handed over (kopf's indices are live mappings)."""
    ctx: OperatorContext = memo.ctx
    workers = ctx.sessions
    if type == "DELETED":
        workers.gone(uid)
        ctx.forget(uid)
        if owes_store_cleanup(body):
            ctx.spawn(_store_cleanup_after_pods(ctx, body))
        return
    workers.observe(uid, body)
    live = workers.state.get(uid)
    if live is not None:
        live.body.seen(live.live)  # drop the last write's answer once the watch shows it
    if not workers.started:
        workers.indices = {k: kwargs.get(k) for k in INDICES}
        workers.start(
            ctx.settings.server.max_concurrent_reconciles,
            lambda key: reconcile_queued(ctx, key),
        )


INDICES = ("session_pods", "migrating_sessions", "node_disruptions", "node_states")
"""The kopf indices a session's reconcile reads."""


@kopf.on.cleanup()
async def stop_session_workers(memo: kopf.Memo, **_: Any) -> None:
    """Stop the AgentSession workers when kopf stops (a reconcile in progress gets 2 s)."""
    ctx = getattr(memo, "ctx", None)
    if isinstance(ctx, OperatorContext):
        await ctx.sessions.stop(grace_seconds=2.0)


async def reconcile_queued(ctx: OperatorContext, uid: str) -> float | None:
    """One pass of session ``uid`` taken from the queue; seconds until its next pass, or None
    when it needs none until its next event (deleted, being deleted, or unknown)."""
    workers = ctx.sessions
    known = workers.bodies.get(uid)
    if known is None:
        return None
    live = workers.state.get(uid)
    if live is None:
        live = workers.state[uid] = LiveSession(
            SessionBody(),
            lambda: workers.bodies.get(uid) or {},  # looked up each time: holds no object
            workers.indices.get("node_states"),
            workers.indices.get("migrating_sessions"),
        )
    index = cast("kopf.Index[str, ObservedPod] | None", workers.indices.get("session_pods"))
    disrupted = cast("kopf.Index[str, Trigger] | None", workers.indices.get("node_disruptions"))
    meta = known.get("metadata") or {}
    return await reconcile_session(
        ctx,
        meta.get("namespace") or "",
        meta.get("name") or "",
        uid,
        index.get(uid, []) if index is not None else [],
        _disruptions(disrupted),
        live,
    )


def store_deletion_asked(annotations: Mapping[str, str]) -> bool:
    """Whether the annotation ``berth.dev/delete-store: "true"`` is set."""
    return annotations.get(ANNOTATION_DELETE_STORE, "").lower() == "true"


def needs_delete_handler(
    status: Mapping[str, Any], annotations: Mapping[str, str], **_: Any
) -> bool:
    """kopf's filter of ``agentsession_delete`` (so kopf adds its finalizer only then): the
    session's store is to be deleted with it (``store_deletion_asked``) and it was given an
    epoch (``status.epoch``: its pods may have written the store).

    Nothing else needs the operator at deletion: the session's pods, Secret and PDB carry its
    owner reference, so garbage collection removes them (Kubernetes' background cascading
    deletion), and what the operator keeps in memory is dropped on the DELETED watch event. A
    finalizer on every session would cost a PATCH each (and another at deletion) for nothing.

    Why not before the first epoch: that status write carries a resourceVersion precondition
    (optimistic concurrency), and kopf's PATCH would race it; kopf adds the finalizer on the
    watch event of the write instead. A session deleted before then is handled by its DELETED
    event (``owes_store_cleanup``)."""
    return store_deletion_asked(annotations) and bool(status.get("epoch"))


@kopf.on.delete(GROUP, VERSION, SESSION_PLURAL, when=needs_delete_handler)
async def agentsession_delete(
    body: kopf.Body,
    name: str,
    namespace: str | None,
    uid: str,
    spec: kopf.Spec,
    memo: kopf.Memo,
    **_: Any,
) -> None:
    """Stop the session pods, then run the store-cleanup Job (berth.dev/delete-store is "true").
    Only for a session that matches ``needs_delete_handler`` (kopf checks the filter at the
    deletion too): kopf adds its finalizer then, and removes it at the next event once no
    handler needs it (the annotation taken back, or a finalizer left by an older operator on a
    session that never asked). What the operator keeps for the session is dropped on its
    DELETED watch event (``agentsession_event``)."""
    ctx: OperatorContext = memo.ctx
    namespace = namespace or ""
    pods = await ctx.kube.list_pods(namespace, f"{LABEL_SESSION_UID}={uid}")
    for pod in pods:
        meta = pod["metadata"]
        if not meta.get("deletionTimestamp"):
            await ctx.kube.delete_pod(namespace, meta["name"], uid=meta["uid"])
    if pods:
        raise kopf.TemporaryError(
            "waiting for session pods to stop before deleting the store", delay=2
        )
    try:
        parsed = AgentSessionSpec.model_validate(dict(spec))
    except ValidationError as exc:
        raise kopf.PermanentError(f"cannot build the store-cleanup Job: {exc}") from exc
    ref = SessionRef(namespace, name, uid)
    await ctx.kube.create_job(build_store_cleanup_job(ref, parsed, ctx.settings))
    kopf.info(body, reason="StoreCleanup", message="store-cleanup Job created")


def owes_store_cleanup(body: Mapping[str, Any]) -> bool:
    """Whether the last state of a deleted AgentSession (its DELETED watch event) asked for
    its store to be deleted (``berth.dev/delete-store: "true"``).

    Normally ``agentsession_delete`` has created the store-cleanup Job by then. But kopf adds
    its finalizer only once the session needs it (``needs_delete_handler``), on the watch
    event of the write that made it so; a session deleted before that PATCH lands vanishes
    without the handler — its first pod may already have started writing the store, or the
    annotation came just before the delete. The DELETED event is then the last chance."""
    meta = body.get("metadata") or {}
    return store_deletion_asked(meta.get("annotations") or {})


async def _store_cleanup_after_pods(ctx: OperatorContext, body: Mapping[str, Any]) -> None:
    """Create the store-cleanup Job of the deleted session ``body`` once none of its pods
    remains (garbage collection removes them: they are owned by the session), as
    ``agentsession_delete`` does. Idempotent: the Job's name is fixed per session object, so
    when the handler has created it already this is an AlreadyExists, which is fine. Gives
    up, with a warning, after ``STORE_CLEANUP_WAIT_SECONDS`` or on an API error."""
    meta = body.get("metadata") or {}
    ref = SessionRef(meta.get("namespace") or "", meta.get("name") or "", meta.get("uid") or "")
    deadline = time.monotonic() + STORE_CLEANUP_WAIT_SECONDS
    try:
        parsed = AgentSessionSpec.model_validate(dict(body.get("spec") or {}))
        while await ctx.kube.list_pods(ref.namespace, f"{LABEL_SESSION_UID}={ref.uid}"):
            if time.monotonic() > deadline:
                log.warning("%s: pods still there; its store was not deleted", ref.key)
                return
            await asyncio.sleep(STORE_CLEANUP_POLL_SECONDS)
        await ctx.kube.create_job(build_store_cleanup_job(ref, parsed, ctx.settings))
    except (ValidationError, KubeError) as exc:
        log.warning("%s: store-cleanup Job not created: %s", ref.key, exc)
        return
    log.info("%s: store-cleanup Job ensured after the session was deleted", ref.key)


# ---------------------------------------------------------------------------------------------


async def _node(ctx: OperatorContext, name: str, live: LiveSession | None) -> ObservedNode:
    """Node ``name`` as the node watch last saw it, or read from the apiserver when the watch
    has not shown it (or outside a worker)."""
    if live is not None and live.nodes is not None:
        for node in live.nodes.get(name, []):
            return node
    return observe_node(await ctx.kube.get_node(name), name)


async def _nodes_for(
    ctx: OperatorContext,
    pods: Iterable[ObservedPod],
    status: AgentSessionStatus,
    live: LiveSession | None,
) -> dict[str, ObservedNode]:
    """Nodes of pods that are not obviously healthy (not ready, terminating or unreachable)."""
    nodes: dict[str, ObservedNode] = {}
    for pod in pods:
        if not pod.node_name or pod.node_name in nodes:
            continue
        if pod.terminated is not None and not pod.deleting:
            continue
        if pod.ready and pod.phase == "Running" and pod.epoch == (status.epoch or 0):
            continue
        nodes[pod.node_name] = await _node(ctx, pod.node_name, live)
    return nodes


async def _missing_laneworkers(ctx: OperatorContext, ns: str, spec: AgentSessionSpec) -> list[str]:
    missing: list[str] = []
    for lane in (spec.lanes or {}).values():
        if lane.lane_worker_ref is None or lane.mode == "internal":
            continue
        try:
            await ctx.kube.get_laneworker(ns, lane.lane_worker_ref.name)
        except NotFound:
            missing.append(lane.lane_worker_ref.name)
    return sorted(set(missing))


async def _credentials_problem(
    ctx: OperatorContext, ns: str, spec: AgentSessionSpec
) -> tuple[str, str] | None:
    """(reason, message) when the session's LLM Secret or baseURL must not be used. The Secret
    is read once for all the sessions placed at the same moment (``read_secret_shared``)."""
    ref = spec.llm.api_key_secret_ref if spec.llm is not None else None
    secret = None
    if ref is not None and ctx.secrets is not None:
        secret = await _llm_secret(ctx, ns, ref.name)
    elif ref is not None:
        return None  # no Secret access configured (unit tests): nothing to check against
    return llm_credentials_problem(spec, secret, ctx.settings.llm.allowed_base_urls)


async def _llm_secret(ctx: OperatorContext, ns: str, name: str) -> dict[str, Any] | None:
    """The LLM Secret ``ns/name`` as the credentials check reads it (``credentials_view``: no
    values). One allowed for Berth is remembered for ``LLM_SECRET_TTL_SECONDS``: the sessions
    of a burst use one Secret, and would otherwise read it in every wave of placements; a
    refused or missing one is read again each time, so a fix shows at once."""
    assert ctx.secrets is not None
    key = (ns, name)
    remembered = ctx.llm_secrets.get(key)
    if remembered is not None and time.monotonic() - remembered[0] < LLM_SECRET_TTL_SECONDS:
        return remembered[1]
    secret = await ctx.secrets.read_secret_shared(ns, name)
    view = None if secret is None else credentials_view(secret)
    if view is not None and credentials_allowed(view):
        ctx.llm_secrets[key] = (time.monotonic(), view)
    else:
        ctx.llm_secrets.pop(key, None)
    return view


async def _claim_status(
    ctx: OperatorContext, ns: str, spec: AgentSessionSpec
) -> tuple[bool, str, str]:
    """``StoreReady`` of the session's shared claim (``builders.claim.claim_status``). A ready
    (Bound) claim is remembered for ``CLAIM_READY_TTL_SECONDS``: every session of a namespace
    shares it, and a burst of placements would otherwise read it once per session."""
    name = claim_name(spec, ctx.settings)
    key = (ns, name)
    remembered = ctx.ready_claims.get(key)
    if remembered is not None and time.monotonic() - remembered[0] < CLAIM_READY_TTL_SECONDS:
        return remembered[1]
    body = await ctx.kube.get_pvc(ns, name)
    status = claim_status(ns, name, body, ctx.settings.claims.managed)
    if status[0]:
        ctx.ready_claims[key] = (time.monotonic(), status)
    else:
        ctx.ready_claims.pop(key, None)
    return status


async def _api_token(ctx: OperatorContext, ref: SessionRef) -> str | None:
    """The session's API token (cached per uid; read from ``<name>-berth`` on first use)."""
    token = ctx.tokens.get(ref.uid)
    if token is None and ctx.secrets is not None:
        token = await ctx.secrets.api_token(ref)
        if token is not None:
            ctx.tokens[ref.uid] = token
    return token


async def _ensure_secrets(ctx: OperatorContext, ref: SessionRef, spec: AgentSessionSpec) -> None:
    """Before a pod is created: the namespace master (external lanes) and ``<name>-berth`` with
    the options.json of the spec's current generation."""
    if ctx.secrets is None:
        return
    master = None
    if needs_task_master(spec):
        master = await ctx.secrets.ensure_task_master(ref.namespace)
    ctx.tokens[ref.uid] = await ctx.secrets.ensure_session_secret(
        ref,
        master,
        ctx.settings.redis.for_sessions,
        options=render_options(build_options(ref, spec, ctx.settings)),
        known=ref.uid in ctx.tokens,
    )


def _post_events(body: dict[str, Any], plan: Plan) -> None:
    for event in plan.events:
        kopf.event(
            cast(kopf.Body, body),
            type=event.type,
            reason=event.reason,
            message=event.message[:1024],
        )


def _disruptions(index: kopf.Index[str, Trigger] | None) -> dict[str, Trigger]:
    """The node_disruptions index as a plain dict (one Trigger per disrupted node)."""
    if index is None:
        return {}
    out: dict[str, Trigger] = {}
    for node in index:
        for trigger in index.get(node, []):
            out[node] = trigger
    return out


async def reconcile_session(
    ctx: OperatorContext,
    namespace: str,
    name: str,
    uid: str,
    cached: Iterable[ObservedPod],
    disruptions: dict[str, Trigger] | None = None,
    live: LiveSession | None = None,
) -> float | None:
    """One iteration; returns seconds until the next one (None: the session is gone). Without
    ``live`` (outside a worker) the object and nodes are read from the apiserver."""
    started = time.perf_counter()
    try:
        return await _reconcile(ctx, namespace, name, uid, list(cached), disruptions or {}, live)
    except Conflict as exc:
        if live is not None:
            live.body.conflicted()
        RECONCILE_ERRORS.labels(kind="conflict").inc()
        log.debug("conflict on %s/%s: %s", namespace, name, exc)
        return 0.1
    except KubeError as exc:
        RECONCILE_ERRORS.labels(kind="api").inc()
        log.warning("reconcile %s/%s: %s", namespace, name, exc)
        return ERROR_RETRY_SECONDS
    except ValidationError as exc:
        log.error("AgentSession %s/%s does not parse: %s", namespace, name, exc)
        return UNPARSEABLE_RETRY_SECONDS
    except Exception:
        RECONCILE_ERRORS.labels(kind="unexpected").inc()
        log.exception("reconcile %s/%s failed", namespace, name)
        return ERROR_RETRY_SECONDS
    finally:
        RECONCILE_SECONDS.observe(time.perf_counter() - started)


async def _reconcile(
    ctx: OperatorContext,
    namespace: str,
    name: str,
    uid: str,
    cached: list[ObservedPod],
    disruptions: dict[str, Trigger],
    live: LiveSession | None,
) -> float | None:
    """Observe, ``decide`` (pure), apply."""
    body = live.body.current(live.live, time.monotonic()) if live is not None else None
    if body is None:
        try:
            body = await ctx.kube.get_session(namespace, name)
        except NotFound:
            return None
        if live is not None:
            live.body.seen_fresh(body, time.monotonic())
    meta = body["metadata"]
    if meta.get("uid") != uid or meta.get("deletionTimestamp"):
        return None
    early = _prepare_early(ctx, body, cached) if live is not None else None
    try:
        obs = await _observe(ctx, body, cached, disruptions, live)
        # From here to the note below nothing awaits: no other session decides in between, so
        # two sessions never take the last migration slot at once.
        watched = migrating_uids(live.migrating) if live is not None else ()
        obs = replace(obs, migrating=ctx.migrations.migrating(watched))
        plan = decide(obs, ctx.settings)
        ctx.migrations.note(uid, plan.status)
        return await _apply(ctx, body, obs, plan, live=live, early=early)
    finally:
        if early is not None:  # awaited by the create, or not needed: the decision placed none
            with contextlib.suppress(Exception):  # an error shows again when they are used
                await early


def _prepare_early(
    ctx: OperatorContext, body: Mapping[str, Any], cached: list[ObservedPod]
) -> asyncio.Task[None] | None:
    """On a session's first pass (no status written yet, no pod, none being created), when its
    spec parses: start writing the objects its first pod needs (``_prepare_objects``) now,
    beside the reads that decide its placement, instead of after them. Almost every new
    session is placed on its first pass, and its pod — created, or adopted from a warm pool —
    waits for the status write and for these objects, so the slower of the two sets the pace,
    not their sum. When the decision is not to place it yet (a condition the user must fix),
    the objects wait for its first pod; they are owned by the session and go with it. Later
    passes never write ahead (the status is written by then). None when not written ahead."""
    meta = body.get("metadata") or {}
    uid = str(meta.get("uid") or "")
    if body.get("status") or cached or uid in ctx.inflight:
        return None
    try:
        spec = AgentSessionSpec.model_validate(body.get("spec") or {})
    except ValidationError:
        return None  # _observe reports it
    ref = SessionRef(meta["namespace"], meta["name"], uid, int(meta.get("generation") or 0))
    return asyncio.create_task(_prepare_objects(ctx, ref, spec))


async def _observe(
    ctx: OperatorContext,
    body: dict[str, Any],
    cached: list[ObservedPod],
    disruptions: dict[str, Trigger],
    live: LiveSession | None,
) -> Observation:
    """Everything ``decide`` looks at: the object, the cached pods and the pod created but not yet
    cached, the nodes of pods that are not obviously healthy, the runtime's /v1/state, eviction
    requests, and — only when a pod may have to be placed — missing LaneWorkers and the LLM
    credentials check. Raises ``ValidationError`` for an object that does not parse."""
    meta = body["metadata"]
    namespace, uid = meta["namespace"], meta["uid"]
    cached = ctx.reported_ends(uid, cached)
    spec = AgentSessionSpec.model_validate(body.get("spec") or {})
    status = AgentSessionStatus.model_validate(body.get("status") or {})
    ref = SessionRef(namespace, meta["name"], uid, int(meta.get("generation") or 0))
    inflight = ctx.inflight_for(uid, {p.name for p in cached})
    nodes = await _nodes_for(ctx, cached, status, live)
    current = next((p for p in cached if p.epoch == (status.epoch or 0)), None)
    state, state_error = await _runtime_state(ctx, ref, current, nodes, live)
    evictions = frozenset(ctx.evictions.get(uid, ()))
    if current is not None and current.name in evictions:
        disruptions = await _with_eviction_node(ctx, current, disruptions)
    missing: list[str] = []
    credentials = None
    claim = None
    alive = [p for p in cached if not p.deleting and p.terminated is None]
    if not alive and inflight is None:
        missing, credentials, claim = await asyncio.gather(
            _missing_laneworkers(ctx, namespace, spec),
            _credentials_problem(ctx, namespace, spec),
            _claim_status(ctx, namespace, spec),
        )
    elif current is not None and not current.scheduled and not current.deleting:
        claim = await _claim_status(ctx, namespace, spec)  # may explain a Pending pod
    return Observation(
        ref=ref,
        spec=spec,
        status=status,
        pods=tuple(cached),
        nodes=nodes,
        inflight=inflight,
        state=state,
        state_error=state_error,
        missing_laneworkers=tuple(missing),
        credentials_problem=credentials,
        claim=claim,
        now=datetime.now(UTC).replace(microsecond=0),
        node_disruptions=disruptions,
        evictions=evictions,
        precise_now=_now_ms(),
        wake_requested_at=idle.parse_wake(
            (meta.get("annotations") or {}).get(idle.WAKE_ANNOTATION)
        ),
        reserved_epoch=ctx.reservations.get(uid),
        create_failure=ctx.create_failures.get(uid),
    )


async def _runtime_state(
    ctx: OperatorContext,
    ref: SessionRef,
    current: ObservedPod | None,
    nodes: dict[str, ObservedNode],
    live: LiveSession | None,
) -> tuple[RuntimeState | None, str | None]:
    """(/v1/state of the current pod, the error reading it). An unreachable runtime makes its
    node worth a look (added to ``nodes``); a refused token is re-read from its Secret next time."""
    if (
        current is None
        or current.phase != "Running"
        or not current.pod_ip
        or current.deleting
        or current.terminated is not None
    ):
        return None, None
    try:
        return await ctx.runtime.state(current.pod_ip, await _api_token(ctx, ref)), None
    except RuntimeUnreachable as exc:
        if isinstance(exc, RuntimeUnauthorized):
            ctx.tokens.pop(ref.uid, None)
        STATE_REFRESH_FAILURES.inc()
        if current.node_name and current.node_name not in nodes:
            nodes[current.node_name] = await _node(ctx, current.node_name, live)
        return None, str(exc)


async def _with_eviction_node(
    ctx: OperatorContext, current: ObservedPod, disruptions: dict[str, Trigger]
) -> dict[str, Trigger]:
    """``disruptions`` plus the node of a pod whose eviction was requested, read fresh: a drain
    cordons before it evicts, and the eviction request (webhook) can arrive before the node watch
    event; the reason is then ``node_drain``."""
    if not current.node_name or current.node_name in disruptions:
        return disruptions
    node = observe_node(await ctx.kube.get_node(current.node_name), current.node_name)
    trigger = node_disruption(node)
    return disruptions if trigger is None else {**disruptions, current.node_name: trigger}


async def _apply(
    ctx: OperatorContext,
    body: dict[str, Any],
    obs: Observation,
    plan: Plan,
    *,
    may_create: bool = True,
    live: LiveSession | None = None,
    early: asyncio.Task[None] | None = None,
) -> float:
    """Carry out ``plan`` in order: status (the bumped epoch is durable before any pod of that
    epoch exists; a reserved epoch is durable already, so its create goes beside the write:
    ``CreatePod.reserved``), deletes, the passivate call, Events, the create, then the deletes
    of pods that have ended (``ObservedPod.ended``: they hold the new pod back no more, so their
    deletes wait instead of it, off the pass: ``_delete_ended``). ``early``: the task writing
    the objects a first pod needs, started before the decision (``_prepare_early``). Returns
    the requeue delay."""
    if live is not None:
        since = None if live.last_write is None else time.monotonic() - live.last_write
        wait = write_delay(
            obs.status, plan, since, ctx.settings.session_api.status_coalesce_seconds
        )
        if wait is not None:  # information only: goes out with the next write (coalesce.py)
            if plan.passivate is not None:  # a repeat of the stored request (coalesce.py)
                await _passivate(ctx, obs.ref, plan.passivate)
                # the passivation's own pace (its deadline) holds while the status waits
                return min(wait, plan.requeue_after or wait)
            return wait
    create = plan.create if may_create else None  # the pod this pass places, if any
    status_write = write_status(ctx.kube, body, obs.status, plan.status)
    # The objects the new pod needs, and the guard's LIST of the session's pods, do not depend
    # on the epoch: both go alongside the status write. (Without a stored epoch the pod may be
    # the session's first, whose LIST the written status makes needless.) The create waits
    # for the write, unless its epoch was reserved by this process (CreatePod.reserved).
    beside = create is not None and create.reserved
    ready: list[dict[str, Any]] | BaseException | None = None
    placed: tuple[ObservedPod, ...] | BaseException = ()
    if create is not None and beside:
        ctx.reservations.pop(obs.ref.uid, None)  # used now, whatever comes of it
        stored, placed = await asyncio.gather(
            status_write, _prepare_and_create(ctx, obs, create, early), return_exceptions=True
        )
    elif create is not None:
        stored, ready = await asyncio.gather(
            status_write, _prepare(ctx, obs, early), return_exceptions=True
        )
    else:
        stored = await status_write
    if isinstance(stored, BaseException):
        raise stored  # the epoch is not stored (a pod created beside it is adopted next pass)
    if live is not None and stored is not body:
        live.body.written(stored, time.monotonic())
        live.last_write = time.monotonic()
    written, body = stored is not body, stored
    reserved = pv.reservation(obs.status.passivation, plan.status.passivation)
    if written and reserved is not None:
        ctx.reservations[obs.ref.uid] = reserved
    ctx.phases.set(obs.ref.uid, plan.status.phase)
    if create is None and obs.state is not None:  # an adopted pod placed without them runs
        _recheck_objects(ctx, obs.ref, obs.spec)
    for metric in plan.metrics:
        observe_passivation(metric.kind, metric.reason, metric.outcome, metric.seconds)
    ended = {p.name for p in obs.pods if p.ended}
    later = [d for d in plan.delete if create is not None and d.name in ended]  # hold none back
    try:
        for d in plan.delete:
            if d not in later:
                await _delete(ctx, obs.ref.namespace, d)
    except Exception as exc:
        if create is None or beside:
            raise
        return _create_failed(ctx, obs, create, exc)  # its epoch is stored: kept
    if plan.passivate is not None:
        await _passivate(ctx, obs.ref, plan.passivate)
    if plan.release_pdb and ctx.disruption is not None:  # idempotent; at rest looks rarely
        ctx.objects_ready.pop(obs.ref.uid, None)  # the next pod waits for its PDB again
        ctx.objects_recheck.discard(obs.ref.uid)
        await ctx.disruption.delete_pdb(obs.ref.namespace, pdb_name(obs.ref.name))
    _post_events(body, plan)
    if create is not None:
        first = not obs.status.epoch and create.epoch == 1 and written
        try:
            if isinstance(placed, BaseException):
                raise placed
            if isinstance(ready, BaseException):
                raise ready
            listed = placed
            if not beside:
                listed = await _create(ctx, obs, create, first_pod=first, existing=ready)
        except Exception as exc:
            return _create_failed(ctx, obs, create, exc)
        for d in later:
            ctx.spawn(_delete_ended(ctx, obs.ref, d))
        if listed:
            # The cache was stale: other pods exist. Decide again with what the apiserver
            # listed (never two live pods of one session); that decision waits for them to end.
            log.info("%s: %d other pod(s) exist; deciding again", obs.ref.key, len(listed))
            again = replace(obs, status=plan.status, pods=listed, inflight=None)
            return await _apply(
                ctx, body, again, decide(again, ctx.settings), may_create=False, live=live
            )
    if plan.requeue_after is not None:
        return plan.requeue_after
    return ctx.settings.session_api.status_refresh_seconds


def _create_failed(
    ctx: OperatorContext, obs: Observation, create: CreatePod, exc: Exception
) -> float:
    """The epoch of ``create`` is stored and its pod was never made (a write it waits for
    failed): remember it, so the next pass places the same epoch again after a backoff and
    says why (``reconcile.session._place_again``). Returns the requeue delay (0: that pass
    records the failure in status)."""
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


async def _delete(ctx: OperatorContext, namespace: str, d: DeletePod) -> None:
    await ctx.kube.delete_pod(
        namespace, d.name, uid=d.uid, force=d.force, grace_seconds=d.grace_seconds
    )


async def _delete_ended(ctx: OperatorContext, ref: SessionRef, d: DeletePod) -> None:
    """Delete a pod that has ended, beside the session's next pass rather than before it: the
    replacement is placed already, and the pass that the new pod's first event queues (the one
    that sees the resumed run) does not wait for this round trip. A failed delete is logged;
    every decision deletes the session's pods that are neither current nor being deleted
    (``reconcile.session``), so the next pass asks again."""
    try:
        await _delete(ctx, ref.namespace, d)
    except KubeError as exc:
        log.warning("%s: ended pod %s not deleted yet: %s", ref.key, d.name, exc)


async def _passivate(ctx: OperatorContext, ref: SessionRef, call: PassivateCall) -> None:
    """POST /v1/passivate; an undelivered request is retried by the next decision (the deadline
    in status still applies: the pod is deleted at the latest then). The pod's own report of
    its end is awaited beside the passes (``_await_outcome``), asked for before the POST: a
    passivation that ends at once still finds the question waiting (a question that came after
    the process closed its port would go unanswered)."""
    try:
        token = await _api_token(ctx, ref)
        if call.pod_uid and call.pod_uid not in ctx.outcome_waits:
            ctx.outcome_waits.add(call.pod_uid)
            ctx.spawn(_await_outcome(ctx, ref, call, token))
        await ctx.runtime.passivate(call.pod_ip, call.reason, call.deadline_ms, token)
    except RuntimeUnreachable as exc:
        # A repeat that finds the port closed is the usual end of a passivation (the process
        # is done, its report on the way): not worth an INFO line per pass.
        level = logging.DEBUG if call.resend else logging.INFO
        log.log(level, "%s: passivate not delivered yet: %s", ref.key, exc)


async def _await_outcome(
    ctx: OperatorContext, ref: SessionRef, call: PassivateCall, token: str | None
) -> None:
    """Ask the passivating pod ``GET /v1/outcome`` (long polls of at most
    ``OUTCOME_WAIT_SECONDS``) until it answers with its termination message or its deadline
    (+ ``OUTCOME_SLACK_SECONDS``) passes. The answer is kept (``ctx.outcomes``) and the session
    reconciled at once: its pass treats the pod as ended, as the kubelet will report it
    moments later, and places the replacement. A pod that cannot answer (its process already
    gone, a runtime without the route) is left to the kubelet's report."""
    try:
        while time.time() * 1000 < call.deadline_ms + OUTCOME_SLACK_SECONDS * 1000:
            left = call.deadline_ms / 1000 - time.time() + OUTCOME_SLACK_SECONDS
            wait = max(1, min(OUTCOME_WAIT_SECONDS, math.ceil(left)))
            try:
                message = await ctx.runtime.outcome(call.pod_ip, token, wait)
            except RuntimeUnreachable as exc:
                log.debug("%s: no outcome from pod %s: %s", ref.key, call.pod_ip, exc)
                return
            if message is None:
                continue
            if parse_termination(message) is None:
                log.warning("%s: pod %s reported an end that does not parse", ref.key, call.pod_ip)
                return
            ctx.outcomes[ref.uid] = (call.pod_uid, message, _now_ms())
            ctx.wake_session(ref.uid)
            log.info("%s: pod %s reported its end before the kubelet", ref.key, call.pod_ip)
            return
    finally:
        ctx.outcome_waits.discard(call.pod_uid)


async def _concurrently(*awaitables: Awaitable[Any]) -> list[Any]:
    """Await all; return their results in argument order. Every awaitable runs to its end; then
    the first error in argument order is raised."""
    results = await asyncio.gather(*awaitables, return_exceptions=True)
    for result in results:
        if isinstance(result, BaseException):
            raise result
    return results


async def _list_pods(ctx: OperatorContext, ref: SessionRef) -> list[dict[str, Any]]:
    """The session's pods as the apiserver lists them (not the cache): ``_create``'s guard."""
    return await ctx.kube.list_pods(ref.namespace, f"{LABEL_SESSION_UID}={ref.uid}")


async def _prepare(
    ctx: OperatorContext, obs: Observation, early: asyncio.Task[None] | None
) -> list[dict[str, Any]] | None:
    """``_prepare_pod`` and, when the session has a stored epoch, the guard's LIST of its pods
    (``_list_pods``), concurrently; the LIST, or None when not made (a session's first pod:
    none can exist before its epoch is stored). Raises the first error of the two."""
    if not obs.status.epoch:
        await _prepare_pod(ctx, obs, early)
        return None
    _, existing = await _concurrently(_prepare_pod(ctx, obs, early), _list_pods(ctx, obs.ref))
    return cast("list[dict[str, Any]]", existing)


async def _prepare_and_create(
    ctx: OperatorContext, obs: Observation, create: CreatePod, early: asyncio.Task[None] | None
) -> tuple[ObservedPod, ...]:
    """``_prepare`` then ``_create``: the placement of an epoch reserved already
    (``CreatePod.reserved``), beside the status write that stores it."""
    existing = await _prepare(ctx, obs, early)
    return await _create(ctx, obs, create, existing=existing)


async def _prepare_pod(
    ctx: OperatorContext, obs: Observation, early: asyncio.Task[None] | None = None
) -> None:
    """Make sure what a new pod of the session needs exists (none depends on another, nor on
    the epoch, so they are written concurrently): the Secrets and the PDB
    (``_prepare_objects``, or the task ``early`` already writing them) and a managed shared
    claim. When this process wrote the Secrets and PDB for the session's generation already
    (``OperatorContext.objects_ready``: a resume, a restart after a crash), the pod does not
    wait for a round trip that finds them so (a PDB POST answered 409, a Secret GET). They are
    written again, so one deleted meanwhile comes back (``OperatorContext.objects_recheck``):
    for a created pod, which mounts the Secret, once it is created (``_create``); for an
    adopted warm pod, which is given the Secret's values in the adopt call, once its runtime
    answers (``_apply``), so a burst of resumes from a pool (a drain) does not send those
    writes beside its placements."""
    ref, spec, settings = obs.ref, obs.spec, ctx.settings
    needs: list[Awaitable[Any]] = []
    if early is not None:
        needs.append(early)
    elif ctx.objects_ready.get(ref.uid) == ref.generation and (
        ctx.secrets is None or ref.uid in ctx.tokens
    ):
        # Written for this generation by this process already (a resume): written again after
        # the placement, so a deleted Secret or PDB comes back, off the placement's path.
        ctx.objects_recheck.add(ref.uid)
    else:
        needs.append(_prepare_objects(ctx, ref, spec))
    if obs.claim is not None and obs.claim[1] == "ClaimCreating":
        needs.append(
            ctx.kube.create_pvc(
                build_shared_claim(ref.namespace, claim_name(spec, settings), settings)
            )
        )
    await _concurrently(*needs)


async def _prepare_objects(ctx: OperatorContext, ref: SessionRef, spec: AgentSessionSpec) -> None:
    """The Secrets (options.json of ``ref``'s generation in ``<name>-berth``) and, when PDBs
    are enabled, the PodDisruptionBudget of the session's pods, written concurrently."""
    needs: list[Awaitable[Any]] = [_ensure_secrets(ctx, ref, spec)]
    if ctx.disruption is not None:
        needs.append(ctx.disruption.ensure_pdb(build_session_pdb(ref, spec)))
    try:
        await _concurrently(*needs)
    except BaseException:
        ctx.objects_ready.pop(ref.uid, None)
        raise
    ctx.objects_ready[ref.uid] = ref.generation


def _recheck_objects(ctx: OperatorContext, ref: SessionRef, spec: AgentSessionSpec) -> None:
    """When the session's pod was placed without waiting for its Secret and PDB
    (``OperatorContext.objects_recheck``), write them again now, in the background, once."""
    if ref.uid in ctx.objects_recheck:
        ctx.objects_recheck.discard(ref.uid)
        ctx.spawn(_rewrite_objects(ctx, ref, spec))


async def _rewrite_objects(ctx: OperatorContext, ref: SessionRef, spec: AgentSessionSpec) -> None:
    """``_prepare_objects`` after a placement that did not wait for them
    (``OperatorContext.objects_recheck``): a failure is logged, and the session's next pod
    waits for them again (``OperatorContext.objects_ready`` forgets the generation)."""
    try:
        await _prepare_objects(ctx, ref, spec)
    except Exception as exc:
        log.warning("%s: session Secret or PDB not written: %s", ref.key, exc)


async def _create(
    ctx: OperatorContext,
    obs: Observation,
    create: CreatePod,
    *,
    first_pod: bool = False,
    existing: list[dict[str, Any]] | None = None,
) -> tuple[ObservedPod, ...]:
    """Create the pod of ``create.epoch`` (``_prepare_pod`` has run) unless the apiserver
    (listed directly: the guard against a stale cache and a restarted operator) shows other
    pods of the session that have not ended (``ObservedPod.ended``); return the pods listed
    then (empty when the pod was created or already exists).

    ``first_pod``: this iteration stored epoch 1 over a status without an epoch (a PUT with the
    resourceVersion of that status). Pods of an epoch are only created after the epoch is
    stored, so no pod of this session can exist and the LIST is skipped. ``existing``: that
    LIST, made already (``_list_pods``, beside the status write); None lists here."""
    ref = obs.ref
    pod = build_session_pod(
        ref,
        obs.spec,
        ctx.settings,
        epoch=create.epoch,
        resume_run_id=create.resume_run_id,
        reason=create.reason,
        avoid_nodes=create.avoid_nodes,
    )
    target = pod["metadata"]["name"]
    if not first_pod:
        if existing is None:
            existing = await _list_pods(ctx, ref)
        if any(p["metadata"]["name"] == target for p in existing):
            ctx.mark_inflight(ref.uid, target)
            return ()
        listed = ctx.reported_ends(ref.uid, (observe_pod(p) for p in existing))
        if any(not p.ended for p in listed):  # an ended pod never runs again: no obstacle
            return tuple(listed)
    if obs.spec.warm_pool_ref is not None and await adopt_for_session(ctx, obs, create):
        return ()  # a warm pod of the named pool became this epoch's pod
    try:
        await ctx.kube.create_pod(pod)
        PLACEMENTS.labels(reason=create.reason).inc()
    except AlreadyExists:
        pass
    ctx.mark_inflight(ref.uid, target)
    _recheck_objects(ctx, ref, obs.spec)  # a created pod mounts the Secret: not later than now
    return ()


def _now_ms() -> datetime:
    """Wall clock truncated to milliseconds (passivation timestamps in status)."""
    now = datetime.now(UTC)
    return now.replace(microsecond=now.microsecond // 1000 * 1000)
