"""Table tests of reconcile.passivation and of its use in reconcile.session.decide (§8)."""

from __future__ import annotations

import asyncio
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from berth_operator.api.agentsession import PassivationStatus
from berth_operator.api.conditions import PlacementReason, get_condition
from berth_operator.builders.pdb import ALL_SELECTED_PODS, build_namespace_pdb
from berth_operator.builders.session_pod import build_session_pod, with_avoided_nodes
from berth_operator.reconcile import passivation as pv
from berth_operator.reconcile.observe import observe_node
from berth_operator.reconcile.plan import DeletePod, PassivateCall, Plan
from berth_operator.reconcile.replacement import Verdict
from berth_operator.reconcile.session import decide
from berth_operator.settings import OperatorSettings, PassivationSettings, SessionApiSettings

from berth_contract.state import RuntimeState
from tests.unit.operator.fixtures import T0, fresh_live, make_pod, make_session, observation, ours

SETTINGS = OperatorSettings(
    passivation=PassivationSettings(kill_grace_seconds=3),
    session_api=SessionApiSettings(status_refresh_seconds=10),
)


def node(name: str = "proc-a", *, unschedulable: bool = False, taints: Any = ()) -> Any:
    spec: dict[str, Any] = {"unschedulable": unschedulable} if unschedulable else {}
    if taints:
        spec["taints"] = [{"key": k, "effect": "NoSchedule"} for k in taints]
    return observe_node({"spec": spec, "status": {}}, name)


# ---------------------------------------------------------------------------------------------
# node_disruption


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        ({}, None),
        ({"unschedulable": True}, "cordoned (spec.unschedulable)"),
        ({"taints": ["node.kubernetes.io/unschedulable"]}, "is cordoned"),
        ({"taints": ["ToBeDeletedByClusterAutoscaler"]}, "cluster autoscaler"),
        ({"taints": ["karpenter.sh/disrupted"]}, "Karpenter"),
        ({"taints": ["karpenter.sh/disruption"]}, "Karpenter"),
        ({"taints": ["node.kubernetes.io/not-ready"]}, None),
        ({"taints": ["DeletionCandidateOfClusterAutoscaler"]}, None),
    ],
)
def test_node_disruption(spec: dict[str, Any], expected: str | None) -> None:
    trig = pv.node_disruption(node(**spec))
    if expected is None:
        assert trig is None
    else:
        assert trig is not None
        assert (trig.reason, trig.node_name) == ("node_drain", "proc-a")
        assert expected in trig.message


def test_deleted_node_is_node_loss_not_a_drain() -> None:
    assert pv.node_disruption(observe_node(None, "gone")) is None
    assert pv.disrupted_nodes([node("a", unschedulable=True), node("b")]).keys() == {"a"}


# ---------------------------------------------------------------------------------------------
# trigger_for: first match wins in the documented order

DRAIN = pv.Trigger("node_drain", "node proc-a is cordoned", "proc-a")
MANUAL_STATE = RuntimeState.model_validate(
    {"state": "passivating", "passivation": {"reason": "manual", "deadlineMs": 5}}
)


@pytest.mark.parametrize(
    ("suspend", "evicted", "node_trig", "state", "expected"),
    [
        (False, False, None, None, None),
        (True, True, DRAIN, MANUAL_STATE, "suspend"),
        (False, True, DRAIN, MANUAL_STATE, "node_drain"),  # a drain cordons, then evicts
        (False, True, None, MANUAL_STATE, "eviction"),
        (False, False, DRAIN, MANUAL_STATE, "node_drain"),
        (False, False, None, MANUAL_STATE, "manual"),
        (False, False, None, RuntimeState.model_validate({"state": "running"}), None),
    ],
)
def test_trigger_order(
    suspend: bool,
    evicted: bool,
    node_trig: pv.Trigger | None,
    state: RuntimeState | None,
    expected: str | None,
) -> None:
    pod = make_pod(1).on("proc-a").running().observed()
    trig = pv.trigger_for(
        suspend=suspend, pod=pod, node=node_trig, eviction_requested=evicted, state=state
    )
    assert (trig.reason if trig else None) == expected


def test_unknown_runtime_reason_counts_as_manual_and_keeps_runtime_times() -> None:
    state = RuntimeState.model_validate(
        {"passivation": {"reason": "sigterm", "requestedMs": 1_000, "deadlineMs": 61_000}}
    )
    pod = make_pod(1).on("proc-a").running().observed()
    trig = pv.trigger_for(suspend=False, pod=pod, node=None, eviction_requested=False, state=state)
    assert trig is not None and trig.reason == "manual"
    rec = pv.record_for(trig, pod, T0, 120, state)
    assert (rec.deadline - rec.requested_at).total_seconds() == 60


# ---------------------------------------------------------------------------------------------
# step


def record(**kw: Any) -> PassivationStatus:
    base: dict[str, Any] = {
        "reason": "node_drain",
        "message": "node proc-a is cordoned",
        "podName": "demo-e1",
        "epoch": 1,
        "nodeName": "proc-a",
        "requestedAt": T0,
        "deadline": T0 + timedelta(seconds=30),
    }
    base.update(kw)
    return PassivationStatus.model_validate(base)


@pytest.mark.parametrize(
    ("rec", "trigger", "pod_state", "now", "kind", "post"),
    [
        (None, None, "running", 0, "none", False),
        (None, DRAIN, "running", 0, "request", True),
        (None, DRAIN, "pending", 0, "delete_now", False),
        (record(), None, "running", 10, "wait", True),  # trigger gone: keep going, first wins
        (record(), DRAIN, "running", 30, "deadline", False),
        (record(), DRAIN, "running", 45, "deadline", False),
        (record(podName="demo-e0"), None, "running", 0, "none", False),  # another pod's record
        (record(outcome="passivated"), DRAIN, "running", 0, "wait", True),  # old record, new pod?
    ],
)
def test_step(
    rec: PassivationStatus | None,
    trigger: pv.Trigger | None,
    pod_state: str,
    now: float,
    kind: str,
    post: bool,
) -> None:
    b = make_pod(1).on("proc-a")
    pod = (b.running() if pod_state == "running" else b).observed()
    if rec is not None and rec.outcome == "passivated":
        # a finished record of this very pod is not active: a new trigger opens a new record
        result = pv.step(rec, pod, trigger, T0 + timedelta(seconds=now), deadline_seconds=30)
        assert result.kind == "request"
        return
    result = pv.step(rec, pod, trigger, T0 + timedelta(seconds=now), deadline_seconds=30)
    assert (result.kind, result.post) == (kind, post)
    if kind == "request":
        assert result.record is not None
        assert result.record.deadline == T0 + timedelta(seconds=30)
        assert result.requeue == 30


# ---------------------------------------------------------------------------------------------
# reclassify / avoid_nodes / resumed


CRASH = Verdict("replace", PlacementReason.CRASHED, "exit code 137", True, run_outcome="crashed")
DELETED = Verdict("replace", PlacementReason.DELETED, "pod deleted", True, run_outcome="lost")
LOST = Verdict("replace", PlacementReason.NODE_LOST, "gone", True, True, run_outcome="lost")


@pytest.mark.parametrize(
    ("rec", "verdict", "reason", "failure", "force"),
    [
        (None, CRASH, PlacementReason.CRASHED, True, False),
        (record(), CRASH, PlacementReason.PASSIVATED, False, False),
        (record(), DELETED, PlacementReason.PASSIVATED, False, False),
        (record(), LOST, PlacementReason.PASSIVATED, False, True),
        (record(outcome="passivated"), CRASH, PlacementReason.CRASHED, True, False),
        (record(podName="other"), CRASH, PlacementReason.CRASHED, True, False),
        (record(), Verdict("alive"), "", False, False),
    ],
)
def test_reclassify(
    rec: PassivationStatus | None, verdict: Verdict, reason: str, failure: bool, force: bool
) -> None:
    out = pv.reclassify(rec, "demo-e1", verdict)
    assert (out.reason, out.counts_as_failure, out.force_delete) == (reason, failure, force)


@pytest.mark.parametrize(
    ("rec", "avoid"),
    [
        (None, ()),
        (record(), ()),  # still passivating
        (record(outcome="passivated"), ("proc-a",)),
        (record(outcome="deadline", reason="eviction"), ("proc-a",)),
        (record(outcome="passivated", reason="suspend"), ()),
        (record(outcome="passivated", resumedAt=T0), ()),
    ],
)
def test_avoid_nodes(rec: PassivationStatus | None, avoid: tuple[str, ...]) -> None:
    assert pv.avoid_nodes(rec) == avoid


def test_resumed_only_by_a_later_epoch_with_a_run() -> None:
    rec = record(outcome="passivated", passivatedAt=T0)
    same = make_pod(1).on("proc-b").running().observed()
    later = make_pod(2).on("proc-b").running().observed()
    assert pv.resumed(rec, same, "run-2", T0) is None
    assert pv.resumed(rec, later, None, T0) is None
    done = pv.resumed(rec, later, "run-2", T0 + timedelta(seconds=4))
    assert done is not None and done.resumed_run_id == "run-2"
    assert pv.resumed(done, later, "run-2", T0) is None


# ---------------------------------------------------------------------------------------------
# decide with passivation


def cond(plan: Plan, type_: str) -> tuple[str, str] | None:
    c = get_condition(plan.status.conditions, type_)
    return (c.status, c.reason) if c else None


RUNNING_STATE = {"state": "running", "runId": "run-1", "turn": 2}


def running_session() -> Any:
    return make_session().with_spec(passivation={"deadlineSeconds": 30})


def test_cordoned_node_requests_passivation_with_condition_event_and_post() -> None:
    session = running_session().with_status(epoch=1, podName="demo-e1", podUid="pod-uid-1")
    pod = make_pod(1).on("proc-a").running()
    obs = observation(session, pod, state=RUNNING_STATE)
    obs = type(obs)(**{**_fields(obs), "node_disruptions": {"proc-a": DRAIN}})
    plan = decide(obs, SETTINGS)
    assert plan.status.phase == "Passivating"
    assert cond(plan, "Passivated") == ("False", "Passivating")
    assert cond(plan, "Ready") == ("False", "Passivating")
    assert plan.passivate == PassivateCall(
        "127.0.1.5", "node_drain", pv.deadline_ms(_rec(plan)), "pod-uid-1"
    )
    assert _rec(plan).deadline == T0 + timedelta(seconds=30)
    assert [e.reason for e in plan.events] == ["Passivating"]
    assert "node_drain" in (get_condition(plan.status.conditions, "Passivated") or _x()).message
    assert plan.delete == []


def test_eviction_request_passivates_with_reason_eviction() -> None:
    session = running_session().with_status(epoch=1, podName="demo-e1", podUid="pod-uid-1")
    obs = observation(session, make_pod(1).on("proc-a").running(), state=RUNNING_STATE)
    obs = type(obs)(**{**_fields(obs), "evictions": frozenset({"demo-e1"})})
    plan = decide(obs, SETTINGS)
    assert _rec(plan).reason == "eviction"
    assert plan.passivate is not None


def test_deadline_deletes_with_short_grace_then_resumes_without_failure() -> None:
    rec = record().wire()
    session = running_session().with_status(
        epoch=1, podName="demo-e1", podUid="pod-uid-1", passivation=rec, runId="run-1"
    )
    pod = make_pod(1).on("proc-a").running()
    plan = decide(observation(session, pod, state=RUNNING_STATE, now=31), SETTINGS)
    assert [(d.name, d.grace_seconds) for d in plan.delete] == [("demo-e1", 3)]
    assert [e.reason for e in plan.events] == ["PassivationDeadlineExceeded"]
    assert plan.passivate is None
    # next look: the pod is being deleted (no termination message): Passivated, not a crash
    session2 = running_session().with_status(
        **{**plan.status.wire(), "podUid": "pod-uid-1", "podName": "demo-e1"}
    )
    plan2 = decide(observation(session2, make_pod(1).on("proc-a").running().deleting()), SETTINGS)
    assert plan2.status.restarts in (None, 0)
    assert plan2.status.passivations == 1
    assert _rec(plan2).outcome == "deadline"
    assert [m.kind for m in plan2.metrics] == ["passivation"]
    assert plan2.status.placement_reason == "Passivated"
    assert plan2.status.next_attempt_at is None


def test_clean_passivation_then_replacement_avoids_the_node_and_resume_is_recorded() -> None:
    rec = record().wire()
    session = running_session().with_status(
        epoch=1, podName="demo-e1", podUid="pod-uid-1", passivation=rec, runId="run-1"
    )
    msg = {"outcome": "passivated", "runId": "run-1", "turn": 2, "reason": "node_drain"}
    pod = make_pod(1).on("proc-a").running().terminated(0, msg)
    plan = decide(ours(observation(session, pod, now=5)), SETTINGS)
    assert _rec(plan).outcome == "passivated"
    run = (plan.status.runs or [])[-1]
    assert (run.outcome, run.reason) == ("passivated", "Passivated: node_drain")
    assert plan.metrics[0].seconds == 5
    # the pod ended for good: its replacement is created at once, with the node excluded
    plan2 = plan
    assert plan2.create is not None and plan2.create.epoch == 2 and plan2.create.reserved
    assert [d.name for d in plan2.delete] == ["demo-e1"]
    assert plan2.create.avoid_nodes == ("proc-a",)
    assert plan2.create.resume_run_id == "run-1"
    # the replacement runs the resumed run: Resumed
    st2 = {**plan2.status.wire(), "podUid": "pod-uid-2"}
    pod2 = make_pod(2).on("proc-b").running().resuming("run-1")
    state = {"state": "running", "runId": "run-2", "resumedFrom": "run-1"}
    plan3 = decide(
        observation(running_session().with_status(**st2), pod2, state=state, now=9), SETTINGS
    )
    assert _rec(plan3).resumed_run_id == "run-2"
    assert cond(plan3, "Passivated") == ("False", "Resumed")
    assert [m.kind for m in plan3.metrics] == ["resume"]
    assert plan3.metrics[0].seconds == 4
    assert plan3.status.phase == "Running"


@pytest.mark.parametrize(
    ("started_s", "state_run", "expected_s"),
    [
        (6.5, "run-2", 6.5),  # dated by the runtime's report of the run's start
        (3.0, "run-2", 5.0),  # a clock behind: not before the old pod's end
        (12.0, "run-2", 9.0),  # a clock ahead: not after the resume was seen
        (None, "run-2", 9.0),  # a runtime that reports no start: when it was seen
    ],
)
def test_the_resume_is_dated_by_the_runs_reported_start(
    started_s: float | None, state_run: str, expected_s: float
) -> None:
    rec = pv.finish(record(), "passivated", T0 + timedelta(seconds=5)).wire()
    st = {"epoch": 2, "podName": "demo-e2", "podUid": "pod-uid-2", "runId": "run-1"}
    session = running_session().with_status(**st, passivation=rec)
    state: dict[str, Any] = {"state": "running", "runId": state_run, "resumedFrom": "run-1"}
    if started_s is not None:
        state["runStartedMs"] = int((T0 + timedelta(seconds=started_s)).timestamp() * 1000)
    pod = make_pod(2).on("proc-b").running().resuming("run-1")
    plan = decide(observation(session, pod, state=state, now=9), SETTINGS)
    assert _rec(plan).resumed_at == T0 + timedelta(seconds=expected_s)
    assert [(m.kind, m.seconds) for m in plan.metrics] == [("resume", expected_s - 5)]


@pytest.mark.parametrize(
    ("outcome", "exit_code", "phase"),
    [("completed", 0, "Succeeded"), ("failed", 1, None), ("passivated", 0, "Resuming")],
)
def test_resume_is_recorded_when_the_resumed_run_ends_before_any_pass_saw_it(
    outcome: str, exit_code: int, phase: str | None
) -> None:
    """The later pod's own report (termination message) tells the resume when no pass read its
    state while it ran: the record is closed Resumed with that run, once."""
    rec = pv.finish(record(), "passivated", T0 + timedelta(seconds=5)).wire()
    st = {"epoch": 2, "podName": "demo-e2", "podUid": "pod-uid-2", "runId": "run-1"}
    session = running_session().with_status(**st, passivation=rec)
    msg = {"outcome": outcome, "runId": "run-2", "resumedFrom": "run-1", "text": "done"}
    if outcome == "passivated":
        msg["reason"] = "node_drain"
    pod = make_pod(2).on("proc-b").running().resuming("run-1").terminated(exit_code, msg)
    plan = decide(ours(observation(session, pod, now=9)), SETTINGS)
    assert _rec(plan).resumed_run_id == "run-2"
    assert _rec(plan).resumed_at is not None
    assert [m.kind for m in plan.metrics][:1] == ["resume"]
    assert plan.metrics[0].seconds == 4
    assert "Resumed" in [e.reason for e in plan.events]
    if phase is not None:
        assert plan.status.phase == phase
    # the next pass changes nothing of the closed record
    again = decide(
        ours(observation(running_session().with_status(**plan.status.wire()), pod, now=12)),
        SETTINGS,
    )
    assert _rec(again).resumed_at == _rec(plan).resumed_at
    assert "resume" not in [m.kind for m in again.metrics]


def test_an_earlier_epochs_report_is_not_a_resume() -> None:
    """The passivated pod's own completed report (same epoch) never closes the record."""
    rec = pv.finish(record(), "passivated", T0 + timedelta(seconds=5)).wire()
    st = {"epoch": 1, "podName": "demo-e1", "podUid": "pod-uid-1", "runId": "run-1"}
    session = running_session().with_status(**st, passivation=rec)
    msg = {"outcome": "completed", "runId": "run-1", "text": "done"}
    pod = make_pod(1).on("proc-a").running().terminated(0, msg)
    plan = decide(ours(observation(session, pod, now=9)), SETTINGS)
    assert _rec(plan).resumed_at is None
    assert "resume" not in [m.kind for m in plan.metrics]


def test_a_replacement_waits_for_an_old_pod_that_has_not_ended() -> None:
    """Deleted but still running (its process has not exited): never two pods at once; once
    it has ended, its lingering object holds nothing back."""
    st = running_session().with_status(epoch=1, passivation=record().wire(), runId="run-1")
    st.body["status"].pop("podName", None)
    st.body["status"].pop("podUid", None)
    running = make_pod(1).on("proc-a").running().deleting()
    plan = decide(observation(st, running, now=6), SETTINGS)
    assert plan.create is None and cond(plan, "Placed")[0] == "False"
    msg = {"outcome": "passivated", "runId": "run-1", "turn": 2, "reason": "node_drain"}
    ended = make_pod(1).on("proc-a").running().terminated(0, msg).deleting()
    plan = decide(observation(st, ended, now=7), SETTINGS)
    assert plan.create is not None and plan.create.epoch == 2


def test_suspend_passivates_then_holds_no_pod() -> None:
    session = (
        running_session()
        .with_spec(suspend=True)
        .with_status(epoch=1, podName="demo-e1", podUid="pod-uid-1")
    )
    plan = decide(
        observation(session, make_pod(1).on("proc-a").running(), state=RUNNING_STATE), SETTINGS
    )
    assert _rec(plan).reason == "suspend"
    msg = {"outcome": "passivated", "runId": "run-1", "reason": "suspend"}
    st = plan.status.wire()
    ended = make_pod(1).on("proc-a").running().terminated(0, msg)
    plan2 = decide(
        observation(running_session().with_spec(suspend=True).with_status(**st), ended), SETTINGS
    )
    st2 = plan2.status.wire()
    plan3 = decide(
        observation(running_session().with_spec(suspend=True).with_status(**st2)), SETTINGS
    )
    assert plan3.create is None
    assert plan3.status.phase == "Passivated"
    assert cond(plan3, "Passivated") == ("True", "Passivated")


def test_not_started_pod_on_a_drained_node_is_deleted_at_once() -> None:
    session = running_session().with_status(epoch=1, podName="demo-e1", podUid="pod-uid-1")
    obs = observation(session, make_pod(1).on("proc-a"))
    obs = type(obs)(**{**_fields(obs), "node_disruptions": {"proc-a": DRAIN}})
    plan = decide(obs, SETTINGS)
    assert [(d.name, d.grace_seconds) for d in plan.delete] == [("demo-e1", None)]
    assert plan.passivate is None


def test_completed_during_passivation_closes_the_record() -> None:
    session = running_session().with_status(
        epoch=1, podName="demo-e1", podUid="pod-uid-1", passivation=record().wire()
    )
    done = {"outcome": "completed", "runId": "run-1", "resultText": "ok"}
    plan = decide(observation(session, make_pod(1).on("proc-a").terminated(0, done)), SETTINGS)
    assert plan.status.phase == "Succeeded"
    assert _rec(plan).outcome == "completed"


# ---------------------------------------------------------------------------------------------
# builders


def test_the_namespace_pdb_selects_session_pods_only_and_allows_no_eviction() -> None:
    owner = {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole", "name": "r"}
    pdb = build_namespace_pdb("team-a", owner)
    assert pdb["apiVersion"] == "policy/v1"
    assert (pdb["metadata"]["name"], pdb["metadata"]["namespace"]) == ("berth-sessions", "team-a")
    assert pdb["spec"] == {
        "minAvailable": ALL_SELECTED_PODS,
        "selector": {
            "matchLabels": {
                "app.kubernetes.io/component": "session",
                "app.kubernetes.io/managed-by": "berth-operator",
            },
            # warm pods not yet adopted have no session uid: not protected
            "matchExpressions": [{"key": "berth.dev/session-uid", "operator": "Exists"}],
        },
    }
    assert ALL_SELECTED_PODS == 2**31 - 1  # int32: the API's type for minAvailable
    assert pdb["metadata"]["ownerReferences"] == [owner]
    assert "ownerReferences" not in build_namespace_pdb("team-a", None)["metadata"]


def test_avoided_nodes_are_anded_into_every_required_term() -> None:
    user = {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [
                    {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a"]}]},
                    {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["b"]}]},
                ]
            }
        },
        "podAffinity": {"x": 1},
    }
    out = with_avoided_nodes(user, ("proc-a",))
    terms = out["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][
        "nodeSelectorTerms"
    ]
    excl = {"key": "metadata.name", "operator": "NotIn", "values": ["proc-a"]}
    assert [t["matchFields"] for t in terms] == [[excl], [excl]]
    assert out["podAffinity"] == {"x": 1}
    assert (
        "matchFields"
        not in user["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][
            "nodeSelectorTerms"
        ][0]
    )
    assert with_avoided_nodes(None, ("n",))["nodeAffinity"][
        "requiredDuringSchedulingIgnoredDuringExecution"
    ]["nodeSelectorTerms"] == [
        {"matchFields": [{"key": "metadata.name", "operator": "NotIn", "values": ["n"]}]}
    ]


def test_session_pod_carries_the_avoidance() -> None:
    s = make_session()
    pod = build_session_pod(
        s.ref(),
        s.spec(),
        SETTINGS,
        epoch=2,
        resume_run_id="run-1",
        reason="Passivated",
        avoid_nodes=("proc-a",),
    )
    terms = pod["spec"]["affinity"]["nodeAffinity"][
        "requiredDuringSchedulingIgnoredDuringExecution"
    ]["nodeSelectorTerms"]
    assert terms[0]["matchFields"][0]["values"] == ["proc-a"]
    plain = build_session_pod(
        s.ref(), s.spec(), SETTINGS, epoch=1, resume_run_id=None, reason="Initial"
    )
    assert "affinity" not in plain["spec"]


# ---------------------------------------------------------------------------------------------


def _fields(obs: Any) -> dict[str, Any]:
    return {name: getattr(obs, name) for name in obs.__dataclass_fields__}


def _rec(plan: Plan) -> PassivationStatus:
    rec = plan.status.passivation
    if rec is None:
        raise AssertionError("no status.passivation")
    return rec


def _x() -> Any:
    raise AssertionError("missing condition")


async def test_the_replacement_is_created_before_the_ended_pods_delete(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The handler carries out such a plan with the status first (the guard's LIST of the
    session's pods beside it: the status write here answers only once the LIST has been
    made), then the create, and the delete of the ended pod last: it holds the replacement
    back no more, nor the session's next pass (the pass returns before the delete, which runs
    in the background). This process did not store the passivation request (no reservation:
    restarted since), so the replacement skips epoch 2, which an earlier process may have
    used, and its create waits for the status write."""
    from berth_operator.handlers import session_apply
    from berth_operator.handlers.context import OperatorContext

    calls: list[str] = []
    listed = asyncio.Event()
    msg = {"outcome": "passivated", "runId": "run-1", "turn": 2, "reason": "node_drain"}
    ended = make_pod(1).on("proc-a").running().terminated(0, msg)

    class Kube:
        async def replace_session_status(self, body: dict[str, Any]) -> dict[str, Any]:
            calls.append(f"status epoch {body['status']['epoch']}")
            await asyncio.wait_for(listed.wait(), timeout=5)  # the LIST is not made after
            return {**body, "metadata": {**body["metadata"], "resourceVersion": "2"}}

        async def delete_pod(self, namespace: str, name: str, **_: Any) -> None:
            calls.append(f"delete {name}")

        async def list_pods(self, namespace: str, selector: str) -> list[dict[str, Any]]:
            calls.append("list")
            listed.set()
            return [ended.obj()]  # the ended pod is still there: no obstacle

        async def create_pod(self, body: dict[str, Any]) -> None:
            calls.append(f"create {body['metadata']['name']}")

    session = running_session().with_status(
        epoch=1, podName="demo-e1", podUid="pod-uid-1", passivation=record().wire(), runId="run-1"
    )
    obs = observation(session, ended, now=5)
    plan = decide(obs, SETTINGS)
    ctx = OperatorContext(settings=SETTINGS, kube=Kube(), runtime=None)  # type: ignore[arg-type]
    monkeypatch.setattr(session_apply, "post_events", lambda body, plan: calls.append("events"))
    await session_apply.apply_plan(ctx, session.obj(), obs, plan, live=fresh_live())
    assert calls == ["status epoch 3", "list", "events", "create demo-e3"]
    assert ctx.background, "the ended pod's delete was not started"
    await asyncio.gather(*ctx.background)
    assert calls[-1] == "delete demo-e1"


async def test_a_failed_delete_of_an_ended_pod_is_logged_and_asked_again_next_pass(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The background delete of an ended pod does not raise into nothing: it logs, and the next
    decision (the pod still there, neither current nor being deleted) deletes it again."""
    from berth_operator.errors import KubeError
    from berth_operator.handlers import session_apply
    from berth_operator.handlers.context import OperatorContext

    class Kube:
        async def delete_pod(self, namespace: str, name: str, **_: Any) -> None:
            raise KubeError("delete pod: 503 Service Unavailable")

    session = running_session()
    ctx = OperatorContext(settings=SETTINGS, kube=Kube(), runtime=None)  # type: ignore[arg-type]
    with caplog.at_level("WARNING", logger="berth.operator"):
        await session_apply.delete_ended(ctx, session.ref(), DeletePod("demo-e1", "pod-uid-1"))
    assert "ended pod demo-e1 not deleted yet" in caplog.text

    msg = {"outcome": "passivated", "runId": "run-1", "turn": 2, "reason": "node_drain"}
    ended = make_pod(1).on("proc-a").running().terminated(0, msg)
    replacement = make_pod(2).on("proc-b").running()
    again = running_session().with_status(
        epoch=2, podName="demo-e2", podUid="pod-uid-2", passivation=record().wire(), runId="run-1"
    )
    plan = decide(observation(again, ended, replacement, now=6), SETTINGS)
    assert [d.name for d in plan.delete] == [ended.obj()["metadata"]["name"]]


async def test_a_passivated_pods_own_report_of_its_end_places_the_replacement_before_the_kubelet(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """With ``POST /v1/passivate`` the operator long-polls the pod's ``GET /v1/outcome`` (one
    waiter per pod, however often the POST is delivered again). Its answer (the termination
    message, given once the process is done with the session) is kept and the session woken;
    the next pass treats the pod, still Running for the kubelet, as ended with that message and
    places the replacement. When the kubelet's own report shows, the kept one is dropped."""
    import json

    from berth_operator.handlers import session_calls
    from berth_operator.handlers.context import OperatorContext

    msg = {"outcome": "passivated", "runId": "run-1", "turn": 2, "reason": "node_drain"}
    asked: list[tuple[str, int]] = []

    class Runtime:
        async def passivate(self, pod_ip: str, reason: str, deadline_ms: int, token: Any) -> None:
            asked.append(("passivate", deadline_ms))

        async def outcome(self, pod_ip: str, token: Any, wait_seconds: int) -> str | None:
            asked.append(("outcome", wait_seconds))
            polls = sum(1 for kind, _ in asked if kind == "outcome")
            return None if polls == 1 else json.dumps(msg)  # the second poll answers

    session = running_session().with_status(
        epoch=1, podName="demo-e1", podUid="pod-uid-1", passivation=record().wire(), runId="run-1"
    )
    ctx = OperatorContext(settings=SETTINGS, kube=None, runtime=Runtime())  # type: ignore[arg-type]
    ctx.memory(session.ref().uid).token = "token"
    woken: list[str] = []
    monkeypatch.setattr(ctx, "wake_session", woken.append)
    deadline = int((datetime.now(UTC) + timedelta(seconds=30)).timestamp() * 1000)
    call = PassivateCall("127.0.1.5", "node_drain", deadline, "pod-uid-1")
    await session_calls.passivate(ctx, session.ref(), call)
    await session_calls.passivate(ctx, session.ref(), call)  # delivered again: one waiter
    await asyncio.gather(*ctx.background)
    assert sorted(a[0] for a in asked) == ["outcome", "outcome", "passivate", "passivate"]
    assert all(0 < w <= session_calls.OUTCOME_WAIT_SECONDS for k, w in asked if k == "outcome")
    assert woken == [session.ref().uid]
    reported = ctx.memory(session.ref().uid).outcome
    assert reported is not None
    pod_uid, text, at = reported
    assert (pod_uid, text) == ("pod-uid-1", json.dumps(msg))
    assert abs((datetime.now(UTC) - at).total_seconds()) < 5  # when the report came
    assert not ctx.outcome_waits

    running = make_pod(1).on("proc-a").running()
    obs = observation(session, running, now=5)
    plan = decide(obs, SETTINGS)
    assert plan.create is None  # the kubelet's view alone: still running
    # the end is dated when the report came, not when a pass got to it
    ctx.memory(session.ref().uid).outcome = (pod_uid, text, T0 + timedelta(seconds=2))
    pods = tuple(ctx.reported_ends(session.ref().uid, obs.pods))
    plan = decide(ours(replace(obs, pods=pods)), SETTINGS)
    assert _rec(plan).outcome == "passivated"
    assert _rec(plan).passivated_at == T0 + timedelta(seconds=2)
    assert plan.create is not None and plan.create.epoch == 2
    assert plan.create.resume_run_id == "run-1"
    assert [d.name for d in plan.delete] == ["demo-e1"]

    reported = make_pod(1).on("proc-a").running().terminated(0, msg).observed()
    assert ctx.reported_ends(session.ref().uid, [reported]) == [reported]
    assert ctx.memory(session.ref().uid).outcome is None  # the kubelet's report took over


async def test_a_pod_that_cannot_report_its_end_is_left_to_the_kubelet() -> None:
    """Unreachable (its process already gone) or a report that does not parse: nothing is
    kept, the session is not woken, and the waiter ends."""
    from berth_operator.errors import RuntimeUnreachable
    from berth_operator.handlers import session_calls
    from berth_operator.handlers.context import OperatorContext

    answers: list[Any] = [RuntimeUnreachable("connection refused"), "not json"]

    class Runtime:
        async def outcome(self, pod_ip: str, token: Any, wait_seconds: int) -> str | None:
            answer = answers.pop(0)
            if isinstance(answer, Exception):
                raise answer
            return str(answer)

    ctx = OperatorContext(settings=SETTINGS, kube=None, runtime=Runtime())  # type: ignore[arg-type]
    ref = running_session().ref()
    deadline = int((datetime.now(UTC) + timedelta(seconds=30)).timestamp() * 1000)
    for _ in range(2):
        ctx.outcome_waits.add("pod-uid-1")
        call = PassivateCall("127.0.1.5", "node_drain", deadline, "pod-uid-1")
        await session_calls.await_outcome(ctx, ref, call, "token")
        assert all(m.outcome is None for _, m in ctx.memory) and not ctx.outcome_waits
    assert answers == []


async def test_an_undelivered_repeat_is_logged_below_info_a_first_request_at_info(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The first POST failing is worth an INFO line; a repeat finding the port closed is the
    usual end of a passivation (the process done), logged at DEBUG only."""
    from berth_operator.errors import RuntimeUnreachable
    from berth_operator.handlers import session_calls
    from berth_operator.handlers.context import OperatorContext

    class Runtime:
        async def passivate(self, pod_ip: str, reason: str, deadline_ms: int, token: Any) -> None:
            raise RuntimeUnreachable("connection refused")

    ctx = OperatorContext(settings=SETTINGS, kube=None, runtime=Runtime())  # type: ignore[arg-type]
    ref = running_session().ref()
    ctx.memory(ref.uid).token = "token"
    ctx.outcome_waits.add("pod-uid-1")  # its end is awaited already
    deadline = int((datetime.now(UTC) + timedelta(seconds=30)).timestamp() * 1000)
    caplog.set_level("DEBUG", logger="berth.operator")
    for resend in (False, True):
        call = PassivateCall("127.0.1.5", "node_drain", deadline, "pod-uid-1", resend=resend)
        await session_calls.passivate(ctx, ref, call)
    levels = [r.levelname for r in caplog.records if "not delivered" in r.getMessage()]
    assert levels == ["INFO", "DEBUG"]
