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
                              other sessions need no finalizer: their pods and Secret are owned
                              by them, so garbage collection removes them.

One reconcile pass (``reconcile_session``): take the newest known object — as the watch showed it,
or the answer of the session's last status write until the watch has caught up with it, or a fresh
GET after a lost race (``handlers.session_body``) — read what the decision looks at
(``handlers.session_reads.observe``: pods, nodes, /v1/state, and when a pod is to be placed the
LaneWorkers, the LLM Secret and the shared claim); ``decide``; then carry the plan out
(``handlers.session_apply``): write status (PUT with
resourceVersion; skipped when unchanged, and deferred briefly when only information changed:
``reconcile.coalesce``), delete pods that may still run, and — only after the status with the bumped
epoch is stored, or beside that write for the replacement of a pod whose passivation request this
process stored (that request reserved the epoch: ``reconcile.passivation.replacement_epoch``) —
place the epoch's pod (``handlers.session_placement``: the guard's LIST straight from the apiserver,
then a create, or the adoption of a warm pod of a named SessionWarmPool); ended pods are deleted
after that. What the pod needs (the Secrets; once per namespace its PDB and policies) is written
concurrently with the status — on a session's first pass already beside the reads
(``session_placement.prepare_early``). The passivate call and the wait for the pod's own report of
its end are ``handlers.session_calls``. A Conflict restarts the iteration on a fresh GET; other API
errors back off. When what follows the stored epoch fails (those objects, the LIST, the create), the
failure is remembered (``OperatorContext.create_failed``) and the next passes place the same epoch
again after the placement backoff, saying why in status (``reconcile.session_place._place_again``).
Secret values never reach logs, status or Events.

kopf writes nothing to an AgentSession unless its store is to be deleted with it (no kopf
diff-base: ``berth_operator.persistence``; its finalizer only then: ``needs_delete_handler``,
on the watch event of the session's first status write, so that write never races it).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Iterable, Mapping
from dataclasses import replace
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
from berth_operator.builders.cleanup_job import build_store_cleanup_job
from berth_operator.errors import (
    Conflict,
    KubeError,
    NotFound,
)
from berth_operator.handlers.context import OperatorContext
from berth_operator.handlers.session_apply import apply_plan
from berth_operator.handlers.session_body import SessionBody
from berth_operator.handlers.session_placement import (
    prepare_early,
)
from berth_operator.handlers.session_reads import observe
from berth_operator.handlers.session_workers import LiveSession
from berth_operator.metrics import (
    RECONCILE_ERRORS,
    RECONCILE_SECONDS,
)
from berth_operator.reconcile import migration
from berth_operator.reconcile.observe import ObservedPod, observe_pod
from berth_operator.reconcile.passivation import Trigger
from berth_operator.reconcile.session import decide

log = logging.getLogger("berth.operator")

POD_LABELS = {LABEL_SESSION_UID: kopf.PRESENT, LABEL_COMPONENT: COMPONENT_SESSION}
ERROR_RETRY_SECONDS = 5.0
STORE_CLEANUP_WAIT_SECONDS = 120.0
"""How long a deleted session's store cleanup waits for its pods to go (``owes_store_cleanup``)."""
STORE_CLEANUP_POLL_SECONDS = 2.0
"""How often that wait lists the pods."""
UNPARSEABLE_RETRY_SECONDS = 60.0
"""Seconds before an object that does not parse is read again (an edit wakes it sooner)."""


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

    Nothing else needs the operator at deletion: the session's pods and Secret carry its
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
    disruptions: dict[str, Trigger],
    live: LiveSession,
) -> float | None:
    """One pass of the session (``live``: what its reconcile keeps between passes); returns
    seconds until the next one (None: the session is gone). API errors are logged and counted
    (``berth_reconcile_errors_total``) and become a retry delay: nothing raises."""
    started = time.perf_counter()
    try:
        return await _reconcile(ctx, namespace, name, uid, list(cached), disruptions, live)
    except Conflict as exc:
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
    live: LiveSession,
) -> float | None:
    """Observe, ``decide`` (pure), apply."""
    body = live.body.current(live.live, time.monotonic())
    if body is None:
        try:
            body = await ctx.kube.get_session(namespace, name)
        except NotFound:
            return None
        live.body.seen_fresh(body, time.monotonic())
    meta = body["metadata"]
    if meta.get("uid") != uid or meta.get("deletionTimestamp"):
        return None
    early = prepare_early(ctx, body, cached)
    try:
        obs = await observe(ctx, body, cached, disruptions, live)
        # From here to the note below nothing awaits: no other session decides in between, so
        # two sessions never take the last migration slot at once.
        obs = replace(obs, migrating=ctx.migrations.migrating(migrating_uids(live.migrating)))
        plan = decide(obs, ctx.settings)
        ctx.migrations.note(uid, plan.status)
        return await apply_plan(ctx, body, obs, plan, live=live, early=early)
    finally:
        if early is not None:  # awaited by the create, or not needed: the decision placed none
            with contextlib.suppress(Exception):  # an error shows again when they are used
                await early
