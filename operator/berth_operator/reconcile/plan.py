"""The AgentSession decision's input and output: :class:`Observation` in, :class:`Plan` out.

Owned by ``berth_operator.reconcile``: :func:`berth_operator.reconcile.session.decide` reads an
Observation and fills a Plan; :mod:`.session_passivation` adds the passivation steps to it; the
handler (``handlers.agentsession``) applies the Plan in order: status, deletes, passivate call,
create, Events. Pure data, no I/O.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import Literal

from berth_contract.state import RuntimeState
from berth_operator.api.agentsession import AgentSessionSpec, AgentSessionStatus, Phase
from berth_operator.api.common import ConditionStatus, SessionRef
from berth_operator.api.conditions import ConditionSet, CondType, Reason
from berth_operator.reconcile.observe import ObservedNode, ObservedPod
from berth_operator.reconcile.passivation import Reservation, Trigger
from berth_operator.reconcile.warmpool import Adoption, WarmOffer
from berth_operator.settings import OperatorSettings

NOT_RUNNING_REQUEUE = 1.0
"""Seconds between looks while a pod is starting or being removed."""
STARTING_POLL_SECONDS = 30.0
"""For this long after a session stopped running (placed, resumed), a started adopted warm pod
whose runtime does not answer yet is asked again every ``NOT_RUNNING_REQUEUE``: it was Ready
before its session started, so no pod event tells when the run is up. A created pod's readiness
change wakes the session through the pod watch instead."""
TERMINAL_REQUEUE = 300.0
"""Seconds between looks at a finished session (object and pod events still wake it)."""
LANEWORKER_REQUEUE = 10.0
"""Seconds between looks while a referenced LaneWorker is missing."""


@dataclass(frozen=True, slots=True)
class Observation:
    """Everything ``decide`` looks at."""

    ref: SessionRef
    spec: AgentSessionSpec
    status: AgentSessionStatus
    pods: tuple[ObservedPod, ...] = ()
    nodes: dict[str, ObservedNode] = field(default_factory=dict)
    inflight: str | None = None
    """Name of a pod this process created that the watch cache has not shown yet."""
    state: RuntimeState | None = None
    state_error: str | None = None
    missing_laneworkers: tuple[str, ...] = ()
    claim: tuple[bool, str, str] | None = None
    """``StoreReady`` as observed (ready, reason, message; ``builders.claim.claim_status``), None
    when the claim was not looked at this time (it is read only when a pod may be placed or the
    current pod is not scheduled yet)."""
    credentials_problem: tuple[str, str] | None = None
    """(reason, message) when the LLM Secret or baseURL must not be used (no pod is placed)."""
    now: datetime = field(default_factory=lambda: datetime.now(UTC))
    node_disruptions: Mapping[str, Trigger] = field(default_factory=dict)
    """Disrupted nodes (cordoned / disruption taint) by name (handlers.nodes index)."""
    evictions: frozenset[str] = frozenset()
    """Names of this session's pods for which an eviction was requested (handlers.webhook)."""
    precise_now: datetime | None = None
    """``now`` with milliseconds, for the passivation timestamps (default ``now``)."""
    wake_requested_at: datetime | None = None
    """``berth.dev/wake-requested-at`` of the session (``reconcile.idle``), None when absent."""
    migrating: frozenset[str] = frozenset()
    """Uids of the sessions migrating to a new image now (``reconcile.migration``), this one
    included when it already holds a slot."""
    reserved_epoch: Reservation | None = None
    """The epoch a passivation request this process stored reserved for the replacement and
    that no create has used yet (``passivation.reservation``); None when it holds none."""
    create_failure: CreateFailure | None = None
    """The last failed attempt of this process to create the pod of a stored epoch (None when
    none failed since the last pod it created)."""
    warm: WarmOffer | None = None
    """The pool the session names (``spec.warmPoolRef``) as this process sees it; None when it
    names none."""


@dataclass(frozen=True, slots=True)
class CreatePod:
    """Create the pod of ``epoch`` (after the status with that epoch was written)."""

    epoch: int
    reason: str
    resume_run_id: str | None
    avoid_nodes: tuple[str, ...] = ()
    """Nodes the pod must not be scheduled to (the node a passivation moved it away from)."""
    reserved: bool = False
    """The epoch was reserved by a passivation request this process stored
    (``passivation.replacement_epoch``): the pod may be created beside the status write."""
    adopt: Adoption | None = None
    """The warm pods to try before creating (``warmpool.choose_adoption``); None when the
    session names no pool."""


@dataclass(frozen=True, slots=True)
class CreateFailure:
    """An attempt to create the pod of ``create.epoch`` that failed after that epoch was stored
    and before the pod existed: an object it needs (its Secret, PodDisruptionBudget or claim)
    not written, the guard's LIST or the create itself refused (RBAC, a ResourceQuota, an
    admission webhook). The pod never ran, so ``decide`` places the same epoch again after the
    placement backoff (``PlacementSettings.backoff_seconds(attempts)`` from ``failed_at``)
    instead of counting a lost pod and moving to the next epoch.

    ``message``: the error as the apiserver gave it (no Secret values reach it); ``attempts``:
    failed attempts at this epoch in a row (1-based)."""

    create: CreatePod
    message: str
    attempts: int
    failed_at: datetime


@dataclass(frozen=True, slots=True)
class DeletePod:
    """Delete a pod (``uid`` as precondition; ``force`` = gracePeriodSeconds 0)."""

    name: str
    uid: str
    force: bool = False
    grace_seconds: int | None = None
    """gracePeriodSeconds override (passivation deadline: a short SIGTERM→SIGKILL window)."""


@dataclass(frozen=True, slots=True)
class Event:
    """A Kubernetes Event to post on the AgentSession."""

    type: str
    reason: str
    message: str


@dataclass(slots=True)
class Plan:
    """What the handler does, in order: status, deletes, passivate call, Events, create, the
    deletes after the create, and what this process remembers of the pass."""

    status: AgentSessionStatus
    delete: list[DeletePod] = field(default_factory=list)
    delete_after_create: list[DeletePod] = field(default_factory=list)
    """Those of ``delete`` that wait for the create: pods that have ended
    (``ObservedPod.ended``) hold the new pod back no more, so their deletes go beside the
    session's next pass instead of before the create."""
    create: CreatePod | None = None
    events: list[Event] = field(default_factory=list)
    requeue_after: float | None = None
    passivate: PassivateCall | None = None
    """POST /v1/passivate to make after the status write (idempotent; repeated while waiting)."""
    metrics: list[PassivationMetric] = field(default_factory=list)
    """Passivation and resume latencies to observe."""
    reserve: Reservation | None = None
    """The epoch this pass's status write reserves (``passivation.reservation``): remembered by
    the process (``SessionMemory.reservation``) once the write is stored, so the replacement may
    be created beside the write naming it (``CreatePod.reserved``)."""

    def without_create(self) -> Plan:
        """This plan with no pod to create (no delete waits for one)."""
        return replace(self, create=None, delete_after_create=[])

    def delete_now(self) -> list[DeletePod]:
        """The deletes to make before the create, in order."""
        return [d for d in self.delete if d not in self.delete_after_create]


@dataclass(frozen=True, slots=True)
class PassivateCall:
    """``POST http://<pod_ip>:8080/v1/passivate {reason, deadlineMs}`` for the handler to make."""

    pod_ip: str
    reason: str
    deadline_ms: int
    pod_uid: str = ""
    """The pod's uid: its reported end (``GET /v1/outcome``) is kept under it."""
    resend: bool = False
    """The request is already in the stored status (this call repeats it, in case an earlier
    one was not delivered): it does not need this pass's status written first."""
    epoch: int | None = field(default=None, compare=False)
    node: str = field(default="", compare=False)
    identity: Mapping[str, str | None] = field(default_factory=dict, compare=False)
    run_trace: str = field(default="", compare=False)
    """The pod's epoch and node, the session's identity labels and the W3C traceparent of the run
    it stops (its ``/v1/state``): for the request's span only (not part of the decision, so not
    of its equality)."""


@dataclass(frozen=True, slots=True)
class PassivationMetric:
    """A latency for the handler to observe: ``passivation`` (requested → pod ended, labelled by
    outcome) or ``resume`` (pod ended → resumed run seen running). Seconds."""

    kind: Literal["passivation", "resume"]
    reason: str
    outcome: str
    seconds: float


_READY_BY_PHASE: dict[str, tuple[ConditionStatus, str]] = {
    "Running": ("True", Reason.RUNNING),
    "Succeeded": ("True", Reason.SUCCEEDED),
    "Pending": ("False", Reason.PENDING),
    "Resuming": ("False", Reason.RESUMING),
    "Passivating": ("False", Reason.PASSIVATING),
    "Passivated": ("False", Reason.PASSIVATED),
    "Failed": ("False", "Failed"),
}


@dataclass(slots=True)
class Decision:
    """One decision in progress (``decide`` builds it): what was observed, the status being
    written, its conditions, the plan, and the operator's settings. Each step of the decision
    reads ``obs`` and ``settings`` and updates ``st``, ``conds`` and ``plan``."""

    obs: Observation
    st: AgentSessionStatus
    conds: ConditionSet
    plan: Plan
    settings: OperatorSettings


_RETRYING = ("Pending", "Resuming")


def finish(
    st: AgentSessionStatus,
    conds: ConditionSet,
    phase: Phase,
    message: str = "",
    *,
    reason: str | None = None,
) -> None:
    """Fill the conditions still absent with their defaults, set ``Ready`` from ``phase``
    (Kubernetes convention: Ready summarises; ``reason`` overrides the phase's reason when a
    more precise one is known, and while a Pending or Resuming session is Degraded, Degraded's
    reason and message are that reason), order them like ``CondType.ALL``, set the phase."""
    for type_, status, default_reason in (
        (CondType.PLACED, "False", Reason.WAITING_FOR_POD),
        (CondType.RUNNING, "False", Reason.NOT_RUNNING),
        (CondType.PASSIVATED, "False", Reason.NOT_PASSIVATED),
        (CondType.COMPLETED, "False", Reason.IN_PROGRESS),
        (CondType.BUDGET_EXHAUSTED, "False", Reason.WITHIN_BUDGET),
        (CondType.DEGRADED, "False", Reason.AS_EXPECTED),
        (CondType.FAILED, "False", Reason.NOT_FAILED),
    ):
        conds.ensure(type_, status, default_reason)  # type: ignore[arg-type]
    ready_status, ready_reason = _READY_BY_PHASE[phase]
    degraded = conds.get(CondType.DEGRADED)
    if reason is None and phase in _RETRYING and degraded is not None and degraded.status == "True":
        # Between crashes (CrashLoopBackOff's place): Ready names what keeps killing the pod.
        reason, message = degraded.reason, message or degraded.message
    conds.set(CondType.READY, ready_status, reason or ready_reason, message)
    order = {t: i for i, t in enumerate(CondType.ALL)}
    st.conditions = sorted(conds.items, key=lambda c: order.get(c.type, len(order)))
    st.phase = phase
