"""Table tests of reconcile.idle and of idle passivation in reconcile.session.decide (§8)."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta
from typing import Any

import pytest
from berth_operator.api.agentsession import AgentSessionSpec, PassivationStatus
from berth_operator.api.conditions import get_condition
from berth_operator.reconcile import idle
from berth_operator.reconcile.session import decide
from berth_operator.settings import OperatorSettings, SessionApiSettings

from berth_contract.state import RuntimeState
from tests.unit.operator.fixtures import T0, make_pod, make_session, observation, ours

SETTINGS = OperatorSettings(session_api=SessionApiSettings(status_refresh_seconds=10))
T0_MS = int(T0.timestamp() * 1000)


def idle_spec(**extra: Any) -> AgentSessionSpec:
    return make_session().with_spec(keepAlive=True, idle={"afterSeconds": 60}, **extra).spec()


def idle_state(since_s: float, **extra: Any) -> RuntimeState:
    body = {"state": "idle", "runId": "run-1", "idleSinceMs": T0_MS + int(since_s * 1000)}
    return RuntimeState.model_validate({**body, **extra})


POD = make_pod(1).on("node-a").running().observed()


@pytest.mark.parametrize(
    ("spec", "state", "now_s", "due", "due_in"),
    [
        (idle_spec(), idle_state(0), 59, False, 1.0),
        (idle_spec(), idle_state(0), 60, True, None),
        (idle_spec(), RuntimeState.model_validate({"state": "running"}), 600, False, None),
        (idle_spec(), RuntimeState.model_validate({"state": "idle"}), 600, False, None),
        (idle_spec(), None, 600, False, None),
        (
            idle_spec(),
            idle_state(0, passivation={"reason": "idle_reaper", "deadlineMs": T0_MS}),
            600,
            False,
            None,
        ),
        # keepAlive off or no spec.idle: idle passivation is off
        (make_session().with_spec(keepAlive=True).spec(), idle_state(0), 600, False, None),
    ],
)
def test_check(
    spec: AgentSessionSpec,
    state: RuntimeState | None,
    now_s: float,
    due: bool,
    due_in: float | None,
) -> None:
    got = idle.check(spec, POD, state, T0 + timedelta(seconds=now_s))
    assert (got.trigger is not None) == due
    assert got.due_in == due_in
    if got.trigger is not None:
        assert (got.trigger.reason, got.trigger.node_name) == ("idle_reaper", "node-a")


def rec(**kw: Any) -> PassivationStatus:
    base: dict[str, Any] = {
        "reason": "idle_reaper",
        "podName": "demo-e1",
        "epoch": 1,
        "requestedAt": T0,
        "deadline": T0 + timedelta(seconds=30),
        "outcome": "passivated",
        "passivatedAt": T0 + timedelta(seconds=2),
    }
    base.update(kw)
    return PassivationStatus.model_validate(base)


@pytest.mark.parametrize(
    ("record", "wake_s", "at_rest"),
    [
        (rec(), None, True),
        (rec(), 1.0, True),  # a wake asked before it came to rest does not count
        (rec(), 2.0, False),
        (rec(), 30.0, False),
        (rec(outcome="passivating"), None, False),
        (rec(outcome="deadline"), None, True),
        (rec(reason="node_drain"), None, False),
        (rec(resumedAt=T0 + timedelta(seconds=9)), None, False),
        (None, None, False),
    ],
)
def test_stays_at_rest(
    record: PassivationStatus | None, wake_s: float | None, at_rest: bool
) -> None:
    wake = None if wake_s is None else T0 + timedelta(seconds=wake_s)
    assert (idle.stays_at_rest(idle_spec(), record, wake) is not None) == at_rest


def test_removing_spec_idle_wakes() -> None:
    spec = make_session().with_spec(keepAlive=True).spec()
    assert idle.stays_at_rest(spec, rec(), None) is None


@pytest.mark.parametrize(
    ("value", "expected_s"),
    [
        (None, None),
        ("", None),
        ("yesterday", None),
        ("2026-01-01T12:00:05Z", 5.0),
        ("2026-01-01T12:00:05.250+00:00", 5.25),
        ("2026-01-01T12:00:05", 5.0),  # no zone: UTC
    ],
)
def test_parse_wake(value: str | None, expected_s: float | None) -> None:
    got = idle.parse_wake(value)
    assert (None if got is None else (got - T0).total_seconds()) == expected_s


# ---------------------------------------------------------------------------------------------
# decide


def session() -> Any:
    return make_session().with_spec(keepAlive=True, idle={"afterSeconds": 60})


def test_decide_requests_idle_passivation_when_due() -> None:
    s = session().with_status(epoch=1, podName="demo-e1", runId="run-1")
    pod = make_pod(1).on("node-a").running()
    plan = decide(
        observation(s, pod, state=idle_state(0).model_dump(by_alias=True), now=61), SETTINGS
    )
    assert plan.passivate is not None and plan.passivate.reason == "idle_reaper"
    assert plan.status.passivation is not None and plan.status.passivation.reason == "idle_reaper"
    assert plan.status.phase == "Passivating"


def test_decide_looks_again_when_the_reaper_is_due() -> None:
    s = session().with_status(epoch=1, podName="demo-e1", runId="run-1")
    pod = make_pod(1).on("node-a").running()
    plan = decide(
        observation(s, pod, state=idle_state(0).model_dump(by_alias=True), now=57), SETTINGS
    )
    assert plan.passivate is None and plan.status.phase == "Running"
    assert plan.requeue_after == pytest.approx(3.0)


def at_rest_session() -> Any:
    return session().with_status(
        epoch=1,
        runId="run-1",
        passivation=rec().model_dump(by_alias=True, mode="json", exclude_none=True),
    )


def test_decide_keeps_a_session_at_rest_without_a_pod() -> None:
    plan = decide(observation(at_rest_session(), now=10), SETTINGS)
    assert plan.create is None
    assert plan.status.phase == "Passivated"
    assert plan.status.at_rest_since == T0 + timedelta(seconds=2)
    cond = get_condition(plan.status.conditions, "Passivated")
    assert cond is not None and (cond.status, cond.reason) == ("True", "AtRest")
    assert "at rest since 2026-01-01T12:00:02" in cond.message


def test_decide_wakes_a_session_at_rest_on_a_wake_request() -> None:
    obs = observation(at_rest_session(), now=10)
    obs = ours(replace(obs, wake_requested_at=T0 + timedelta(seconds=9)))
    plan = decide(obs, SETTINGS)
    assert plan.create is not None and plan.create.resume_run_id == "run-1"
    assert plan.status.epoch == 2 and plan.status.at_rest_since is None
    # woken by an operator that did not store the request (restarted since): one epoch skipped
    plan = decide(replace(obs, reserved_epoch=None), SETTINGS)
    assert plan.create is not None and plan.status.epoch == 3 and not plan.create.reserved


def test_an_ended_pod_is_counted_once_while_the_cache_still_shows_it() -> None:
    """The decision after a passivated pod's end sees it again (not yet deleting): no second
    passivation, Event or replacement; the delete is repeated."""
    term = {"outcome": "passivated", "runId": "run-1", "reason": "idle_reaper"}
    s = session().with_status(
        epoch=1,
        podName="demo-e1",
        podUID="pod-uid-1",
        runId="run-1",
        passivation=rec(outcome="passivating", passivatedAt=None).model_dump(
            by_alias=True, mode="json", exclude_none=True
        ),
    )
    pod = make_pod(1).on("node-a").terminated(0, term)
    first = decide(observation(s, pod, now=5), SETTINGS)
    assert first.status.passivations == 1 and first.status.pod_name is None
    again = make_session().with_spec(keepAlive=True, idle={"afterSeconds": 60})
    again.body["status"] = first.status.model_dump(by_alias=True, mode="json", exclude_none=True)
    second = decide(observation(again, pod, now=6), SETTINGS)
    assert second.status.passivations == 1
    assert [d.name for d in second.delete] == ["demo-e1"] and second.create is None
    assert not second.events
