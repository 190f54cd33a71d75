"""Pure scaling decisions of a LaneWorker pool (docs/architecture.md §4).

Owned by the LaneWorker autoscaler; called by ``berth_operator.handlers.laneworker`` once per
polling interval with the numbers it read (pressure from Redis or Prometheus, the Deployment's
replica counts, the pods and their pending entries). Nothing here does I/O or reads a clock: the
caller passes ``now``. Every function is tested as a table in ``tests/unit/operator/``.

Decisions, and where their behaviour comes from:

- **Who owns replicas** (:func:`owns_replicas`, :func:`external_replicas`). With ``spec.scaling``
  set, the operator computes replicas and writes them to the Deployment. With ``spec.scaling``
  omitted, replicas come from ``spec.replicas`` (the LaneWorker's ``/scale`` subresource, written
  by ``kubectl scale``, an HPA or a KEDA ScaledObject targeting the LaneWorker); when that is unset
  too, the Deployment's replica count is left alone (a KEDA ScaledObject targeting the Deployment
  owns it). The operator never writes ``spec.replicas`` itself, so it does not fight them.
- **Recommendation** (:func:`recommend`): ``ceil(pressure / targetTasksPerReplica)`` clamped to
  ``[minReplicas, maxReplicas]``, where pressure = backlog (consumer-group lag) + in-flight
  (pending entries), never backlog alone (§4, §7). This is the HPA ``AverageValue`` formula
  (``ceil(metric / target)``) that KEDA also uses for its external scalers.
- **Stabilization** (:func:`stabilize`): the Kubernetes HPA "behavior" algorithm
  (``stabilizeRecommendationWithBehaviors`` in the HPA controller): scale up to the *lowest*
  recommendation seen in the scale-up window, scale down to the *highest* recommendation seen in
  the scale-down window, otherwise stay. With the default scale-up window 0 the pool grows at once;
  it shrinks only when every recommendation of the last ``scaleDownStabilizationSeconds`` allows
  it, which also makes scale-to-zero wait until the pool was idle for the whole window (KEDA's
  ``cooldownPeriod``).
- **Pod deletion cost** (:func:`deletion_cost_plan`): before a scale-down, pods whose consumer
  holds pending entries get ``controller.kubernetes.io/pod-deletion-cost`` =
  ``BUSY_COST_BASE + pending`` and idle pods ``IDLE_COST``, so the ReplicaSet controller deletes
  idle pods first (Kubernetes "ReplicaSet: Pod deletion cost"; the controller ranks unscheduled,
  pending and not-ready pods before it looks at the cost). Workers that are stopped anyway drain
  the tasks they hold (``berth-worker`` on SIGTERM), so the cost is about not waiting, not about
  losing tasks.
- **Status** (``reconcile.scaling_status``): ``Ready``, ``ScalingActive`` and ``ScalingLimited``,
  named after the HPA's conditions, in the ``metav1.Condition`` shape.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Final, Literal

from berth_operator.api.laneworker import LaneWorkerSpec

DELETION_COST_ANNOTATION: Final = "controller.kubernetes.io/pod-deletion-cost"
"""Pod annotation read by the ReplicaSet controller; lower cost = deleted first (int32 string)."""
BUSY_COST_BASE: Final = 10_000
"""Deletion cost of a busy pod is this plus its pending entries (capped at ``MAX_COST``)."""
IDLE_COST: Final = -10_000
"""Deletion cost of an idle pod (below the default 0 of pods without the annotation)."""
MAX_COST: Final = 2**31 - 1
"""int32 upper bound of the annotation value."""


class LaneWorkerCondType:
    """LaneWorker condition types (``metav1.Condition``; ``Ready`` is the summary)."""

    READY: Final = "Ready"
    """The Deployment has as many ready pods as it wants (``readyReplicas >= spec.replicas``)."""
    SCALING_ACTIVE: Final = "ScalingActive"
    """The operator read pressure and computed replicas (False: disabled or pressure unknown)."""
    SCALING_LIMITED: Final = "ScalingLimited"
    """The recommendation was clamped by ``minReplicas`` or ``maxReplicas``."""


class LaneWorkerReason:
    """CamelCase reasons of LaneWorker conditions."""

    # Ready
    PODS_READY: Final = "PodsReady"
    PODS_NOT_READY: Final = "PodsNotReady"
    DEPLOYMENT_MISSING: Final = "DeploymentMissing"
    # ScalingActive
    VALID_PRESSURE: Final = "ValidPressure"
    """Pressure was read from the configured source this interval."""
    PRESSURE_UNAVAILABLE: Final = "PressureUnavailable"
    """The source could not be read; replicas were left unchanged."""
    SCALING_DISABLED: Final = "ScalingDisabled"
    """``spec.scaling`` is omitted: replicas come from ``/scale`` (HPA, KEDA, kubectl scale)."""
    # ScalingLimited
    DESIRED_WITHIN_RANGE: Final = "DesiredWithinRange"
    TOO_FEW_REPLICAS: Final = "TooFewReplicas"
    """The recommendation was raised to ``minReplicas``."""
    TOO_MANY_REPLICAS: Final = "TooManyReplicas"
    """The recommendation was lowered to ``maxReplicas``."""


Limit = Literal["min", "max"] | None
Action = Literal["up", "down", "none"]


# ------------------------------------------------------------------------------ ownership


def owns_replicas(spec: LaneWorkerSpec) -> bool:
    """Whether the operator's scaling loop sets replicas (``spec.scaling`` present)."""
    return spec.scaling is not None


def external_replicas(spec: LaneWorkerSpec, deployment_replicas: int | None) -> int | None:
    """Replicas to write to the Deployment when ``spec.scaling`` is omitted, or None to leave it.

    ``spec.replicas`` (written through ``/scale``) wins. Without it an existing Deployment keeps
    its count (``deployment_replicas`` not None: returns None), and a new one starts at
    ``minReplicas``.
    """
    if spec.replicas is not None:
        return spec.replicas
    if deployment_replicas is None:
        return spec.min_replicas
    return None


# ------------------------------------------------------------------------------ recommendation


@dataclass(frozen=True, slots=True)
class Recommendation:
    """Replicas for one reading: ``replicas`` after clamping, ``limited`` by which bound."""

    replicas: int
    unclamped: int
    limited: Limit


def recommend(
    pressure: int, target_per_replica: int, min_replicas: int, max_replicas: int
) -> Recommendation:
    """``ceil(pressure / target_per_replica)`` clamped to ``[min_replicas, max_replicas]``.

    ``pressure`` is tasks (lag + pending, >= 0; negative readings count as 0);
    ``target_per_replica`` >= 1 (the CRD enforces it; a smaller value raises ValueError).
    ``max_replicas`` below ``min_replicas`` (forbidden by the CRD) gives ``min_replicas``.
    """
    if target_per_replica < 1:
        raise ValueError("targetTasksPerReplica must be >= 1")
    raw = math.ceil(max(0, pressure) / target_per_replica)
    if raw < min_replicas:
        return Recommendation(min_replicas, raw, "min")
    if raw > max_replicas:
        return Recommendation(max(min_replicas, max_replicas), raw, "max")
    return Recommendation(raw, raw, None)


def wakes_on_arrival(spec: LaneWorkerSpec) -> bool:
    """Whether the scaling loop also wakes when tasks land between ticks: only with the
    ``broker`` source, the one that sees them at once (a Prometheus reading waits for the next
    scrape, so an early tick would read the same number)."""
    return spec.scaling is not None and spec.scaling.source == "broker"


# ------------------------------------------------------------------------------ stabilization


@dataclass(frozen=True, slots=True)
class Sample:
    """One recommendation and when it was made."""

    at: datetime
    replicas: int


@dataclass(frozen=True, slots=True)
class Stabilized:
    """Result of :func:`stabilize`: the replicas to set, the action, and the history to keep."""

    desired: int
    action: Action
    history: tuple[Sample, ...] = field(default=())


def stabilize(
    history: Sequence[Sample],
    current: int,
    recommendation: int,
    now: datetime,
    *,
    up_window_seconds: int,
    down_window_seconds: int,
) -> Stabilized:
    """Apply the HPA stabilization windows to ``recommendation``.

    ``history`` holds earlier recommendations (any order); ``current`` is the Deployment's
    ``spec.replicas``. The new recommendation is recorded at ``now``. Then:

    - ``up_limit`` = lowest recommendation within ``up_window_seconds`` of ``now``;
    - ``down_limit`` = highest recommendation within ``down_window_seconds`` of ``now``;
    - ``current < up_limit`` → scale up to ``up_limit``; ``current > down_limit`` → scale down to
      ``down_limit``; otherwise keep ``current``.

    Samples older than both windows are dropped from the returned history, so it stays bounded by
    ``window / polling interval`` entries. A sample exactly ``window`` seconds old still counts;
    a window of 0 counts only the new recommendation, however close an earlier one is (two
    readings may share a timestamp: the scaling loop also reads between its ticks).
    """
    samples = [*history, Sample(now, recommendation)]
    up_from = now - timedelta(seconds=up_window_seconds)
    down_from = now - timedelta(seconds=down_window_seconds)
    earlier_up = [s.replicas for s in history if up_window_seconds and s.at >= up_from]
    earlier_down = [s.replicas for s in history if down_window_seconds and s.at >= down_from]
    up_limit = min([recommendation, *earlier_up])
    down_limit = max([recommendation, *earlier_down])
    keep_from = min(up_from, down_from)
    kept = tuple(sorted((s for s in samples if s.at >= keep_from), key=lambda s: s.at))
    if current < up_limit:
        return Stabilized(up_limit, "up", kept)
    if current > down_limit:
        return Stabilized(down_limit, "down", kept)
    return Stabilized(current, "none", kept)


def seed_history(current: int, now: datetime) -> tuple[Sample, ...]:
    """History for a loop that has none (operator start, leader change): ``current`` at ``now``.

    Treating the running count as a fresh recommendation makes a restarted operator wait a whole
    scale-down window before it shrinks the pool, instead of shrinking on its first reading.
    """
    return (Sample(now, current),)


# ------------------------------------------------------------------------------ one tick


@dataclass(frozen=True, slots=True)
class ScaleDecision:
    """What one polling tick decided."""

    desired: int
    """Replicas to set on the Deployment."""
    action: Action
    """``up``, ``down`` or ``none`` compared to ``current``."""
    recommendation: Recommendation | None
    """The clamped recommendation of this reading (None when pressure was unknown)."""
    history: tuple[Sample, ...]
    """Stabilization history to pass to the next tick."""


def decide(
    spec: LaneWorkerSpec,
    *,
    pressure: int | None,
    current: int,
    history: Sequence[Sample],
    now: datetime,
) -> ScaleDecision:
    """One autoscaling tick for a LaneWorker whose ``spec.scaling`` is set.

    ``pressure`` is backlog + in-flight in tasks, or None when the source could not be read (then
    nothing changes and the history is kept as it is). Raises ValueError when ``spec.scaling`` is
    None (the caller checks :func:`owns_replicas` first).
    """
    scaling = spec.scaling
    if scaling is None:
        raise ValueError("decide() needs spec.scaling; replicas are driven externally")
    if pressure is None:
        return ScaleDecision(current, "none", None, tuple(history))
    rec = recommend(
        pressure, scaling.target_tasks_per_replica, spec.min_replicas, spec.max_replicas
    )
    result = stabilize(
        history,
        current,
        rec.replicas,
        now,
        up_window_seconds=scaling.scale_up_stabilization_seconds,
        down_window_seconds=scaling.scale_down_stabilization_seconds,
    )
    # Bounds changed by an edit of the spec apply at once (min/max are hard limits).
    desired = min(max(result.desired, spec.min_replicas), max(spec.min_replicas, spec.max_replicas))
    action: Action = "up" if desired > current else "down" if desired < current else "none"
    return ScaleDecision(desired, action, rec, result.history)


def scale_up_due(
    spec: LaneWorkerSpec,
    *,
    pressure: int,
    current: int,
    history: Sequence[Sample],
    now: datetime,
) -> bool:
    """Whether a ``pressure`` (tasks) read between two ticks would make :func:`decide` scale up
    from ``current`` replicas, given the tick's ``history`` (the scale-up window included): then
    the scaling loop runs its tick at once, so a burst is scaled for as it lands rather than up
    to one polling interval later (as KEDA's push scalers do). Scale-downs always wait for their
    tick. False when ``spec.scaling`` is omitted. Nothing is recorded: the tick decides again."""
    if spec.scaling is None:
        return False
    decision = decide(spec, pressure=pressure, current=current, history=history, now=now)
    return decision.action == "up"


# ------------------------------------------------------------------------------ deletion cost


@dataclass(frozen=True, slots=True)
class PodView:
    """What the deletion-cost plan needs of a worker pod."""

    name: str
    """Pod name (= the worker's consumer name in the group)."""
    deletion_cost: str | None = None
    """Current value of the deletion-cost annotation, if any."""
    terminating: bool = False
    """``metadata.deletionTimestamp`` is set (the pod is already going; not annotated)."""


def deletion_cost(pending: int) -> int:
    """Cost for a pod whose consumer holds ``pending`` entries: busy high, idle low (int32)."""
    if pending <= 0:
        return IDLE_COST
    return min(MAX_COST, BUSY_COST_BASE + pending)


def deletion_cost_plan(
    pods: Iterable[PodView],
    pending_by_consumer: Mapping[str, int],
    *,
    current: int,
    desired: int,
) -> dict[str, str]:
    """Annotation values to write before scaling ``current`` → ``desired``: ``{pod: cost}``.

    Empty unless it is a scale-down. Pods whose annotation already has the planned value and
    terminating pods are left out. Consumers without a pod (stale names in the group) are ignored;
    pods without a consumer entry are idle.
    """
    if desired >= current:
        return {}
    plan: dict[str, str] = {}
    for pod in pods:
        if pod.terminating:
            continue
        value = str(deletion_cost(pending_by_consumer.get(pod.name, 0)))
        if pod.deletion_cost != value:
            plan[pod.name] = value
    return plan
