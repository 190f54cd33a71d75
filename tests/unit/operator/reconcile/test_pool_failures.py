"""A LaneWorker whose pods cannot run says why in Ready (the kubelet's waiting reason, or the
scheduler's Unschedulable), like a session does."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from berth_operator.reconcile.scaling_status import (
    PoolObservation,
    scaling_conditions,
    stuck_worker_pod,
)

NOW = datetime(2026, 1, 1, tzinfo=UTC)


def pod(name: str, *, waiting: str = "", unschedulable: bool = False) -> dict[str, Any]:
    status: dict[str, Any] = {"containerStatuses": [], "conditions": []}
    if waiting:
        status["containerStatuses"].append(
            {"name": "worker", "state": {"waiting": {"reason": waiting, "message": "back-off"}}}
        )
    if unschedulable:
        status["conditions"].append(
            {"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": "0/2"}
        )
    return {"metadata": {"name": name}, "status": status}


def test_the_first_stuck_pod_by_name_is_named() -> None:
    pods = [pod("w-b", waiting="CrashLoopBackOff"), pod("w-a", waiting="ContainerCreating")]
    assert stuck_worker_pod(pods) == ("CrashLoopBackOff", "pod w-b: CrashLoopBackOff: back-off")
    assert stuck_worker_pod([pod("w-c", unschedulable=True)]) == (
        "Unschedulable",
        "pod w-c: Unschedulable: 0/2",
    )
    assert stuck_worker_pod([pod("w-a", waiting="ContainerCreating")]) is None  # just starting
    assert stuck_worker_pod([{"metadata": {}}]) is None


def ready(obs: PoolObservation) -> tuple[str, str, str]:
    [c] = [c for c in scaling_conditions([], obs, now=NOW, generation=1) if c.type == "Ready"]
    return c.status, c.reason, c.message


def test_ready_carries_the_stuck_reason_only_while_pods_are_missing() -> None:
    stuck = ("CrashLoopBackOff", "pod w-b: CrashLoopBackOff: back-off")
    base: dict[str, Any] = {"deployment_exists": True, "spec_replicas": 2, "scaling_enabled": False}
    assert ready(PoolObservation(ready_replicas=1, stuck=stuck, **base)) == (
        "False",
        "CrashLoopBackOff",
        "1/2 pods ready; pod w-b: CrashLoopBackOff: back-off",
    )
    assert ready(PoolObservation(ready_replicas=1, **base))[1] == "PodsNotReady"
    assert ready(PoolObservation(ready_replicas=2, stuck=stuck, **base))[0] == "True"
