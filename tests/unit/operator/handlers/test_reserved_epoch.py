"""A stored passivation request of the pod of epoch N reserves N+1 for its replacement: the
process that stored it creates that pod beside the status write naming it (the epoch is
durable already); any other process skips to N+2, since the one that held the reservation may
have used it. Never two pods of one epoch, and the resume does not wait for the write."""

from __future__ import annotations

import asyncio
from dataclasses import replace
from datetime import timedelta
from typing import Any

import pytest
from berth_operator.api.agentsession import PassivationStatus
from berth_operator.handlers import session_apply
from berth_operator.handlers.context import OperatorContext
from berth_operator.reconcile import passivation as pv
from berth_operator.reconcile.session import decide
from berth_operator.settings import OperatorSettings

from tests.unit.operator.fixtures import T0, fresh_live, make_pod, make_session, observation

SETTINGS = OperatorSettings()


def record(**kw: Any) -> PassivationStatus:
    fields: dict[str, Any] = {
        "reason": "node_drain",
        "pod_name": "demo-e1",
        "epoch": 1,
        "node_name": "proc-a",
        "requested_at": T0,
        "deadline": T0 + timedelta(seconds=30),
    }
    return PassivationStatus(**{**fields, **kw})


def test_a_new_request_reserves_the_next_epoch_once() -> None:
    assert pv.reservation(None, record()) == pv.Reservation(2, T0)
    assert pv.reservation(record(), record()) is None  # stored already: nothing new
    at = T0 + timedelta(seconds=60)
    later = record(pod_name="demo-e4", epoch=4, requested_at=at)
    assert pv.reservation(record(outcome="passivated"), later) == pv.Reservation(5, at)
    assert pv.reservation(record(), record(outcome="passivated")) is None  # an end, no request
    assert pv.reservation(record(), None) is None


OURS = pv.Reservation(2, T0)


@pytest.mark.parametrize(
    ("rec", "reserved", "expected"),
    [
        (record(outcome="passivated"), OURS, (2, True)),  # ours: beside the write
        (record(outcome="deadline"), OURS, (2, True)),
        (record(outcome="passivated"), None, (3, False)),  # not ours: skip the reserved one
        (record(outcome="passivated"), pv.Reservation(7, T0), (3, False)),  # another epoch's
        # another request of the same pod (stored by another process): not ours either
        (record(outcome="passivated"), pv.Reservation(2, T0 + timedelta(seconds=1)), (3, False)),
        (record(outcome="passivating"), OURS, (2, False)),  # not ended: not the replacement
        (record(outcome="passivated", resumed_at=T0), OURS, (2, False)),  # replaced already
        (record(outcome="passivated", epoch=0), OURS, (2, False)),  # an older pod's record
        (None, OURS, (2, False)),
    ],
)
def test_replacement_epoch(
    rec: PassivationStatus | None, reserved: pv.Reservation | None, expected: tuple[int, bool]
) -> None:
    assert pv.replacement_epoch(rec, 1, reserved) == expected


def passivated_session() -> Any:
    return make_session().with_status(
        epoch=1,
        podName="demo-e1",
        podUid="pod-uid-1",
        runId="run-1",
        passivation=record().model_dump(by_alias=True, mode="json", exclude_none=True),
    )


ENDED = (
    make_pod(1).on("proc-a").running().terminated(0, {"outcome": "passivated", "runId": "run-1"})
)


class Kube:
    """A status write that answers only once ``release`` is set; pod calls logged."""

    def __init__(self, release: asyncio.Event) -> None:
        self.release = release
        self.calls: list[str] = []

    async def replace_session_status(self, body: dict[str, Any]) -> dict[str, Any]:
        self.calls.append(f"status epoch {body['status']['epoch']} sent")
        await asyncio.wait_for(self.release.wait(), timeout=5)
        self.calls.append("status answered")
        return {**body, "metadata": {**body["metadata"], "resourceVersion": "2"}}

    async def list_pods(self, namespace: str, selector: str) -> list[dict[str, Any]]:
        self.calls.append("list")
        return [ENDED.obj()]

    async def create_pod(self, body: dict[str, Any]) -> None:
        self.calls.append(f"create {body['metadata']['name']}")
        self.release.set()

    async def delete_pod(self, namespace: str, name: str, **_: Any) -> None:
        self.calls.append(f"delete {name}")


async def test_the_reserved_replacement_is_created_before_the_status_write_answers(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(session_apply, "post_events", lambda body, plan: None)
    kube = Kube(asyncio.Event())
    ctx = OperatorContext(settings=SETTINGS, kube=kube, runtime=None)  # type: ignore[arg-type]
    session = passivated_session()
    ctx.memory(session.ref().uid).reservation = OURS
    obs = replace(observation(session, ENDED, now=5), reserved_epoch=OURS)
    plan = decide(obs, SETTINGS)
    assert plan.create is not None and plan.create.reserved
    await session_apply.apply_plan(ctx, session.obj(), obs, plan, live=fresh_live())
    # the create did not wait for the write (the write waited for the create here), nor for
    # the guard's LIST: this process knows every pod of the session the LIST could show
    assert kube.calls[:3] == ["status epoch 2 sent", "create demo-e2", "status answered"]
    assert "list" not in kube.calls
    assert ctx.memory(session.ref().uid).reservation is None  # used once
    inflight = ctx.memory(session.ref().uid).inflight
    assert inflight is not None and inflight[0] == "demo-e2"


async def test_without_the_reservation_the_replacement_lists_after_the_write(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A process that did not store the request (restarted, a new leader) writes the epoch
    after next first, then lists the session's pods straight from the apiserver, then creates."""
    monkeypatch.setattr(session_apply, "post_events", lambda body, plan: None)
    release = asyncio.Event()
    release.set()
    kube = Kube(release)
    ctx = OperatorContext(settings=SETTINGS, kube=kube, runtime=None)  # type: ignore[arg-type]
    session = passivated_session()
    obs = observation(session, ENDED, now=5)
    plan = decide(obs, SETTINGS)
    assert plan.create is not None and not plan.create.reserved
    await session_apply.apply_plan(ctx, session.obj(), obs, plan, live=fresh_live())
    assert kube.calls.index("status answered") < kube.calls.index("create demo-e3")
    assert kube.calls.index("list") < kube.calls.index("create demo-e3")


async def test_a_stored_request_is_remembered_as_this_process_reservation(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(session_apply, "post_events", lambda body, plan: None)
    monkeypatch.setattr(session_apply, "passivate", _no_call)
    release = asyncio.Event()
    release.set()
    ctx = OperatorContext(
        settings=SETTINGS,
        kube=Kube(release),  # type: ignore[arg-type]
        runtime=None,  # type: ignore[arg-type]
    )
    session = make_session().with_spec(passivation={"deadlineSeconds": 30})
    session.with_status(epoch=1, podName="demo-e1", podUid="pod-uid-1", runId="run-1")
    pod = make_pod(1).on("proc-a").running()
    state = {"state": "running", "runId": "run-1", "epoch": 1}
    obs = observation(session, pod, now=5, state=state)
    obs = replace(obs, node_disruptions={"proc-a": pv.Trigger("node_drain", "cordoned", "proc-a")})
    plan = decide(obs, SETTINGS)
    assert plan.status.passivation is not None and plan.passivate is not None
    await session_apply.apply_plan(ctx, session.obj(), obs, plan, live=fresh_live())
    assert ctx.memory(session.ref().uid).reservation == pv.Reservation(2, obs.now)


async def _no_call(*_: Any) -> None:
    return None


def test_a_pod_created_beside_a_lost_status_write_is_waited_for_not_replaced() -> None:
    """The status write beside the create failed (a Conflict): the next pass still has the
    old status, and the cache does not show the new pod yet. The pod in flight is taken as
    the session's (its epoch is the higher), nothing is created, and the ended pod goes."""
    obs = replace(observation(passivated_session(), ENDED, now=6), inflight="demo-e2")
    plan = decide(obs, SETTINGS)
    assert plan.create is None
    assert (plan.status.epoch, plan.status.pod_name) == (2, "demo-e2")
    assert [d.name for d in plan.delete] == ["demo-e1"]
