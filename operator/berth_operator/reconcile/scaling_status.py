"""Pure status of a LaneWorker pool: its conditions ``Ready``, ``ScalingActive`` and
``ScalingLimited`` (named after the HPA's conditions, in the ``metav1.Condition`` shape), the
observations they are made from (the Deployment's counts, the pods, a stuck worker pod), and the
status the handler writes. No I/O; the caller passes what it read.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime

from berth_operator.api.common import Condition, ConditionStatus
from berth_operator.api.conditions import ConditionSet, Reason
from berth_operator.api.laneworker import LaneWorkerStatus, Pressure
from berth_operator.reconcile.scaling import (
    DELETION_COST_ANNOTATION,
    LaneWorkerCondType,
    LaneWorkerReason,
    PodView,
    Recommendation,
)

# ------------------------------------------------------------------------------ status


@dataclass(frozen=True, slots=True)
class PoolObservation:
    """What the handler observed this tick, for the conditions."""

    deployment_exists: bool
    spec_replicas: int
    ready_replicas: int
    scaling_enabled: bool
    pressure: int | None = None
    source: str = "broker"
    error: str = ""
    recommendation: Recommendation | None = None
    stuck: tuple[str, str] | None = None
    """(reason, message) of a worker pod waiting on something a user must fix (see
    :func:`stuck_worker_pod`), None when none is."""


def stuck_worker_pod(pods: Iterable[Mapping[str, object]]) -> tuple[str, str] | None:
    """The first pool pod (by name) that waits on something a user must fix: a container
    waiting reason of ``Reason.STUCK_WAITING`` (CrashLoopBackOff, ImagePullBackOff,
    CreateContainerConfigError, ...) or the scheduler's Unschedulable. Returns ``(reason,
    "pod NAME: REASON: kubelet's message")``, or None. Pure."""
    for pod in sorted(pods, key=lambda p: str(_get(p, "metadata", "name"))):
        name = str(_get(pod, "metadata", "name"))
        status = _get(pod, "status")
        for cs in _list(status, "containerStatuses"):
            waiting = _get(cs, "state", "waiting")
            reason = str(_get(waiting, "reason") or "")
            if reason in Reason.STUCK_WAITING:
                return reason, f"pod {name}: {reason}: {_get(waiting, 'message') or ''}"[:1024]
        for cond in _list(status, "conditions"):
            if _get(cond, "type") == "PodScheduled" and _get(cond, "reason") == "Unschedulable":
                msg = f"pod {name}: Unschedulable: {_get(cond, 'message') or ''}"
                return Reason.UNSCHEDULABLE, msg[:1024]
    return None


def _get(obj: object, *path: str) -> object:
    for key in path:
        obj = obj.get(key) if isinstance(obj, Mapping) else None
    return obj


def _list(obj: object, key: str) -> list[object]:
    value = _get(obj, key)
    return list(value) if isinstance(value, list) else []


def scaling_conditions(
    conditions: Sequence[Condition],
    obs: PoolObservation,
    *,
    now: datetime,
    generation: int | None,
) -> list[Condition]:
    """The LaneWorker's ``Ready``, ``ScalingActive`` and ``ScalingLimited`` conditions.

    Pure; ``lastTransitionTime`` moves only when a status changes (:class:`ConditionSet`).
    ``ScalingLimited`` is kept unchanged when this tick has no recommendation.
    """
    conds = ConditionSet(conditions, now, generation)
    conds.set(LaneWorkerCondType.READY, *_ready(obs))
    conds.set(LaneWorkerCondType.SCALING_ACTIVE, *_active(obs))
    if obs.scaling_enabled and obs.recommendation is not None:
        conds.set(LaneWorkerCondType.SCALING_LIMITED, *_limited(obs.recommendation))
    return conds.items


def _ready(obs: PoolObservation) -> tuple[ConditionStatus, str, str]:
    if not obs.deployment_exists:
        return (
            "False",
            LaneWorkerReason.DEPLOYMENT_MISSING,
            "the worker Deployment does not exist yet",
        )
    counts = f"{obs.ready_replicas}/{obs.spec_replicas} pods ready"
    if obs.ready_replicas >= obs.spec_replicas:
        return "True", LaneWorkerReason.PODS_READY, counts
    if obs.stuck is not None:  # the kubelet's reason is the one a user can act on
        return "False", obs.stuck[0], f"{counts}; {obs.stuck[1]}"[:1024]
    return "False", LaneWorkerReason.PODS_NOT_READY, counts


def _active(obs: PoolObservation) -> tuple[ConditionStatus, str, str]:
    if not obs.scaling_enabled:
        return (
            "False",
            LaneWorkerReason.SCALING_DISABLED,
            "spec.scaling is omitted; replicas follow the /scale subresource",
        )
    if obs.pressure is None:
        return (
            "False",
            LaneWorkerReason.PRESSURE_UNAVAILABLE,
            f"reading pressure from {obs.source} failed: {obs.error}"[:1024],
        )
    return "True", LaneWorkerReason.VALID_PRESSURE, f"pressure {obs.pressure} from {obs.source}"


def _limited(rec: Recommendation) -> tuple[ConditionStatus, str, str]:
    if rec.limited == "min":
        return (
            "True",
            LaneWorkerReason.TOO_FEW_REPLICAS,
            f"recommended {rec.unclamped}, raised to minReplicas {rec.replicas}",
        )
    if rec.limited == "max":
        return (
            "True",
            LaneWorkerReason.TOO_MANY_REPLICAS,
            f"recommended {rec.unclamped}, lowered to maxReplicas {rec.replicas}",
        )
    return (
        "False",
        LaneWorkerReason.DESIRED_WITHIN_RANGE,
        f"recommended {rec.replicas} is within [minReplicas, maxReplicas]",
    )


# ------------------------------------------------------------------------------ observations


def pod_view(pod: Mapping[str, object]) -> PodView:
    """A :class:`PodView` from a pod as the API returns it (dict, camelCase)."""
    meta = pod.get("metadata")
    meta = meta if isinstance(meta, Mapping) else {}
    annotations = meta.get("annotations")
    annotations = annotations if isinstance(annotations, Mapping) else {}
    cost = annotations.get(DELETION_COST_ANNOTATION)
    return PodView(
        name=str(meta.get("name", "")),
        deletion_cost=str(cost) if cost is not None else None,
        terminating=meta.get("deletionTimestamp") is not None,
    )


@dataclass(frozen=True, slots=True)
class DeploymentCounts:
    """Replica numbers of the worker Deployment (0 for absent fields)."""

    spec_replicas: int
    replicas: int
    ready_replicas: int

    @classmethod
    def of(cls, deployment: Mapping[str, object] | None) -> DeploymentCounts | None:
        """Counts of a Deployment dict, or None when there is no Deployment."""
        if deployment is None:
            return None
        spec = deployment.get("spec")
        status = deployment.get("status")
        spec = spec if isinstance(spec, Mapping) else {}
        status = status if isinstance(status, Mapping) else {}

        def num(src: Mapping[str, object], key: str) -> int:
            value = src.get(key)
            return int(value) if isinstance(value, int) else 0

        return cls(num(spec, "replicas"), num(status, "replicas"), num(status, "readyReplicas"))


def pool_status(
    *,
    counts: DeploymentCounts | None,
    desired: int,
    backlog: int | None,
    in_flight: int | None,
    last_scale_time: datetime | None,
    conditions: Sequence[Condition],
    generation: int | None,
    selector: str,
    stream: str,
) -> dict[str, object]:
    """``LaneWorker.status`` in wire shape (camelCase), for a merge patch of the subresource.

    ``replicas``/``readyReplicas`` come from the Deployment's status (``/scale`` reads
    ``status.replicas`` and ``status.selector``); ``pressure`` is omitted when unknown.
    """
    status = LaneWorkerStatus(
        replicas=counts.replicas if counts else 0,
        ready_replicas=counts.ready_replicas if counts else 0,
        desired_replicas=desired,
        selector=selector,
        task_stream=stream,
        pressure=(
            Pressure(backlog=backlog, in_flight=in_flight or 0) if backlog is not None else None
        ),
        last_scale_time=last_scale_time,
        conditions=list(conditions),
        observed_generation=generation,
    )
    return status.wire()
