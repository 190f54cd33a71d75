"""What one AgentSession pass reads before it decides (``observe``): the cached pods and the
pod created but not yet cached, the nodes of pods that are not obviously healthy (the node watch
cache, else a GET), the runtime's ``/v1/state`` with the session's API token (read once from its
``<name>-berth`` Secret and cached), the node of a pod whose eviction was requested, and — only
when a pod may have to be placed — missing LaneWorkers, whether the LLM Secret may be used
(label ``berth.dev/llm-credentials: "true"``, allowed baseURL) and the shared claim. A Bound claim
is remembered for ``CLAIM_READY_TTL_SECONDS``, an LLM Secret allowed for Berth for
``LLM_SECRET_TTL_SECONDS``; a refused or missing one is read every time, so a fix shows at once.
The LLM Secret is seen without its values (``builders.secrets.credentials_view``); the one
value read here, the session's API token, goes only to the session's own runtime API.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterable
from datetime import UTC, datetime
from typing import Any

from berth_contract.state import RuntimeState
from berth_operator.api.agentsession import AgentSessionSpec, AgentSessionStatus
from berth_operator.api.common import SessionRef
from berth_operator.builders.claim import build_shared_claim, claim_name, claim_status
from berth_operator.builders.secrets import (
    credentials_allowed,
    credentials_view,
    llm_credentials_problem,
)
from berth_operator.errors import (
    NotFound,
    RuntimeUnauthorized,
    RuntimeUnreachable,
)
from berth_operator.handlers.context import OperatorContext
from berth_operator.handlers.session_workers import LiveSession
from berth_operator.handlers.volume_setup import claim_setup_status
from berth_operator.metrics import STATE_REFRESH_FAILURES
from berth_operator.reconcile import idle
from berth_operator.reconcile.observe import ObservedNode, ObservedPod, observe_node
from berth_operator.reconcile.passivation import Trigger, node_disruption
from berth_operator.reconcile.plan import Observation
from berth_operator.reconcile.warmpool import WarmOffer

CLAIM_READY_TTL_SECONDS = 10.0
"""How long a Bound shared claim is taken as still Bound without reading it again."""
LLM_SECRET_TTL_SECONDS = 2.0
"""How long an LLM Secret allowed for Berth is taken as still allowed without reading it again."""


async def read_node(ctx: OperatorContext, name: str, live: LiveSession | None) -> ObservedNode:
    """Node ``name`` as the node watch last saw it, or read from the apiserver when the watch
    has not shown it (or outside a worker)."""
    if live is not None and live.nodes is not None:
        for node in live.nodes.get(name, []):
            return node
    return observe_node(await ctx.kube.get_node(name), name)


async def nodes_for(
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
        nodes[pod.node_name] = await read_node(ctx, pod.node_name, live)
    return nodes


async def missing_laneworkers(ctx: OperatorContext, ns: str, spec: AgentSessionSpec) -> list[str]:
    """Names (sorted, once each) of the LaneWorkers the spec's external lanes name that do not
    exist in ``ns``; a pod is not placed before they do."""
    missing: list[str] = []
    for lane in (spec.lanes or {}).values():
        if lane.lane_worker_ref is None or lane.mode == "internal":
            continue
        try:
            await ctx.kube.get_laneworker(ns, lane.lane_worker_ref.name)
        except NotFound:
            missing.append(lane.lane_worker_ref.name)
    return sorted(set(missing))


async def credentials_problem(
    ctx: OperatorContext, ns: str, spec: AgentSessionSpec
) -> tuple[str, str] | None:
    """(reason, message) when the session's LLM Secret or baseURL must not be used. The Secret
    is read once for all the sessions placed at the same moment (``read_secret_shared``)."""
    ref = spec.llm.api_key_secret_ref if spec.llm is not None else None
    secret = None
    if ref is not None and ctx.secrets is not None:
        secret = await llm_secret(ctx, ns, ref.name)
    elif ref is not None:
        return None  # no Secret access configured (unit tests): nothing to check against
    return llm_credentials_problem(spec, secret, ctx.settings.llm.allowed_base_urls)


async def llm_secret(ctx: OperatorContext, ns: str, name: str) -> dict[str, Any] | None:
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


async def shared_claim_status(
    ctx: OperatorContext, ns: str, spec: AgentSessionSpec
) -> tuple[bool, str, str]:
    """``StoreReady`` of the session's shared claim (``builders.claim.claim_status``), or of its
    set-up while that runs or failed (``handlers.volume_setup``; a managed claim is created
    here first when set-up is on). A ready
    (Bound) claim is remembered for ``CLAIM_READY_TTL_SECONDS``: every session of a namespace
    shares it, and a burst of placements would otherwise read it once per session."""
    name = claim_name(spec, ctx.settings)
    key = (ns, name)
    remembered = ctx.ready_claims.get(key)
    if remembered is not None and time.monotonic() - remembered[0] < CLAIM_READY_TTL_SECONDS:
        return remembered[1]
    body = await ctx.kube.get_pvc(ns, name)
    claims = ctx.settings.claims
    if body is None and claims.managed and claims.setup:
        # Created here, not beside the pod: its set-up Job runs before the first pod.
        body = build_shared_claim(ns, name, ctx.settings)
        await ctx.kube.create_pvc(body)
    status = await claim_setup_status(ctx.kube, ctx.settings, ns, name, body) or claim_status(
        ns, name, body, claims.managed
    )
    if status[0]:
        ctx.ready_claims[key] = (time.monotonic(), status)
    else:
        ctx.ready_claims.pop(key, None)
    return status


async def api_token(ctx: OperatorContext, ref: SessionRef) -> str | None:
    """The session's API token (cached per uid; read from ``<name>-berth`` on first use)."""
    token = ctx.memory.token(ref.uid)
    if token is None and ctx.secrets is not None:
        token = await ctx.secrets.api_token(ref)
        if token is not None:
            ctx.memory(ref.uid).token = token
    return token


async def observe(
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
    nodes = await nodes_for(ctx, cached, status, live)
    current = next((p for p in cached if p.epoch == (status.epoch or 0)), None)
    state, state_error = await runtime_state(ctx, ref, current, nodes, live)
    memory = ctx.memory(uid)
    evictions = frozenset(memory.evictions)
    if current is not None and current.name in evictions:
        disruptions = await with_eviction_node(ctx, current, disruptions)
    missing: list[str] = []
    credentials = None
    claim = None
    alive = [p for p in cached if not p.deleting and p.terminated is None]
    if not alive and inflight is None:
        missing, credentials, claim = await asyncio.gather(
            missing_laneworkers(ctx, namespace, spec),
            credentials_problem(ctx, namespace, spec),
            shared_claim_status(ctx, namespace, spec),
        )
    elif current is not None and not current.scheduled and not current.deleting:
        claim = await shared_claim_status(ctx, namespace, spec)  # may explain a Pending pod
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
        precise_now=now_ms(),
        wake_requested_at=idle.parse_wake(
            (meta.get("annotations") or {}).get(idle.WAKE_ANNOTATION)
        ),
        reserved_epoch=memory.reservation,
        create_failure=memory.create_failure,
        warm=warm_offer(ctx, ref, spec),
    )


def warm_offer(ctx: OperatorContext, ref: SessionRef, spec: AgentSessionSpec) -> WarmOffer | None:
    """The pool ``spec.warmPoolRef`` names, as this process's pool daemons and pod index see it
    (memory only, no request): None when the session names no pool; without a template when the
    pool or its adoption token is not known here."""
    if spec.warm_pool_ref is None:
        return None
    key = (ref.namespace, spec.warm_pool_ref.name)
    view = ctx.warm.pools.get(key)
    if view is None or key not in ctx.warm.tokens or ctx.warm.pods_index is None:
        return WarmOffer(key[1])
    return WarmOffer(
        key[1],
        template=view.template,
        template_hash=view.template_hash,
        pods=tuple(ctx.warm.pods_index.get(key, [])),
        claimed=frozenset(ctx.warm.claimed_names(key)),
    )


async def runtime_state(
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
        return await ctx.runtime.state(current.pod_ip, await api_token(ctx, ref)), None
    except RuntimeUnreachable as exc:
        if isinstance(exc, RuntimeUnauthorized):
            ctx.memory(ref.uid).token = None
        STATE_REFRESH_FAILURES.inc()
        if current.node_name and current.node_name not in nodes:
            nodes[current.node_name] = await read_node(ctx, current.node_name, live)
        return None, str(exc)


async def with_eviction_node(
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


def now_ms() -> datetime:
    """Wall clock truncated to milliseconds (passivation timestamps in status)."""
    now = datetime.now(UTC)
    return now.replace(microsecond=now.microsecond // 1000 * 1000)
