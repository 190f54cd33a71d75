"""Status-write coalescing (reconcile.coalesce), the newest-object choice
(handlers.session_body) on plans made by the real ``decide``."""

from __future__ import annotations

import time
from dataclasses import replace
from types import SimpleNamespace
from typing import Any

import pytest
from berth_operator.handlers import agentsession, session_apply
from berth_operator.handlers.context import OperatorContext
from berth_operator.handlers.session_body import SessionBody
from berth_operator.handlers.session_workers import LiveSession
from berth_operator.reconcile.coalesce import informational_only, write_delay
from berth_operator.reconcile.passivation import Trigger
from berth_operator.reconcile.session import decide
from berth_operator.settings import OperatorSettings, SessionApiSettings

from tests.unit.operator.fixtures import make_node, make_pod, make_session, observation

SETTINGS = OperatorSettings()
WINDOW = SETTINGS.session_api.status_coalesce_seconds


def placed_session() -> Any:
    """The session as stored by its first status write (epoch 1, pod demo-e1 being placed)."""
    first = decide(observation(make_session()), SETTINGS)
    return make_session().with_status(**first.status.wire())


def _condition(plan: Any, type_: str) -> str:
    return next(c["status"] for c in plan.status.wire()["conditions"] if c["type"] == type_)


def test_first_placement_is_written_at_once() -> None:
    plan = decide(observation(make_session()), SETTINGS)
    assert plan.create is not None
    assert not informational_only(make_session().status(), plan)
    assert write_delay(make_session().status(), plan, since_last_write=0.01, window=WINDOW) is None


def test_pod_seen_unscheduled_is_information_that_may_wait() -> None:
    session = placed_session()
    plan = decide(observation(session, make_pod(1)), SETTINGS)
    assert plan.status.wire() != session.status().wire()  # something did change (podUid)
    assert informational_only(session.status(), plan)
    wait = write_delay(session.status(), plan, since_last_write=0.25, window=WINDOW)
    assert wait == pytest.approx(WINDOW - 0.25)
    assert write_delay(session.status(), plan, since_last_write=None, window=WINDOW) is None
    assert write_delay(session.status(), plan, since_last_write=WINDOW, window=WINDOW) is None


def test_the_pod_scheduled_may_wait_for_its_runtime_and_go_out_with_it() -> None:
    session = placed_session()
    scheduled = decide(
        observation(session, make_pod(1).on("node-a"), nodes=(make_node("node-a"),)), SETTINGS
    )
    assert _condition(scheduled, "Placed") == "True"
    assert informational_only(session.status(), scheduled)  # Placed False -> True
    assert write_delay(
        session.status(), scheduled, since_last_write=0.5, window=WINDOW
    ) == pytest.approx(WINDOW - 0.5)
    # the runtime answers before the wait is over: Running flips, all of it is written at once
    running = decide(
        observation(
            session,
            make_pod(1).on("node-a").running(),
            nodes=(make_node("node-a"),),
            state={"state": "running", "runId": "run-1"},
        ),
        SETTINGS,
    )
    assert _condition(running, "Placed") == "True"
    assert not informational_only(session.status(), running)
    assert write_delay(session.status(), running, since_last_write=0.5, window=WINDOW) is None


def test_a_condition_that_flips_is_written_at_once() -> None:
    session = make_session().with_status(
        **decide(
            observation(
                placed_session(),
                make_pod(1).on("node-a").running(),
                nodes=(make_node("node-a"),),
                state={"state": "running", "runId": "run-1"},
            ),
            SETTINGS,
        ).status.wire()
    )
    gone_unscheduled = decide(
        observation(
            session,
            make_pod(1).on("node-a").running(),
            nodes=(make_node("node-a"),),
            state=None,
        ),
        SETTINGS,
    )
    assert not informational_only(session.status(), gone_unscheduled)  # Running True -> False
    assert (
        write_delay(session.status(), gone_unscheduled, since_last_write=0.01, window=WINDOW)
        is None
    )


def test_an_unchanged_status_has_nothing_to_defer() -> None:
    session = placed_session()
    plan = decide(observation(session, inflight="demo-e1"), SETTINGS)
    assert plan.status.wire() == session.status().wire()
    assert write_delay(session.status(), plan, since_last_write=0.01, window=WINDOW) is None


def _running(turn: int | None, run_id: str = "run-1") -> dict[str, Any]:
    state: dict[str, Any] = {"state": "running", "runId": run_id}
    if turn is not None:
        state["checkpoint"] = {"runId": run_id, "turn": turn, "toolCallsCount": turn}
    return state


def stored_running(turn: int | None) -> Any:
    """The placed session as stored once its run was seen running at checkpoint ``turn``."""
    session = placed_session()
    pod = make_pod(1).on("node-a").running()
    plan = decide(
        observation(session, pod, nodes=(make_node("node-a"),), state=_running(turn)), SETTINGS
    )
    return make_session().with_status(**plan.status.wire())


def test_a_running_sessions_progress_may_wait_but_a_first_or_new_checkpoint_may_not() -> None:
    pod, nodes = make_pod(1).on("node-a").running(), (make_node("node-a"),)
    at_turn_2 = stored_running(2)
    later = decide(observation(at_turn_2, pod, nodes=nodes, state=_running(5)), SETTINGS)
    assert later.status.wire()["checkpoint"]["turn"] == 5
    assert informational_only(at_turn_2.status(), later)
    assert write_delay(at_turn_2.status(), later, since_last_write=1.0, window=WINDOW) == (
        pytest.approx(WINDOW - 1.0)
    )
    no_checkpoint = stored_running(None)
    first = decide(observation(no_checkpoint, pod, nodes=nodes, state=_running(1)), SETTINGS)
    assert not informational_only(no_checkpoint.status(), first)
    other_run = decide(
        observation(at_turn_2, pod, nodes=nodes, state=_running(1, run_id="run-2")), SETTINGS
    )
    assert not informational_only(at_turn_2.status(), other_run)


def test_a_passivation_request_is_written_at_once_its_repeats_may_wait() -> None:
    pod, nodes = make_pod(1).on("node-a").running(), (make_node("node-a"),)
    drain = {"node-a": Trigger("node_drain", "node node-a is cordoned", "node-a")}
    at_turn_2 = stored_running(2)
    asked = decide(
        replace(
            observation(at_turn_2, pod, nodes=nodes, state=_running(2)), node_disruptions=drain
        ),
        SETTINGS,
    )
    assert asked.passivate is not None and not asked.passivate.resend
    assert not informational_only(at_turn_2.status(), asked)
    requested = make_session().with_status(**asked.status.wire())
    repeat = decide(
        replace(
            observation(requested, pod, nodes=nodes, state=_running(3), now=1),
            node_disruptions=drain,
        ),
        SETTINGS,
    )
    assert repeat.passivate is not None and repeat.passivate.resend
    assert repeat.status.wire()["checkpoint"]["turn"] == 3  # the last round, not yet written
    assert informational_only(requested.status(), repeat)


async def test_a_repeated_passivate_call_goes_out_while_the_status_waits() -> None:
    """The handler: a pass whose plan repeats the stored request and changes only information
    makes the call and leaves the status for later, back at the passivation's own pace; once
    the window has passed, the status is written first."""
    calls: list[str] = []

    class Kube:
        async def replace_session_status(self, body: dict[str, Any]) -> dict[str, Any]:
            calls.append("status")
            return {**body, "metadata": {**body["metadata"], "resourceVersion": "9"}}

    class Runtime:
        async def passivate(self, pod_ip: str, reason: str, deadline_ms: int, token: Any) -> None:
            calls.append("passivate")

    pod, nodes = make_pod(1).on("node-a").running(), (make_node("node-a"),)
    drain = {"node-a": Trigger("node_drain", "node node-a is cordoned", "node-a")}
    asked = decide(
        replace(
            observation(stored_running(2), pod, nodes=nodes, state=_running(2)),
            **{"node_disruptions": drain},
        ),
        SETTINGS,
    )
    requested = make_session().with_status(**asked.status.wire())
    obs = replace(
        observation(requested, pod, nodes=nodes, state=_running(3), now=1), node_disruptions=drain
    )
    plan = decide(obs, SETTINGS)
    assert plan.passivate is not None and plan.requeue_after is not None
    ctx = OperatorContext(settings=SETTINGS, kube=Kube(), runtime=Runtime())  # type: ignore[arg-type]
    ctx.memory(obs.ref.uid).token = "token"
    ctx.outcome_waits.add(plan.passivate.pod_uid)  # its end is awaited already
    live = LiveSession(SessionBody(), lambda: requested.obj())
    live.last_write = time.monotonic()
    delay = await session_apply.apply_plan(ctx, requested.obj(), obs, plan, live=live)
    assert calls == ["passivate"]
    assert delay == pytest.approx(min(plan.requeue_after, WINDOW), abs=0.1)
    live.last_write = time.monotonic() - WINDOW - 1
    await session_apply.apply_plan(ctx, requested.obj(), obs, plan, live=live)
    assert calls == ["passivate", "status", "passivate"]


async def test_a_running_sessions_progress_waits_but_it_is_looked_at_at_its_own_pace() -> None:
    """A pass that finds only the run's progress writes nothing, and comes back after the
    session's status refresh, not at the end of the window: a phase change or the run's end is
    seen as soon as without coalescing."""
    calls: list[str] = []

    class Kube:
        async def replace_session_status(self, body: dict[str, Any]) -> dict[str, Any]:
            calls.append("status")
            return body

    pod, nodes = make_pod(1).on("node-a").running(), (make_node("node-a"),)
    at_turn_2 = stored_running(2)
    obs = observation(at_turn_2, pod, nodes=nodes, state=_running(5))
    plan = decide(obs, SETTINGS)
    assert informational_only(at_turn_2.status(), plan)
    fast = OperatorSettings(session_api=SessionApiSettings(status_refresh_seconds=0.5))
    assert fast.session_api.status_coalesce_seconds == WINDOW
    ctx = OperatorContext(settings=fast, kube=Kube(), runtime=None)  # type: ignore[arg-type]
    live = LiveSession(SessionBody(), lambda: at_turn_2.obj())
    live.last_write = time.monotonic()
    delay = await session_apply.apply_plan(
        ctx, at_turn_2.obj(), obs, replace(plan, requeue_after=0.5), live=live
    )
    assert calls == []
    assert delay == pytest.approx(0.5)  # the refresh, not the window's 10 s
    delay = await session_apply.apply_plan(
        ctx, at_turn_2.obj(), obs, replace(plan, requeue_after=None), live=live
    )
    assert calls == [] and delay == pytest.approx(0.5)


def obj(rv: str, status: dict[str, Any] | None = None) -> dict[str, Any]:
    return {"metadata": {"name": "s", "resourceVersion": rv}, "status": status or {}}


def test_first_iteration_uses_the_live_view() -> None:
    body = SessionBody()
    live = obj("1")
    got = body.current(live, now=0.0)
    assert got == live and got is not live


def test_written_object_stands_in_until_the_watch_shows_that_status() -> None:
    body = SessionBody(settle_seconds=5)
    body.written(obj("2", {"epoch": 1}), now=10.0)
    assert body.current(obj("1"), now=10.1) == obj("2", {"epoch": 1})  # watch lags behind
    caught_up = obj("3", {"epoch": 1})  # the write plus a later metadata change
    assert body.current(caught_up, now=10.2) == caught_up
    assert (
        body.current(obj("4", {"epoch": 1, "phase": "Running"}), now=10.3)["metadata"][
            "resourceVersion"
        ]
        == "4"
    )  # once caught up, the live view is used as it moves on


def test_the_watch_showing_the_written_status_drops_the_kept_answer() -> None:
    body = SessionBody(settle_seconds=5)
    answer = obj("2", {"epoch": 1})
    body.written(answer, now=0.0)
    body.seen(obj("1"))  # the watch lags: the answer is still the newest known
    assert body.current(obj("1"), now=0.1) == answer
    body.seen(obj("2", {"epoch": 1}))  # the watch caught up, no pass since
    assert body._known is None  # a session at rest holds one object
    assert body.current(obj("1"), now=9.0) == obj("1")  # the live view is used, no GET


async def test_a_watch_event_drops_the_answer_its_session_kept() -> None:
    ctx = OperatorContext(settings=OperatorSettings(), kube=None, runtime=None)  # type: ignore[arg-type]
    served: list[str] = []

    async def serve(uid: str) -> float | None:
        served.append(uid)
        return None

    ctx.sessions.start(1, serve)  # the handler then only stores and queues
    live = LiveSession(SessionBody(), lambda: ctx.sessions.bodies.get("u1") or {})
    ctx.sessions.state["u1"] = live
    live.body.written(obj("2", {"epoch": 1}), now=time.monotonic())
    event = {
        **obj("2", {"epoch": 1}),
        "metadata": {"name": "s", "uid": "u1", "resourceVersion": "2"},
    }
    memo: Any = SimpleNamespace(ctx=ctx)
    await agentsession.agentsession_event(type="MODIFIED", uid="u1", body=event, memo=memo)
    assert live.body._known is None
    await agentsession.agentsession_event(type="DELETED", uid="u1", body=event, memo=memo)
    assert "u1" not in ctx.sessions.bodies and "u1" not in ctx.sessions.state
    await ctx.sessions.stop()


def test_a_live_view_that_never_agrees_leads_to_a_get() -> None:
    body = SessionBody(settle_seconds=5)
    body.written(obj("2", {"epoch": 1}), now=0.0)
    assert body.current(obj("1"), now=4.0) is not None
    assert body.current(obj("1"), now=5.5) is None  # someone else writes status: read it
    body.seen_fresh(obj("7", {"epoch": 9}), now=6.0)
    assert body.current(obj("1"), now=6.1) == obj("7", {"epoch": 9})


def test_a_conflict_forces_a_get() -> None:
    body = SessionBody()
    assert body.current(obj("1"), now=0.0) is not None
    body.conflicted()
    assert body.current(obj("1"), now=0.1) is None
    body.seen_fresh(obj("2"), now=0.2)
    assert body.current(obj("2"), now=0.3) == obj("2")


def test_a_window_of_zero_writes_information_at_once() -> None:
    session = placed_session()
    plan = decide(observation(session, make_pod(1)), SETTINGS)
    assert informational_only(session.status(), plan)
    assert write_delay(session.status(), plan, since_last_write=0.01, window=0.0) is None
    assert write_delay(session.status(), plan, since_last_write=0.01, window=30.0) == (
        pytest.approx(29.99)
    )
