"""kopf handlers of AgentSession and of session pods.

- ``session_pods``            index: session uid → observed pods (the watch cache of pods).
- ``pod_event``               wakes the owning session's daemon on any pod change.
- ``agentsession_event``      wakes the daemon on any AgentSession change (spec, annotations).
- ``agentsession_daemon``     one loop per AgentSession: reconcile, then sleep until woken or until
                              the plan's requeue time (status refresh from /v1/state on a timer).
- ``agentsession_delete``     stops the session pods; with ``berth.dev/delete-store: "true"``
                              also runs the store-cleanup Job. Pods and the ConfigMap are owned by
                              the session, so garbage collection removes whatever is left.

One reconcile iteration (``reconcile_session``): GET the session fresh from the apiserver, gather
pods (cache + in-flight), nodes and /v1/state (with the session's API token, read once from its
``<name>-berth`` Secret and cached), and — when a pod is to be placed — whether the LLM Secret
may be used (label ``berth.dev/llm-credentials: "true"``, allowed baseURL); ``decide``, write
status (PUT with resourceVersion; skipped when unchanged), delete pods, then — only after the
status with the bumped epoch is stored — LIST the session's pods straight from the apiserver,
make sure the namespace's ``berth-task-key`` (sessions with an external lane) and the session's
``<name>-berth`` Secret exist, and create the new pod if none is alive. A Conflict restarts the
iteration; other API errors back off. Secret values never reach logs, status or Events.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Iterable
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
from berth_operator.builders.cleanup_job import build_store_cleanup_job
from berth_operator.builders.pdb import build_session_pdb
from berth_operator.builders.secrets import llm_credentials_problem, needs_task_master
from berth_operator.builders.session_pod import (
    build_options,
    build_options_configmap,
    build_session_pod,
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
from berth_operator.metrics import (
    PLACEMENTS,
    RECONCILE_ERRORS,
    RECONCILE_SECONDS,
    STATE_REFRESH_FAILURES,
    STATUS_WRITES,
    observe_passivation,
)
from berth_operator.reconcile.observe import ObservedNode, ObservedPod, observe_node, observe_pod
from berth_operator.reconcile.passivation import Trigger, node_disruption, pdb_wanted
from berth_operator.reconcile.session import Observation, Plan, decide

log = logging.getLogger("berth.operator")

POD_LABELS = {LABEL_SESSION_UID: kopf.PRESENT, LABEL_COMPONENT: COMPONENT_SESSION}
ERROR_RETRY_SECONDS = 5.0


@kopf.index("pods", labels=POD_LABELS)  # type: ignore[arg-type]
def session_pods(body: kopf.Body, labels: kopf.Labels, **_: Any) -> dict[str, ObservedPod]:
    """Index session pods by the uid of their AgentSession."""
    return {labels[LABEL_SESSION_UID]: observe_pod(body)}


@kopf.on.event("pods", labels=POD_LABELS)  # type: ignore[arg-type]
def pod_event(labels: kopf.Labels, memo: kopf.Memo, **_: Any) -> None:
    """Wake the session whose pod changed."""
    ctx: OperatorContext = memo.ctx
    ctx.wake(labels[LABEL_SESSION_UID])


@kopf.on.event(GROUP, VERSION, SESSION_PLURAL)
def agentsession_event(uid: str, memo: kopf.Memo, **_: Any) -> None:
    """Wake the session's daemon on any change of the object."""
    ctx: OperatorContext = memo.ctx
    ctx.wake(uid)


@kopf.daemon(GROUP, VERSION, SESSION_PLURAL, cancellation_timeout=2.0)
async def agentsession_daemon(
    stopped: kopf.DaemonStopped,
    name: str,
    namespace: str | None,
    uid: str,
    memo: kopf.Memo,
    **kwargs: Any,
) -> None:
    """Reconcile one AgentSession until it is deleted or the operator stops.

    ``kwargs["session_pods"]`` is the pod index (kopf passes indices by name);
    ``kwargs["node_disruptions"]`` the disrupted nodes (handlers.nodes).
    """
    ctx: OperatorContext = memo.ctx
    index = cast("kopf.Index[str, ObservedPod]", kwargs["session_pods"])
    disrupted = cast("kopf.Index[str, Trigger] | None", kwargs.get("node_disruptions"))
    ns = namespace or ""
    wake = ctx.wakeup(uid)
    while not stopped:
        wake.clear()
        delay = await reconcile_session(
            ctx, ns, name, uid, index.get(uid, []), _disruptions(disrupted)
        )
        if delay is None:
            return
        if delay > 0:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(wake.wait(), timeout=delay)


@kopf.on.delete(GROUP, VERSION, SESSION_PLURAL)
async def agentsession_delete(
    body: kopf.Body,
    name: str,
    namespace: str | None,
    uid: str,
    spec: kopf.Spec,
    annotations: kopf.Annotations,
    memo: kopf.Memo,
    **_: Any,
) -> None:
    """Stop the session pods; run the store-cleanup Job when berth.dev/delete-store is "true"."""
    ctx: OperatorContext = memo.ctx
    namespace = namespace or ""
    ctx.forget(uid)
    pods = await ctx.kube.list_pods(namespace, f"{LABEL_SESSION_UID}={uid}")
    for pod in pods:
        meta = pod["metadata"]
        if not meta.get("deletionTimestamp"):
            await ctx.kube.delete_pod(namespace, meta["name"], uid=meta["uid"])
    if annotations.get(ANNOTATION_DELETE_STORE, "").lower() != "true":
        return
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


# ---------------------------------------------------------------------------------------------


async def _nodes_for(
    ctx: OperatorContext, pods: Iterable[ObservedPod], status: AgentSessionStatus
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
        nodes[pod.node_name] = observe_node(await ctx.kube.get_node(pod.node_name), pod.node_name)
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
    """(reason, message) when the session's LLM Secret or baseURL must not be used."""
    ref = spec.llm.api_key_secret_ref if spec.llm is not None else None
    secret = None
    if ref is not None and ctx.secrets is not None:
        secret = await ctx.secrets.read_secret(ns, ref.name)
    elif ref is not None:
        return None  # no Secret access configured (unit tests): nothing to check against
    return llm_credentials_problem(spec, secret, ctx.settings.llm_allowed_base_urls)


async def _api_token(ctx: OperatorContext, ref: SessionRef) -> str | None:
    """The session's API token (cached per uid; read from ``<name>-berth`` on first use)."""
    token = ctx.tokens.get(ref.uid)
    if token is None and ctx.secrets is not None:
        token = await ctx.secrets.api_token(ref)
        if token is not None:
            ctx.tokens[ref.uid] = token
    return token


async def _ensure_secrets(ctx: OperatorContext, ref: SessionRef, spec: AgentSessionSpec) -> None:
    """Before a pod is created: the namespace master (external lanes) and ``<name>-berth``."""
    if ctx.secrets is None:
        return
    master = None
    if needs_task_master(spec):
        master = await ctx.secrets.ensure_task_master(ref.namespace)
    ctx.tokens[ref.uid] = await ctx.secrets.ensure_session_secret(
        ref, master, ctx.settings.session_redis_url
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
) -> float | None:
    """One iteration; returns seconds until the next one (None: the session is gone)."""
    started = time.perf_counter()
    try:
        return await _reconcile(ctx, namespace, name, uid, list(cached), disruptions or {})
    except Conflict as exc:
        RECONCILE_ERRORS.labels(kind="conflict").inc()
        log.debug("conflict on %s/%s: %s", namespace, name, exc)
        return 0.1
    except KubeError as exc:
        RECONCILE_ERRORS.labels(kind="api").inc()
        log.warning("reconcile %s/%s: %s", namespace, name, exc)
        return ERROR_RETRY_SECONDS
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
) -> float | None:
    settings = ctx.settings
    try:
        body = await ctx.kube.get_session(namespace, name)
    except NotFound:
        return None
    meta = body["metadata"]
    if meta.get("uid") != uid or meta.get("deletionTimestamp"):
        return None
    try:
        spec = AgentSessionSpec.model_validate(body.get("spec") or {})
        status = AgentSessionStatus.model_validate(body.get("status") or {})
    except ValidationError as exc:
        log.error("AgentSession %s/%s does not parse: %s", namespace, name, exc)
        return 60.0
    ref = SessionRef(namespace, name, uid, int(meta.get("generation") or 0))
    inflight = ctx.inflight_for(uid, {p.name for p in cached})
    nodes = await _nodes_for(ctx, cached, status)

    current = next((p for p in cached if p.epoch == (status.epoch or 0)), None)
    state = None
    state_error = None
    if (
        current is not None
        and current.phase == "Running"
        and current.pod_ip
        and not current.deleting
        and current.terminated is None
    ):
        try:
            state = await ctx.runtime.state(current.pod_ip, await _api_token(ctx, ref))
        except RuntimeUnreachable as exc:
            if isinstance(exc, RuntimeUnauthorized):
                ctx.tokens.pop(uid, None)  # re-read the Secret next time
            STATE_REFRESH_FAILURES.inc()
            state_error = str(exc)
            if current.node_name and current.node_name not in nodes:
                node = await ctx.kube.get_node(current.node_name)
                nodes[current.node_name] = observe_node(node, current.node_name)
    evictions = frozenset(ctx.evictions.get(uid, ()))
    if (
        current is not None
        and current.name in evictions
        and current.node_name
        and current.node_name not in disruptions
    ):
        # Read the node fresh: a drain cordons before it evicts, and the eviction request
        # (webhook) can arrive before the node watch event; the reason is then node_drain.
        trigger = node_disruption(
            observe_node(await ctx.kube.get_node(current.node_name), current.node_name)
        )
        if trigger is not None:
            disruptions = {**disruptions, current.node_name: trigger}
    missing: list[str] = []
    credentials = None
    alive = [p for p in cached if not p.deleting and p.terminated is None]
    if not alive and inflight is None:
        missing = await _missing_laneworkers(ctx, namespace, spec)
        credentials = await _credentials_problem(ctx, namespace, spec)

    plan = decide(
        Observation(
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
            now=datetime.now(UTC).replace(microsecond=0),
            node_disruptions=disruptions,
            evictions=evictions,
            precise_now=_now_ms(),
        ),
        settings,
    )

    # 1. status first: the bumped epoch is durable before any pod of that epoch exists.
    new_status = plan.status.wire()
    if new_status != status.wire():
        body["status"] = new_status
        try:
            body = await ctx.kube.replace_session_status(body)
        except Conflict:
            STATUS_WRITES.labels(result="conflict").inc()
            raise
        STATUS_WRITES.labels(result="written").inc()
    else:
        STATUS_WRITES.labels(result="unchanged").inc()
    ctx.phases.set(uid, plan.status.phase)

    for metric in plan.metrics:
        observe_passivation(metric.kind, metric.reason, metric.outcome, metric.seconds)

    # 2. deletes
    for d in plan.delete:
        await ctx.kube.delete_pod(
            namespace, d.name, uid=d.uid, force=d.force, grace_seconds=d.grace_seconds
        )
    if plan.passivate is not None:
        try:
            await ctx.runtime.passivate(
                plan.passivate.pod_ip,
                plan.passivate.reason,
                plan.passivate.deadline_ms,
                await _api_token(ctx, ref),
            )
        except RuntimeUnreachable as exc:
            # The deadline in status still applies: the pod is deleted at the latest then.
            log.info("%s/%s: passivate not delivered yet: %s", namespace, name, exc)

    # 3. create (the direct LIST is the guard against a stale cache and a restarted operator)
    if plan.create is not None:
        pod = build_session_pod(
            ref,
            spec,
            settings,
            epoch=plan.create.epoch,
            resume_run_id=plan.create.resume_run_id,
            reason=plan.create.reason,
            avoid_nodes=plan.create.avoid_nodes,
        )
        target = pod["metadata"]["name"]
        existing = await ctx.kube.list_pods(namespace, f"{LABEL_SESSION_UID}={uid}")
        others = [p for p in existing if p["metadata"]["name"] != target]
        if any(p["metadata"]["name"] == target for p in existing):
            ctx.mark_inflight(uid, target)
        elif others:
            log.info(
                "%s/%s: %d old pod(s) still exist; not creating %s",
                namespace,
                name,
                len(others),
                target,
            )
            for other in others:
                if not other["metadata"].get("deletionTimestamp"):
                    await ctx.kube.delete_pod(
                        namespace, other["metadata"]["name"], uid=other["metadata"]["uid"]
                    )
            _post_events(body, plan)
            return 1.0
        else:
            if ctx.disruption is not None and pdb_wanted(settings.pdb_enabled, False):
                await ctx.disruption.ensure_pdb(build_session_pdb(ref, spec))
            await _ensure_secrets(ctx, ref, spec)
            if ctx.configmap_generation.get(uid) != ref.generation:
                options = build_options(ref, spec, settings)
                await ctx.kube.apply_configmap(build_options_configmap(ref, spec, options))
                ctx.configmap_generation[uid] = ref.generation
            try:
                await ctx.kube.create_pod(pod)
                PLACEMENTS.labels(reason=plan.create.reason).inc()
            except AlreadyExists:
                pass
            ctx.mark_inflight(uid, target)
    _post_events(body, plan)
    return plan.requeue_after if plan.requeue_after is not None else settings.status_refresh_seconds


def _now_ms() -> datetime:
    """Wall clock truncated to milliseconds (passivation timestamps in status)."""
    now = datetime.now(UTC)
    return now.replace(microsecond=now.microsecond // 1000 * 1000)
