"""What a LaneWorker's scaling loop keeps between ticks, what one tick read and decided, and the
pool's status written from them (conditions from ``reconcile.scaling_status``; a Warning Event
when a worker pod is stuck). Used by ``handlers.laneworker``'s daemon.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, cast

import kopf

from berth_contract.names import task_stream
from berth_operator.api.common import Condition
from berth_operator.api.constants import GROUP, VERSION
from berth_operator.api.laneworker import LaneWorkerSpec
from berth_operator.builders.laneworker import (
    LaneWorkerRef,
    selector_string,
)
from berth_operator.handlers.context import LaneClients
from berth_operator.pressure import (
    BrokerPressure,
)
from berth_operator.reconcile.scaling import (
    LaneWorkerCondType,
    Recommendation,
    Sample,
    owns_replicas,
)
from berth_operator.reconcile.scaling_status import (
    DeploymentCounts,
    PoolObservation,
    pool_status,
    scaling_conditions,
    stuck_worker_pod,
)

UNSCALED_REFRESH_SECONDS = 5.0
"""Status refresh period of a LaneWorker without ``spec.scaling`` (seconds)."""
ARRIVAL_WAIT_SECONDS = 1.0
"""Longest single blocking read for new tasks between ticks (seconds): how often at least the
waiting loop looks at whether the operator is stopping."""
ARRIVAL_SETTLE_SECONDS = 0.1
"""After a task lands between ticks, how long the rest of its burst is given to land before the
pressure is read (seconds)."""


@dataclass
class LoopState:
    """What the scaling loop of one LaneWorker remembers between ticks."""

    history: tuple[Sample, ...] = ()
    last_scale_time: datetime | None = None
    last_status: dict[str, Any] = field(default_factory=dict)
    conditions: list[Condition] = field(default_factory=list)


@dataclass
class Tick:
    """What one polling interval read and decided."""

    current: int
    desired: int
    pressure: int | None = None
    broker: BrokerPressure | None = None
    error: str = ""
    recommendation: Recommendation | None = None


def event_target(ref: LaneWorkerRef) -> dict[str, Any]:
    """Enough of the LaneWorker object for kopf to post an Event about it."""
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "LaneWorker",
        "metadata": {"name": ref.name, "namespace": ref.namespace, "uid": ref.uid},
    }


async def write_status(
    ctx: LaneClients,
    ref: LaneWorkerRef,
    spec: LaneWorkerSpec,
    counts: DeploymentCounts | None,
    generation: int | None,
    state: LoopState,
    tick: Tick,
    now: datetime,
) -> None:
    """Conditions and status of the pool; patched only when they changed. While pods are not
    all Ready, their kubelet waiting reason (CrashLoopBackOff, ...) becomes Ready's reason, with
    a Warning Event when it changes."""
    stuck = None
    if counts is not None and counts.ready_replicas < tick.desired:
        stuck = stuck_worker_pod(await ctx.api.list_pods(ref.namespace, selector_string(ref.name)))
    before = next((c for c in state.conditions if c.type == LaneWorkerCondType.READY), None)
    state.conditions = scaling_conditions(
        state.conditions,
        PoolObservation(
            deployment_exists=counts is not None,
            spec_replicas=tick.desired,
            ready_replicas=counts.ready_replicas if counts else 0,
            scaling_enabled=owns_replicas(spec),
            pressure=tick.pressure,
            source=spec.scaling.source if spec.scaling else "",
            error=tick.error,
            recommendation=tick.recommendation,
            stuck=stuck,
        ),
        now=now,
        generation=generation,
    )
    if stuck is not None and (
        before is None or before.reason != stuck[0] or stuck[1] not in before.message
    ):
        after = next(c for c in state.conditions if c.type == LaneWorkerCondType.READY)
        target = cast(kopf.Body, event_target(ref))
        kopf.event(target, type="Warning", reason=stuck[0], message=after.message)
    broker = tick.broker if spec.scaling is not None and spec.scaling.source == "broker" else None
    status = pool_status(
        counts=counts,
        desired=tick.desired,
        backlog=broker.backlog if broker else tick.pressure,
        in_flight=broker.in_flight if broker else 0,
        last_scale_time=state.last_scale_time,
        conditions=state.conditions,
        generation=generation,
        selector=selector_string(ref.name),
        stream=task_stream(ref.namespace, ref.name),
    )
    if status != state.last_status:
        await ctx.api.patch_status(ref.namespace, ref.name, status)
        state.last_status = status
