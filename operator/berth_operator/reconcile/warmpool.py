"""Decisions of a SessionWarmPool: which warm pods to create and delete, its status, and which
warm pod a session adopts. Pure; the I/O is ``handlers.sessionwarmpool``.

Counting (what keeps a stale watch cache from over-creating, a failure of warm-pool controllers that
count only their cache): a pool has ``live`` pods (seen in the watch cache, of the current template,
not being deleted, not claimed by an adoption in flight) plus ``inflight`` creates (made by this
operator, not yet seen). Only ``replicas - (live + inflight)`` are created, and the handler LISTs
the pool's pods straight from the apiserver and decides again before it creates anything, so neither
a lagging cache nor a restarted operator makes extra pods. A pod claimed by an adoption in flight
counts for neither the pool nor its refill until the cache shows it relabelled: the refill is then
exactly one pod per adoption. That refill waits a moment (``refills_held``): a burst of adoptions (a
drain) is a burst of sessions starting, and starting as many warm pods beside them would take the
CPU they need.

Pods that are never used and are deleted: a pod of another template (the template changed; pods
already adopted left the pool and are untouched), a pod on a node being drained or cordoned, a pod
that ended.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from berth_operator.api.agentsession import AgentSessionSpec
from berth_operator.api.conditions import ConditionSet, Reason
from berth_operator.api.sessionwarmpool import (
    LABEL_WARM_POOL,
    LABEL_WARM_TEMPLATE,
    SessionWarmPoolStatus,
    WarmPodTemplate,
    template_mismatch,
)
from berth_operator.reconcile.observe import parse_time

MAX_CREATES_PER_STEP = 20
"""Pods created by one decision at most (the next decision, woken by their events, goes on)."""
READY = "Ready"


@dataclass(frozen=True, slots=True)
class WarmPod:
    """What the operator knows about one warm pod."""

    name: str
    uid: str
    pool: str
    template: str
    resource_version: str = ""
    phase: str = "Pending"
    node_name: str = ""
    pod_ip: str = ""
    ready: bool = False
    deleting: bool = False
    created_at: datetime | None = None
    waiting_reason: str = ""
    """``state.waiting.reason`` of the container (ImagePullBackOff, ...), "" when not waiting."""
    waiting_message: str = ""

    @property
    def ended(self) -> bool:
        """The container exited (a warm pod never ends by itself)."""
        return self.phase in ("Succeeded", "Failed")


def observe_warm_pod(body: Mapping[str, Any]) -> WarmPod:
    """A pod body (camelCase dict) as a :class:`WarmPod`."""
    meta = body.get("metadata") or {}
    labels = meta.get("labels") or {}
    status = body.get("status") or {}
    conds = {c.get("type"): c for c in status.get("conditions") or []}
    containers = status.get("containerStatuses") or [{}]
    waiting = (containers[0].get("state") or {}).get("waiting") or {}
    return WarmPod(
        name=str(meta.get("name", "")),
        uid=str(meta.get("uid", "")),
        pool=str(labels.get(LABEL_WARM_POOL, "")),
        template=str(labels.get(LABEL_WARM_TEMPLATE, "")),
        resource_version=str(meta.get("resourceVersion", "")),
        phase=str(status.get("phase") or "Pending"),
        node_name=str((body.get("spec") or {}).get("nodeName") or ""),
        pod_ip=str(status.get("podIP") or ""),
        ready=(conds.get("Ready") or {}).get("status") == "True",
        deleting=bool(meta.get("deletionTimestamp")),
        created_at=parse_time(meta.get("creationTimestamp")),
        waiting_reason=str(waiting.get("reason") or ""),
        waiting_message=str(waiting.get("message") or ""),
    )


@dataclass(frozen=True, slots=True)
class PoolInput:
    """One pool decision's input. ``inflight``: names of pods created and not seen yet;
    ``claimed``: names of pods an adoption in flight has taken; ``disrupted``: nodes being
    drained or cordoned; ``adopted_total``/``last_adoption_at``: this operator's counts."""

    name: str
    generation: int
    replicas: int
    template_hash: str
    pods: tuple[WarmPod, ...]
    now: datetime
    status: SessionWarmPoolStatus
    inflight: frozenset[str] = frozenset()
    claimed: frozenset[str] = frozenset()
    disrupted: frozenset[str] = frozenset()
    refills_held: int = 0
    """Pods taken by adoptions so recently that their refills wait (the operator's
    ``warm_refill_delay_seconds``): the adopted sessions' start-up gets the nodes' CPU first."""


@dataclass(slots=True)
class PoolPlan:
    """Output: pods to create (a count), pods to delete (name, uid, why), the status and a
    Warning Event to post."""

    status: SessionWarmPoolStatus
    create: int = 0
    delete: list[tuple[str, str, str]] = field(default_factory=list)
    warning: tuple[str, str] | None = None
    """(reason, message) of an Event for a problem a user must fix, once per new problem."""


def _unusable(pod: WarmPod, inp: PoolInput) -> str:
    """Why ``pod`` is deleted instead of kept ("" when it is kept)."""
    if pod.ended:
        return f"pod ended ({pod.phase})"
    if pod.template != inp.template_hash:
        return "template changed"
    if pod.node_name and pod.node_name in inp.disrupted:
        return f"node {pod.node_name} is being drained"
    return ""


def decide_pool(inp: PoolInput) -> PoolPlan:
    """The pool's next step (module docstring). Pure."""
    live: list[WarmPod] = []
    plan = PoolPlan(status=inp.status.model_copy(deep=True))
    for pod in inp.pods:
        if pod.deleting or pod.name in inp.claimed:
            continue
        why = _unusable(pod, inp)
        if why:
            plan.delete.append((pod.name, pod.uid, why))
        else:
            live.append(pod)
    seen = {p.name for p in inp.pods}
    inflight = len(inp.inflight - seen)
    have = len(live) + inflight
    if have < inp.replicas:
        plan.create = max(0, min(inp.replicas - have - inp.refills_held, MAX_CREATES_PER_STEP))
    elif have > inp.replicas:
        # not-Ready first, then the newest: keep the pods most likely to be adopted soon
        excess = sorted(live, key=lambda p: (p.ready, -(p.created_at or inp.now).timestamp()))
        for pod in excess[: max(0, min(have - inp.replicas, len(live)))]:
            plan.delete.append((pod.name, pod.uid, "scaled down"))
    ready = sum(1 for p in live if p.ready)
    st = plan.status
    st.observed_generation = inp.generation
    st.replicas = have + plan.create
    st.ready_replicas = ready
    st.adopting_replicas = len(inp.claimed)
    st.template_hash = inp.template_hash
    st.selector = f"{LABEL_WARM_POOL}={inp.name}"
    conds = ConditionSet(st.conditions, inp.now, inp.generation)
    stuck = next((p for p in live if p.waiting_reason in Reason.STUCK_WAITING), None)
    if ready >= inp.replicas:
        conds.set(READY, "True", "PoolReady", f"{ready} warm pod(s) ready")
    elif stuck is not None:
        # what a user must fix (an image that cannot be pulled, a bad mount): say it once
        msg = f"pod {stuck.name}: {stuck.waiting_reason}: {stuck.waiting_message}"[:1024]
        before = conds.get(READY)
        if before is None or before.reason != stuck.waiting_reason:
            plan.warning = (stuck.waiting_reason, msg)
        conds.set(READY, "False", stuck.waiting_reason, msg)
    else:
        conds.set(
            READY, "False", "Filling", f"{ready}/{inp.replicas} warm pod(s) ready, {have} exist"
        )
    st.conditions = conds.items
    return plan


def choose_warm_pod(
    pods: Collection[WarmPod],
    template_hash: str,
    *,
    claimed: Collection[str],
    disrupted: Collection[str],
    avoid_nodes: Collection[str],
) -> list[WarmPod]:
    """The warm pods a session may adopt, best first: Ready, running, of ``template_hash``, not
    being deleted or claimed, with an IP, on a node neither being drained nor to be avoided (the
    node a passivation moved the session away from). Oldest first (its imports are surely done).
    Pure."""
    ok = [
        p
        for p in pods
        if p.ready
        and p.phase == "Running"
        and p.pod_ip
        and not p.deleting
        and p.template == template_hash
        and p.name not in claimed
        and p.node_name not in disrupted
        and p.node_name not in avoid_nodes
    ]
    return sorted(ok, key=lambda p: (p.created_at is None, p.created_at or datetime.min, p.name))


@dataclass(frozen=True, slots=True)
class WarmOffer:
    """A session's named pool as this process sees it when the session is observed
    (``handlers.session_reads.warm_offer``): its template and hash as its daemon last saw them
    (``template`` None: no pool of that name is known here, or it has no adoption token yet),
    its waiting pods, and the names already claimed by other adoptions."""

    pool: str
    template: WarmPodTemplate | None = None
    template_hash: str = ""
    pods: tuple[WarmPod, ...] = ()
    claimed: frozenset[str] = frozenset()


@dataclass(frozen=True, slots=True)
class Adoption:
    """The adopt-or-create choice for a pod to place: the warm pods of ``pool`` to try, best
    first, or none with ``outcome`` saying why (``no_pool``, ``template_mismatch``, ``no_pod``:
    the ``berth_warm_adoptions_total`` label) and ``why`` the mismatch in words."""

    pool: str
    candidates: tuple[WarmPod, ...] = ()
    outcome: str = ""
    why: str = ""


def choose_adoption(
    offer: WarmOffer,
    spec: AgentSessionSpec,
    *,
    disrupted: Collection[str],
    avoid_nodes: Collection[str],
    default_image: str,
    default_deadline: int,
) -> Adoption:
    """Adopt or create: the pool's pods that may become the session's pod (``choose_warm_pod``)
    when the pool exists and its template serves ``spec`` (``template_mismatch``, with the
    operator's default image and passivation deadline); else an Adoption without candidates
    that says why, and the pod is created. Pure."""
    if offer.template is None:
        return Adoption(offer.pool, outcome="no_pool")
    why = template_mismatch(spec, offer.template, default_image, default_deadline)
    if why:
        return Adoption(offer.pool, outcome="template_mismatch", why=why)
    candidates = choose_warm_pod(
        offer.pods,
        offer.template_hash,
        claimed=offer.claimed,
        disrupted=disrupted,
        avoid_nodes=avoid_nodes,
    )
    if not candidates:
        return Adoption(offer.pool, outcome="no_pod")
    return Adoption(offer.pool, candidates=tuple(candidates))
