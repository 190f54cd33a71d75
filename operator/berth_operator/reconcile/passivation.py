"""Passivation before eviction: the pure decisions (docs/architecture.md §8).

Called by ``reconcile.session.decide`` (one session) and by ``handlers.nodes`` /
``handlers.webhook`` (which nodes and pods are disrupted). Nothing here does I/O.

Triggers, in the order they win when several appear at once (the first one recorded in
``status.passivation`` always wins afterwards, like the runtime's own first-request-wins rule):

| trigger                                                         | reason       |
|-----------------------------------------------------------------|--------------|
| ``spec.suspend: true``                                          | ``suspend``   |
| the pod's node is cordoned or carries a disruption taint         | ``node_drain``|
| (also when an eviction request arrives first: drains cordon,     |              |
| then evict)                                                      |              |
| an eviction request for the pod (``pods/eviction`` webhook)      | ``eviction``  |
| the runtime reports a passivation it accepted from someone else  | ``manual``    |
| (``kubectl berth passivate``)                                    |              |
| a keepAlive pod idle for ``spec.idle.afterSeconds`` (``.idle``)  | ``idle_reaper``|
| the pod runs an image other than the session's current one, a    | ``migration`` |
| migration slot is free (``.migration``; ``imageUpdatePolicy``)   |              |

Disruption taints (``DISRUPTION_TAINTS``): ``node.kubernetes.io/unschedulable`` (set by the node
lifecycle controller on ``kubectl cordon``/``drain``), ``ToBeDeletedByClusterAutoscaler``
(cluster-autoscaler scale-down) and Karpenter's ``karpenter.sh/disrupted`` (v1) /
``karpenter.sh/disruption`` (v0.3x). ``spec.unschedulable`` alone counts too.

The protocol for one pod (``step``)::

    no record ──trigger──► request: record {reason, requestedAt, deadline}, POST /v1/passivate
    record, pod Pending (not started)   ──► delete now (no run to protect)
    record, before the deadline         ──► wait (POST again: idempotent, survives restarts)
    record, deadline passed             ──► delete the pod (grace ``kill_grace_seconds``)
    pod ended (any way) with a record   ──► Passivated verdict: no failure count, no backoff,
                                             replacement placed away from the node, resume_run

Why the operator deletes the pod itself instead of evicting it: a PodDisruptionBudget with
``minAvailable: 1`` (``builders.pdb``) makes every eviction of the session pod answer 429, which
keeps ``kubectl drain`` retrying until the pod is gone; a DELETE is not subject to PDBs.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from typing import Final, Literal

from berth_contract.state import RuntimeState
from berth_operator.api.agentsession import (
    EVICTION,
    MANUAL,
    NODE_DRAIN,
    SUSPEND,
    TRIGGERS,
    PassivationOutcome,
    PassivationStatus,
    PassivationTrigger,
)
from berth_operator.api.conditions import PlacementReason
from berth_operator.reconcile.observe import ObservedNode, ObservedPod
from berth_operator.reconcile.replacement import Verdict

DISRUPTION_TAINTS: Final[Mapping[str, str]] = {
    "node.kubernetes.io/unschedulable": "is cordoned",
    "ToBeDeletedByClusterAutoscaler": "is being removed by the cluster autoscaler",
    "karpenter.sh/disrupted": "is being disrupted by Karpenter",
    "karpenter.sh/disruption": "is being disrupted by Karpenter",
}
"""Taint key → what it means. Any effect counts (they are NoSchedule in practice)."""

AVOIDING_REASONS: Final = frozenset({NODE_DRAIN, EVICTION})
"""Triggers after which the replacement must not go back to the same node."""


@dataclass(frozen=True, slots=True)
class Trigger:
    """Why the pod must passivate now."""

    reason: PassivationTrigger
    message: str
    node_name: str | None = None


def node_disruption(node: ObservedNode) -> Trigger | None:
    """``node_drain`` when the node is unschedulable or carries a disruption taint, else None."""
    if not node.exists:
        return None  # a deleted node is node loss (reconcile.replacement), not a drain
    for key, _effect in node.taints:
        if key in DISRUPTION_TAINTS:
            return Trigger(
                NODE_DRAIN, f"node {node.name} {DISRUPTION_TAINTS[key]} ({key})", node.name
            )
    if node.unschedulable:
        return Trigger(NODE_DRAIN, f"node {node.name} is cordoned (spec.unschedulable)", node.name)
    return None


def disrupted_nodes(nodes: Iterable[ObservedNode]) -> dict[str, Trigger]:
    """Node name → its disruption, for the disrupted ones only."""
    out: dict[str, Trigger] = {}
    for node in nodes:
        trig = node_disruption(node)
        if trig is not None:
            out[node.name] = trig
    return out


def trigger_for(
    *,
    suspend: bool,
    pod: ObservedPod,
    node: Trigger | None,
    eviction_requested: bool,
    state: RuntimeState | None,
    idle: Trigger | None = None,
    migration: Trigger | None = None,
) -> Trigger | None:
    """The trigger that applies to the (alive) current pod, in the module table's order;
    ``idle`` is the idle reaper's (:func:`berth_operator.reconcile.idle.check`), ``migration``
    the image check's (:func:`berth_operator.reconcile.migration.check`). A migration comes
    last: any other passivation also moves the session to the current image (its replacement
    is built with it), so asking for one more is never needed."""
    if suspend:
        return Trigger(SUSPEND, "spec.suspend is true", pod.node_name or None)
    if node is not None:
        if eviction_requested:
            return replace(node, message=f"{node.message}; eviction of pod {pod.name} requested")
        return node
    if eviction_requested:
        return Trigger(EVICTION, f"eviction of pod {pod.name} requested", pod.node_name or None)
    if idle is not None:
        return idle
    if state is not None and state.passivation is not None and state.passivation.reason:
        reason = state.passivation.reason
        trigger: PassivationTrigger = MANUAL
        for known in TRIGGERS:
            if reason == known:
                trigger = known
        return Trigger(
            trigger, f"the runtime accepted a passivation ({reason})", pod.node_name or None
        )
    return migration


def record_for(
    trigger: Trigger,
    pod: ObservedPod,
    now: datetime,
    deadline_seconds: int,
    state: RuntimeState | None = None,
) -> PassivationStatus:
    """A new ``status.passivation``. For a passivation the runtime accepted by itself (manual),
    its own request time and deadline are kept."""
    requested = now
    deadline = now + timedelta(seconds=deadline_seconds)
    p = state.passivation if state is not None else None
    if trigger.reason == MANUAL and p is not None:
        if p.requested_ms:
            requested = datetime.fromtimestamp(p.requested_ms / 1000, now.tzinfo)
        if p.deadline_ms:
            deadline = datetime.fromtimestamp(p.deadline_ms / 1000, now.tzinfo)
    return PassivationStatus(
        reason=trigger.reason,
        message=trigger.message[:1024],
        pod_name=pod.name,
        epoch=pod.epoch,
        node_name=trigger.node_name or pod.node_name or None,
        requested_at=requested,
        deadline=deadline,
    )


def active_for(record: PassivationStatus | None, pod_name: str) -> bool:
    """Whether ``record`` is an unfinished passivation of ``pod_name``."""
    return record is not None and record.outcome == "passivating" and record.pod_name == pod_name


StepKind = Literal["none", "request", "wait", "delete_now", "deadline"]


@dataclass(frozen=True, slots=True)
class Step:
    """What to do with the alive current pod.

    ``record`` is the passivation record to store (new for ``request``); ``post`` says whether to
    POST /v1/passivate (idempotent, so repeated while waiting); ``requeue`` is in seconds.
    """

    kind: StepKind
    record: PassivationStatus | None = None
    post: bool = False
    requeue: float | None = None


def step(
    record: PassivationStatus | None,
    pod: ObservedPod,
    trigger: Trigger | None,
    now: datetime,
    *,
    deadline_seconds: int,
    state: RuntimeState | None = None,
) -> Step:
    """Decide for an alive pod (see the module docstring). Pure."""
    current = record if active_for(record, pod.name) else None
    if current is None:
        if trigger is None:
            return Step("none", record)
        current = record_for(trigger, pod, now, deadline_seconds, state)
        kind: StepKind = "request"
    else:
        kind = "wait"
    if pod.phase == "Pending" or not pod.pod_ip:
        # Not started: no run to checkpoint and no API to call. Delete it; the replacement goes
        # elsewhere (or nowhere while suspended).
        return Step("delete_now", current)
    left = (current.deadline - now).total_seconds()
    if left <= 0:
        return Step("deadline", current)
    return Step(kind, current, post=True, requeue=left)


def deadline_ms(record: PassivationStatus) -> int:
    """The record's deadline in epoch milliseconds (the ``deadlineMs`` of POST /v1/passivate)."""
    return int(record.deadline.timestamp() * 1000)


def reclassify(record: PassivationStatus | None, pod_name: str, verdict: Verdict) -> Verdict:
    """A pod that ends while its passivation is active ends *passivated*, however it ended.

    The runtime's clean exit is already a Passivated verdict. A pod the operator deleted at the
    deadline, one that ``kubectl drain`` removed after it finished, or one that vanished before the
    operator saw its termination message would otherwise count as a crash or a deletion (a retry,
    a backoff); here they become Passivated with the trigger in the detail. Node loss keeps its
    forced deletion. Other verdicts pass through unchanged.
    """
    if record is None or verdict.kind != "replace" or not active_for(record, pod_name):
        return verdict
    if verdict.reason == PlacementReason.PASSIVATED:
        detail = verdict.detail or record.reason
        return replace(verdict, detail=detail)
    return Verdict(
        "replace",
        PlacementReason.PASSIVATED,
        f"{record.reason}: pod ended during passivation ({verdict.reason}: {verdict.detail})",
        counts_as_failure=False,
        force_delete=verdict.force_delete,
        termination=verdict.termination,
        run_outcome="passivated",
    )


def finish(
    record: PassivationStatus, outcome: PassivationOutcome, now: datetime
) -> PassivationStatus:
    """The record once the pod ended (``passivated``/``deadline``) or the run ended otherwise."""
    if record.outcome != "passivating":
        return record
    return record.model_copy(update={"outcome": outcome, "passivated_at": now})


def avoid_nodes(record: PassivationStatus | None) -> tuple[str, ...]:
    """Nodes the next placement must avoid: the disrupted node of a passivation awaiting resume."""
    if (
        record is None
        or record.outcome not in ("passivated", "deadline")
        or record.resumed_at is not None
        or record.reason not in AVOIDING_REASONS
        or not record.node_name
    ):
        return ()
    return (record.node_name,)


@dataclass(frozen=True, slots=True)
class Reservation:
    """The epoch a stored passivation request reserved for its pod's replacement, and that
    request's ``requestedAt`` (which request: a reservation is good for its own request only)."""

    epoch: int
    requested_at: datetime


def reservation(
    before: PassivationStatus | None, after: PassivationStatus | None
) -> Reservation | None:
    """The epoch that storing ``after`` over ``before`` reserves: a new passivation request of
    the pod of epoch N reserves N+1 for that pod's replacement. Pure.

    The request is stored before the pod can end, so once it is stored no pod of N+1 exists
    yet, and the process that stored it knows N+1 unused until it places that replacement: it
    may then create the pod beside the status write naming it instead of after it
    (``replacement_epoch``). None when ``after`` is not a new request."""
    if after is None or after.outcome != "passivating":
        return None
    if before is not None and (before.pod_name, before.epoch, before.requested_at) == (
        after.pod_name,
        after.epoch,
        after.requested_at,
    ):
        return None
    return Reservation(after.epoch + 1, after.requested_at)


def replacement_epoch(
    record: PassivationStatus | None, epoch: int, reserved: Reservation | None
) -> tuple[int, bool]:
    """(the epoch of the next pod when the stored epoch is ``epoch``, whether its create may go
    beside the status write that stores it). Pure.

    Normally ``epoch + 1``, created after the write (the epoch is durable before any pod of it
    exists, so a restart can skip an epoch but never reuse one). For the replacement of a
    passivated pod of ``epoch``: ``epoch + 1`` beside the write when this process holds that
    request's reservation (``reserved``, from ``reservation``: durable already, and unused);
    otherwise ``epoch + 2`` after the write, since another process (before a restart, or an
    earlier leader) that held the reservation may have created a pod of ``epoch + 1`` whose
    status write was lost."""
    if (
        record is None
        or record.epoch != epoch
        or record.resumed_at is not None
        or record.outcome not in ("passivated", "deadline")
    ):
        return epoch + 1, False
    if reserved == Reservation(epoch + 1, record.requested_at):
        return epoch + 1, True
    return epoch + 2, False


def resumed(
    record: PassivationStatus | None,
    pod: ObservedPod,
    run_id: str | None,
    now: datetime,
    started: datetime | None = None,
) -> PassivationStatus | None:
    """The record marked resumed when a later epoch's pod runs ``run_id``; None when not yet.
    Pure.

    Dated ``started``, when the pod's runtime started that run (``runStartedMs`` of its
    ``/v1/state``; the pod's clock), kept between the old pod's end and ``now`` (a skewed clock
    can neither date the resume before the passivation nor after it was seen); ``now`` without
    it. So the resume latency is the session's downtime, not the time until the operator next
    looked (its status refresh), as the passivation's end is dated by the pod's own report."""
    if (
        record is None
        or record.outcome not in ("passivated", "deadline")
        or record.resumed_at is not None
        or not run_id
        or pod.epoch <= record.epoch
    ):
        return None
    at = now
    if started is not None:
        at = min(now, max(record.passivated_at or record.requested_at, started))
    return record.model_copy(update={"resumed_at": at, "resumed_run_id": run_id})


def seconds_between(start: datetime, end: datetime | None) -> float | None:
    """``end - start`` in seconds (never negative); None without ``end``."""
    if end is None:
        return None
    return max(0.0, (end - start).total_seconds())
