"""Table tests of the deletion-cost plan, the conditions, the status shape and the Prometheus
answer parser of the LaneWorker autoscaler."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from berth_operator.pressure import PressureUnavailable, parse_prometheus_answer
from berth_operator.reconcile.scaling import (
    BUSY_COST_BASE,
    DELETION_COST_ANNOTATION,
    IDLE_COST,
    LaneWorkerCondType,
    LaneWorkerReason,
    PodView,
    Recommendation,
    deletion_cost,
    deletion_cost_plan,
)
from berth_operator.reconcile.scaling_status import (
    DeploymentCounts,
    PoolObservation,
    pod_view,
    pool_status,
    scaling_conditions,
)

T0 = datetime(2026, 1, 1, tzinfo=UTC)
BUSY = str(BUSY_COST_BASE + 1)
IDLE = str(IDLE_COST)

# --------------------------------------------------------------------------- deletion cost

PLAN = [
    # name, pods [(name, annotation, terminating)], pending per consumer, current, desired, plan
    ("scale up: nothing", [("a", None, False)], {"a": 1}, 1, 2, {}),
    ("steady: nothing", [("a", None, False)], {"a": 1}, 1, 1, {}),
    (
        "busy high, idle low",
        [("a", None, False), ("b", None, False), ("c", None, False)],
        {"a": 1, "b": 0},
        3,
        1,
        {"a": BUSY, "b": IDLE, "c": IDLE},
    ),
    (
        "already annotated pods are skipped",
        [("a", BUSY, False), ("b", BUSY, False)],
        {"a": 1},
        2,
        1,
        {"b": IDLE},
    ),
    (
        "terminating pods are left out",
        [("a", None, True), ("b", None, False)],
        {},
        2,
        0,
        {"b": IDLE},
    ),
    ("stale consumers are ignored", [("a", None, False)], {"gone": 5}, 2, 1, {"a": IDLE}),
    (
        "more pending, higher cost",
        [("a", None, False), ("b", None, False)],
        {"a": 3, "b": 1},
        2,
        1,
        {"a": str(BUSY_COST_BASE + 3), "b": BUSY},
    ),
]


@pytest.mark.parametrize(
    ("name", "pods", "pending", "current", "desired", "plan"), PLAN, ids=[r[0] for r in PLAN]
)
def test_deletion_cost_plan(
    name: str,
    pods: list[tuple[str, str | None, bool]],
    pending: dict[str, int],
    current: int,
    desired: int,
    plan: dict[str, str],
) -> None:
    views = [PodView(n, cost, term) for n, cost, term in pods]
    assert deletion_cost_plan(views, pending, current=current, desired=desired) == plan


def test_busy_pods_always_cost_more_than_idle_and_unannotated() -> None:
    assert deletion_cost(0) < 0 < deletion_cost(1) < deletion_cost(2)
    assert deletion_cost(10**12) == 2**31 - 1


def test_pod_view_reads_annotation_and_deletion() -> None:
    pod = {
        "metadata": {
            "name": "w-1",
            "annotations": {DELETION_COST_ANNOTATION: "5"},
            "deletionTimestamp": "2026-01-01T00:00:00Z",
        }
    }
    assert pod_view(pod) == PodView("w-1", "5", True)
    assert pod_view({"metadata": {"name": "w-2"}}) == PodView("w-2", None, False)


# --------------------------------------------------------------------------- conditions

CONDS = [
    # name, observation, {type: (status, reason)}
    (
        "scaling ok and ready",
        PoolObservation(True, 2, 2, True, 80, "broker", "", Recommendation(2, 2, None)),
        {
            "Ready": ("True", LaneWorkerReason.PODS_READY),
            "ScalingActive": ("True", LaneWorkerReason.VALID_PRESSURE),
            "ScalingLimited": ("False", LaneWorkerReason.DESIRED_WITHIN_RANGE),
        },
    ),
    (
        "pressure unavailable",
        PoolObservation(True, 2, 1, True, None, "prometheus", "boom"),
        {
            "Ready": ("False", LaneWorkerReason.PODS_NOT_READY),
            "ScalingActive": ("False", LaneWorkerReason.PRESSURE_UNAVAILABLE),
        },
    ),
    (
        "clamped at max",
        PoolObservation(True, 3, 3, True, 900, "broker", "", Recommendation(3, 9, "max")),
        {"ScalingLimited": ("True", LaneWorkerReason.TOO_MANY_REPLICAS)},
    ),
    (
        "clamped at min",
        PoolObservation(True, 1, 1, True, 0, "broker", "", Recommendation(1, 0, "min")),
        {"ScalingLimited": ("True", LaneWorkerReason.TOO_FEW_REPLICAS)},
    ),
    (
        "scaling disabled",
        PoolObservation(True, 0, 0, False),
        {
            "Ready": ("True", LaneWorkerReason.PODS_READY),
            "ScalingActive": ("False", LaneWorkerReason.SCALING_DISABLED),
        },
    ),
    (
        "no deployment",
        PoolObservation(False, 0, 0, True, 0),
        {"Ready": ("False", LaneWorkerReason.DEPLOYMENT_MISSING)},
    ),
]


@pytest.mark.parametrize(("name", "obs", "want"), CONDS, ids=[r[0] for r in CONDS])
def test_conditions(name: str, obs: PoolObservation, want: dict[str, tuple[str, str]]) -> None:
    conds = scaling_conditions([], obs, now=T0, generation=3)
    got = {c.type: (c.status, c.reason) for c in conds}
    for type_, expected in want.items():
        assert got[type_] == expected
    assert all(c.observed_generation == 3 for c in conds)
    if obs.recommendation is None:
        assert LaneWorkerCondType.SCALING_LIMITED not in got


def test_transition_time_moves_only_on_status_change() -> None:
    ok = PoolObservation(True, 1, 1, True, 10, "broker", "", Recommendation(1, 1, None))
    first = scaling_conditions([], ok, now=T0, generation=1)
    later = T0 + timedelta(seconds=30)
    same = scaling_conditions(
        first,
        PoolObservation(True, 1, 1, True, 20, "broker", "", Recommendation(1, 1, None)),
        now=later,
        generation=1,
    )
    assert all(c.last_transition_time == T0 for c in same)
    failed = scaling_conditions(
        same, PoolObservation(True, 1, 1, True, None, "broker", "x"), now=later, generation=1
    )
    ltt = {c.type: c.last_transition_time for c in failed}
    assert ltt["ScalingActive"] == later and ltt["Ready"] == T0


# --------------------------------------------------------------------------- status shape


def test_pool_status_wire_shape() -> None:
    counts = DeploymentCounts.of(
        {"spec": {"replicas": 3}, "status": {"replicas": 3, "readyReplicas": 2}}
    )
    status = pool_status(
        counts=counts,
        desired=4,
        backlog=120,
        in_flight=8,
        last_scale_time=T0,
        conditions=[],
        generation=2,
        selector="a=b",
        stream="berth:ns:lw:x:tasks",
    )
    assert status == {
        "replicas": 3,
        "readyReplicas": 2,
        "desiredReplicas": 4,
        "selector": "a=b",
        "taskStream": "berth:ns:lw:x:tasks",
        "pressure": {"backlog": 120, "inFlight": 8},
        "lastScaleTime": "2026-01-01T00:00:00Z",
        "conditions": [],
        "observedGeneration": 2,
    }
    assert DeploymentCounts.of(None) is None
    assert DeploymentCounts.of({}) == DeploymentCounts(0, 0, 0)


# --------------------------------------------------------------------------- prometheus answers


def vector(*values: str) -> dict[str, Any]:
    result = [{"metric": {"pod": f"p{i}"}, "value": [1.0, v]} for i, v in enumerate(values)]
    return {"status": "success", "data": {"resultType": "vector", "result": result}}


PROM_OK = [
    ("empty vector is no pressure", vector(), 0),
    ("sum of series", vector("40", "40", "39"), 119),
    ("fractional rounds up", vector("1.2"), 2),
    ("float noise does not add a replica", vector("0.1", "0.2", "0.7"), 1),
    ("scalar", {"status": "success", "data": {"resultType": "scalar", "result": [1, "7"]}}, 7),
]


@pytest.mark.parametrize(("name", "body", "want"), PROM_OK, ids=[r[0] for r in PROM_OK])
def test_prometheus_answer(name: str, body: Any, want: int) -> None:
    assert parse_prometheus_answer(body) == want


PROM_BAD = [
    ("error answer", {"status": "error", "error": "parse error"}),
    ("matrix", {"status": "success", "data": {"resultType": "matrix", "result": []}}),
    ("NaN", vector("NaN")),
    ("negative", vector("-1")),
    ("not json object", ["x"]),
]


@pytest.mark.parametrize(("name", "body"), PROM_BAD, ids=[r[0] for r in PROM_BAD])
def test_prometheus_answer_rejected(name: str, body: Any) -> None:
    with pytest.raises(PressureUnavailable):
        parse_prometheus_answer(body)


# --------------------------------------------------------------------------- metrics


def test_laneworker_gauges_are_set_and_forgotten() -> None:
    from berth_operator import metrics
    from prometheus_client import REGISTRY

    def value(name: str) -> float | None:
        return REGISTRY.get_sample_value(name, {"namespace": "ns-m", "laneworker": "lw-m"})

    metrics.observe_laneworker("ns-m", "lw-m", desired=3, pressure=120)
    assert value("berth_operator_laneworker_desired_replicas") == 3
    assert value("berth_operator_lane_pressure") == 120
    metrics.observe_laneworker("ns-m", "lw-m", desired=2, pressure=None)  # unreadable: kept
    assert value("berth_operator_lane_pressure") == 120
    metrics.forget_laneworker("ns-m", "lw-m")
    assert value("berth_operator_laneworker_desired_replicas") is None
    metrics.forget_laneworker("ns-m", "lw-m")  # idempotent
