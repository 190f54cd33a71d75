"""Prometheus metrics of the operator (prefix ``berth_operator_``), served on /metrics.

Label values come from fixed sets only (placement reasons, phases, error kinds) — never session
or pod names (CONVENTIONS.md §8). Updated by ``berth_operator.handlers``; served by
``berth_operator.main`` together with the process collector (RSS, CPU, fds).
"""

from __future__ import annotations

from collections import Counter as _Counter
from typing import Final

from prometheus_client import Counter, Gauge, Histogram

from berth_operator import warm_metrics as _warm_metrics  # noqa: F401  (berth_operator_warm_*)
from berth_operator.api.agentsession import OUTCOMES, TRIGGERS, Phase
from berth_operator.api.conditions import PlacementReason

PHASES: Final[tuple[Phase, ...]] = (
    "Pending",
    "Running",
    "Passivating",
    "Passivated",
    "Resuming",
    "Succeeded",
    "Failed",
)
ERROR_KINDS: Final = ("conflict", "api", "runtime", "unexpected")

PLACEMENTS = Counter(
    "berth_operator_placements_total",
    "Session pods created, by why they were placed.",
    ["reason"],
)
RECONCILE_ERRORS = Counter(
    "berth_operator_reconcile_errors_total",
    "Reconcile iterations that ended in an error, by kind (conflict, api, runtime, unexpected).",
    ["kind"],
)
RECONCILE_SECONDS = Histogram(
    "berth_operator_reconcile_duration_seconds",
    "Duration of one AgentSession reconcile iteration.",
    buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10),
)
RECONCILES_WAITING = Gauge(
    "berth_operator_reconciles_waiting",
    "AgentSessions queued for one of the max_concurrent_reconciles reconcile workers.",
)
SESSIONS = Gauge("berth_operator_sessions", "AgentSessions by status.phase.", ["phase"])
INFLIGHT = Gauge(
    "berth_operator_pod_creates_in_flight",
    "Session pods created by this process and not yet seen in the watch cache.",
)
STATUS_WRITES = Counter(
    "berth_operator_status_writes_total",
    "AgentSession status writes, by result (written, unchanged, conflict).",
    ["result"],
)
STATE_REFRESH_FAILURES = Counter(
    "berth_operator_state_refresh_failures_total",
    "GET /v1/state calls to session pods that failed.",
)
LEADER = Gauge("berth_operator_leader", "1 while this replica holds the leader Lease.")
API_REQUESTS = Counter(
    "berth_operator_api_requests_total",
    "Kubernetes API requests made by Berth's own client (kopf's watches, finalizer patches and "
    "Events not included), by verb and resource (e.g. create/pods, update/agentsessions/status).",
    ["verb", "resource"],
)
API_REQUEST_SECONDS = Histogram(
    "berth_operator_api_request_duration_seconds",
    "Duration of one Kubernetes API request of Berth's own client, including the wait for a "
    "free connection, by verb.",
    ["verb"],
    buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10),
)

for _reason in PlacementReason.ALL:
    PLACEMENTS.labels(reason=_reason)
for _kind in ERROR_KINDS:
    RECONCILE_ERRORS.labels(kind=_kind)
for _result in ("written", "unchanged", "conflict"):
    STATUS_WRITES.labels(result=_result)


class PhaseTracker:
    """Keeps the last phase per session uid and mirrors the counts into ``SESSIONS``.

    Counts are kept alongside, so recording a phase costs the same with 10 sessions or
    10,000 (every reconcile records one)."""

    def __init__(self) -> None:
        self._phases: dict[str, str] = {}
        self._counts: _Counter[str] = _Counter()
        self.publish()

    def set(self, uid: str, phase: str | None) -> None:
        """Record ``phase`` for ``uid`` (None forgets the session)."""
        before = self._phases.pop(uid, None) if phase is None else self._phases.get(uid)
        if before == phase:
            return
        if before is not None:
            self._counts[before] -= 1
            self._publish_one(before)
        if phase is not None:
            self._phases[uid] = phase
            self._counts[phase] += 1
            self._publish_one(phase)

    def count(self, phase: str) -> int:
        """Sessions last recorded in ``phase``."""
        return self._counts[phase]

    def _publish_one(self, phase: str) -> None:
        if phase in PHASES:
            SESSIONS.labels(phase=phase).set(self._counts[phase])

    def publish(self) -> None:
        """Set every phase's ``SESSIONS`` series from the counts."""
        for phase in PHASES:
            SESSIONS.labels(phase=phase).set(self._counts[phase])


# --- LaneWorker autoscaling -----------------------------------------------------------
# ``namespace`` and ``laneworker`` are allowed as labels here: they are bounded by the user's own
# LaneWorker objects (one series per pool), and the series is removed when the pool's scaling
# loop ends (berth_operator.handlers.laneworker).

LANEWORKER_DESIRED_REPLICAS = Gauge(
    "berth_operator_laneworker_desired_replicas",
    "Replicas the LaneWorker autoscaler last set (the /scale value when scaling is omitted).",
    ["namespace", "laneworker"],
)
LANE_PRESSURE = Gauge(
    "berth_operator_lane_pressure",
    "Last queue pressure of a LaneWorker pool in tasks: backlog plus in-flight.",
    ["namespace", "laneworker"],
)


def observe_laneworker(
    namespace: str, laneworker: str, *, desired: int, pressure: int | None
) -> None:
    """Set both LaneWorker gauges; ``pressure`` None (unreadable) keeps the last reading."""
    LANEWORKER_DESIRED_REPLICAS.labels(namespace=namespace, laneworker=laneworker).set(desired)
    if pressure is not None:
        LANE_PRESSURE.labels(namespace=namespace, laneworker=laneworker).set(pressure)


def forget_laneworker(namespace: str, laneworker: str) -> None:
    """Remove the series of a LaneWorker whose scaling loop ended (deleted or operator stopping)."""
    for gauge in (LANEWORKER_DESIRED_REPLICAS, LANE_PRESSURE):
        try:  # noqa: SIM105 - this section is appended; the file's imports are not ours
            gauge.remove(namespace, laneworker)
        except KeyError:
            pass


# --- Passivation before eviction (docs/architecture.md §8) ---------------------------------
# Labels: reason ∈ api.agentsession.TRIGGERS, outcome ∈ api.agentsession.OUTCOMES.

_PASSIVATION_BUCKETS = (0.25, 0.5, 1, 2, 3, 5, 8, 13, 20, 30, 60, 120, 300, 600)

PASSIVATION_SECONDS = Histogram(
    "berth_operator_passivation_seconds",
    "Passivation request to the pod ending (passivated, or deleted at the deadline), by reason "
    "and outcome.",
    ["reason", "outcome"],
    buckets=_PASSIVATION_BUCKETS,
)
RESUME_SECONDS = Histogram(
    "berth_operator_resume_seconds",
    "Pod passivated to the resumed run started on its replacement (as its runtime reports the "
    "start), by reason (suspend includes the time suspended).",
    ["reason"],
    buckets=_PASSIVATION_BUCKETS,
)
PASSIVATIONS = Counter(
    "berth_operator_passivations_total",
    "Passivations that ended, by reason and outcome (passivated, deadline, completed, failed).",
    ["reason", "outcome"],
)
EVICTIONS_DENIED = Counter(
    "berth_operator_evictions_denied_total",
    "Eviction requests for session pods answered 429 by the webhook while passivation runs.",
)


def observe_passivation(kind: str, reason: str, outcome: str, seconds: float) -> None:
    """Record one passivation (``kind`` passivation) or resume (``kind`` resume) latency."""
    if kind == "resume":
        RESUME_SECONDS.labels(reason=reason).observe(seconds)
        return
    PASSIVATION_SECONDS.labels(reason=reason, outcome=outcome).observe(seconds)
    PASSIVATIONS.labels(reason=reason, outcome=outcome).inc()


for _trigger in TRIGGERS:
    RESUME_SECONDS.labels(reason=_trigger)
    for _outcome in OUTCOMES:
        PASSIVATIONS.labels(reason=_trigger, outcome=_outcome)
