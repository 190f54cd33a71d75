"""Table tests of reconcile.session.decide: placement, status, replacement, backoff, terminal."""

from __future__ import annotations

from datetime import timedelta

import pytest
from berth_operator.api.conditions import get_condition
from berth_operator.reconcile.plan import Plan
from berth_operator.reconcile.session import decide
from berth_operator.settings import OperatorSettings, PlacementSettings

from tests.unit.operator.fixtures import (
    T0,
    make_node,
    make_pod,
    make_session,
    observation,
    ts,
)

SETTINGS = OperatorSettings(
    placement=PlacementSettings(
        max_placement_retries=2, backoff_base_seconds=2, backoff_cap_seconds=5
    )
)
COMPLETED = {
    "outcome": "completed",
    "runId": "run-1",
    "turn": 3,
    "usage": {"promptTokens": 10, "completionTokens": 5, "totalTokens": 15},
    "resultText": "all done",
}


def cond(plan: Plan, type_: str) -> tuple[str, str] | None:
    c = get_condition(plan.status.conditions, type_)
    return (c.status, c.reason) if c else None


def test_first_placement_bumps_epoch_before_create() -> None:
    plan = decide(observation(make_session()), SETTINGS)
    assert plan.create is not None
    assert (plan.create.epoch, plan.create.reason, plan.create.resume_run_id) == (
        1,
        "Initial",
        None,
    )
    assert plan.status.epoch == 1
    assert plan.status.pod_name == "demo-e1"
    assert plan.status.phase == "Pending"
    assert cond(plan, "Ready") == ("False", "Pending")
    assert plan.status.observed_generation == 1


def test_inflight_pod_not_in_cache_is_not_created_again() -> None:
    session = make_session().with_status(epoch=1, podName="demo-e1")
    plan = decide(observation(session, inflight="demo-e1"), SETTINGS)
    assert plan.create is None
    assert cond(plan, "Placed") == ("False", "PodCreated")


def test_running_pod_with_state_is_running_and_records_lineage() -> None:
    session = make_session().with_status(epoch=1, podName="demo-e1")
    pod = make_pod(1).on("proc-a").running()
    state = {
        "state": "running",
        "runId": "run-1",
        "turn": 2,
        "toolCallsCount": 3,
        "usage": {"promptTokens": 7, "completionTokens": 3, "totalTokens": 10},
    }
    plan = decide(observation(session, pod, nodes=(make_node("proc-a"),), state=state), SETTINGS)
    st = plan.status
    assert (st.phase, st.node_name, st.run_id, st.pod_uid) == (
        "Running",
        "proc-a",
        "run-1",
        "pod-uid-1",
    )
    assert st.checkpoint is not None and st.checkpoint.turn == 2
    assert st.usage is not None and st.usage.total_tokens == 10
    assert [r.run_id for r in st.runs or []] == ["run-1"]
    assert cond(plan, "Ready") == ("True", "Running")
    assert cond(plan, "Running") == ("True", "RuntimeReady")
    assert plan.create is None and plan.delete == []
    assert plan.requeue_after == SETTINGS.session_api.status_refresh_seconds


def test_completed_pod_ends_succeeded_with_result_and_one_run() -> None:
    session = make_session().with_status(epoch=1, podName="demo-e1", podUid="pod-uid-1")
    pod = make_pod(1).on("proc-a").terminated(0, COMPLETED)
    plan = decide(observation(session, pod), SETTINGS)
    st = plan.status
    assert st.phase == "Succeeded"
    assert cond(plan, "Completed") == ("True", "RunCompleted")
    assert cond(plan, "Ready") == ("True", "Succeeded")
    assert st.result is not None and st.result.text == "all done"
    assert st.usage is not None and st.usage.total_tokens == 15
    assert [(r.run_id, r.outcome) for r in st.runs or []] == [("run-1", "completed")]
    assert plan.delete == [] and plan.create is None


def test_terminal_session_never_places_again() -> None:
    session = (
        make_session()
        .with_status(epoch=1, podName="demo-e1")
        .with_condition("Completed", "True", "RunCompleted")
    )
    plan = decide(observation(session), SETTINGS)
    assert plan.create is None
    assert plan.status.phase == "Succeeded"


@pytest.mark.parametrize(
    ("pod", "node", "reason", "force"),
    [
        (make_pod(1).on("proc-a").terminated(137), make_node("proc-a"), "PodCrashed", False),
        (
            make_pod(1)
            .on("proc-a")
            .terminated(1, {"outcome": "failed", "runId": "run-1", "reason": "boom"}),
            make_node("proc-a"),
            "RunFailed",
            False,
        ),
        (make_pod(1).on("proc-a").evicted(), make_node("proc-a"), "PodEvicted", False),
        (
            make_pod(1).on("proc-a").running(),
            make_node("proc-a", ready="Unknown"),
            "NodeLost",
            True,
        ),
    ],
    ids=["sigkill", "run-failed", "evicted", "node-lost"],
)
def test_death_without_passivation_is_replaced_with_backoff(pod, node, reason, force) -> None:  # type: ignore[no-untyped-def]
    session = make_session().with_status(
        epoch=1, podName="demo-e1", podUid="pod-uid-1", runId="run-1"
    )
    plan = decide(observation(session, pod, nodes=(node,)), SETTINGS)
    st = plan.status
    assert [(d.name, d.force) for d in plan.delete] == [("demo-e1", force)]
    assert plan.create is None  # not while the old pod exists
    assert st.restarts == 1
    assert st.next_attempt_at == T0 + timedelta(seconds=2)
    assert st.placement_reason == reason
    assert cond(plan, "Degraded") == ("True", reason)
    assert st.phase == "Resuming"
    assert st.pod_name is None


@pytest.mark.parametrize(
    ("kubelet", "ready"), [("OOMKilled", "OOMKilled"), ("Error", "PodCrashed")]
)
def test_a_precise_kubelet_reason_of_a_crash_is_readys_reason(kubelet: str, ready: str) -> None:
    """kubectl get ags shows OOMKilled (the REASON column is Ready's reason), not just a crash."""
    session = make_session().with_status(
        epoch=1, podName="demo-e1", podUid="pod-uid-1", runId="run-1"
    )
    pod = make_pod(1).on("proc-a").terminated(137, reason=kubelet)
    plan = decide(observation(session, pod, nodes=(make_node("proc-a"),)), SETTINGS)
    assert cond(plan, "Ready") == ("False", ready)
    assert cond(plan, "Degraded") == ("True", ready)
    ready_cond = next(c for c in plan.status.conditions or [] if c.type == "Ready")
    assert f"exit code 137 ({kubelet})" in ready_cond.message
    assert [e.reason for e in plan.events] == [ready]
    # the next tick (backoff, then the replacement) keeps saying it
    later = decide(
        observation(
            make_session().with_status(**plan.status.model_dump(by_alias=True, exclude_none=True)),
            now=1,
        ),
        SETTINGS,
    )
    assert cond(later, "Ready") == ("False", ready)


def test_replacement_waits_for_backoff_then_resumes_last_run() -> None:
    session = make_session().with_status(
        epoch=1, runId="run-1", restarts=1, placementReason="PodCrashed", nextAttemptAt=ts(2)
    )
    early = decide(observation(session, now=1), SETTINGS)
    assert early.create is None
    assert cond(early, "Placed") == ("False", "BackOff")
    assert early.requeue_after == pytest.approx(1)
    late = decide(observation(session, now=2), SETTINGS)
    assert late.create is not None
    assert (late.create.epoch, late.create.reason, late.create.resume_run_id) == (
        2,
        "PodCrashed",
        "run-1",
    )
    assert late.status.pod_name == "demo-e2"


def test_no_create_while_an_old_pod_is_terminating() -> None:
    session = make_session().with_status(epoch=1, runId="run-1")
    plan = decide(observation(session, make_pod(1).on("proc-a").deleting()), SETTINGS)
    assert plan.create is None


def test_retries_exhausted_marks_failed() -> None:
    session = make_session().with_status(epoch=3, podName="demo-e3", podUid="pod-uid-3", restarts=2)
    plan = decide(observation(session, make_pod(3).on("proc-a").terminated(137)), SETTINGS)
    assert plan.status.phase == "Failed"
    assert cond(plan, "Failed") == ("True", "RetriesExhausted")
    assert plan.create is None


def test_backoff_doubles_and_caps() -> None:
    assert [SETTINGS.placement.backoff_seconds(n) for n in (1, 2, 3, 4)] == [2, 4, 5, 5]


def test_passivated_pod_is_replaced_without_counting_a_failure() -> None:
    session = make_session().with_status(epoch=1, podName="demo-e1", podUid="pod-uid-1")
    msg = {"outcome": "passivated", "runId": "run-1", "turn": 2, "reason": "node_drain"}
    plan = decide(observation(session, make_pod(1).on("proc-a").terminated(0, msg)), SETTINGS)
    assert plan.status.restarts is None
    assert plan.status.passivations == 1
    assert plan.status.placement_reason == "Passivated"
    assert [d.name for d in plan.delete] == ["demo-e1"]


def test_vanished_pod_that_was_seen_counts_as_deleted() -> None:
    session = make_session().with_status(
        epoch=1, podName="demo-e1", podUid="pod-uid-1", runId="run-1"
    )
    plan = decide(observation(session), SETTINGS)
    assert plan.status.placement_reason == "PodDeleted"
    assert plan.status.restarts == 1
    assert plan.create is None  # backoff first


def test_interrupted_create_is_replaced_at_once_with_a_new_epoch() -> None:
    session = make_session().with_status(epoch=1, podName="demo-e1")
    plan = decide(observation(session), SETTINGS)
    assert plan.create is not None and plan.create.epoch == 2
    assert plan.status.restarts is None


def test_stale_cache_decided_again_with_listed_pods_waits_and_never_creates() -> None:
    """The handler's guard: status already says epoch 3 is being placed, but the direct LIST
    shows a pod of epoch 2 the cache had lost. Deciding again with that list deletes the old pod
    and places nothing until it is gone."""
    first = decide(observation(make_session().with_status(epoch=2, podName=None)), SETTINGS)
    assert first.create is not None and first.create.epoch == 3
    session = make_session().with_status(**first.status.wire())
    listed = make_pod(2).on("proc-a").running()
    again = decide(observation(session, listed, nodes=(make_node("proc-a"),)), SETTINGS)
    assert again.create is None
    assert [d.name for d in again.delete] == ["demo-e2"]
    assert again.status.phase == "Resuming"
    assert cond(again, "Placed") == ("False", "WaitingForPod")


def test_pod_of_higher_epoch_than_status_is_adopted() -> None:
    session = make_session().with_status(epoch=1, podName="demo-e1")
    plan = decide(
        observation(
            session,
            make_pod(2).on("proc-a").running(),
            nodes=(make_node("proc-a"),),
            state={"state": "running"},
        ),
        SETTINGS,
    )
    assert plan.status.epoch == 2
    assert plan.create is None
    assert plan.status.phase == "Running"


def test_stale_pod_of_older_epoch_is_deleted() -> None:
    session = make_session().with_status(epoch=2, podName="demo-e2", podUid="pod-uid-2")
    plan = decide(
        observation(
            session,
            make_pod(1).on("proc-a").running(),
            make_pod(2).on("proc-b").running(),
            nodes=(make_node("proc-a"), make_node("proc-b")),
            state={"state": "running"},
        ),
        SETTINGS,
    )
    assert [d.name for d in plan.delete] == ["demo-e1"]


def test_resumed_run_gets_second_lineage_entry() -> None:
    session = make_session().with_status(
        epoch=2,
        podName="demo-e2",
        runId="run-1",
        runs=[{"runId": "run-1", "outcome": "crashed", "podName": "demo-e1"}],
    )
    pod = make_pod(2).on("proc-b").running().resuming("run-1")
    plan = decide(
        observation(
            session, pod, nodes=(make_node("proc-b"),), state={"state": "running", "runId": "run-2"}
        ),
        SETTINGS,
    )
    runs = plan.status.runs or []
    assert [(r.run_id, r.resumed_from) for r in runs] == [("run-1", None), ("run-2", "run-1")]


def test_missing_laneworker_blocks_placement() -> None:
    plan = decide(observation(make_session(), missing=("exec",)), SETTINGS)
    assert plan.create is None
    assert cond(plan, "Placed") == ("False", "LaneWorkerNotFound")


def test_budget_exhausted_is_terminal() -> None:
    session = make_session().with_status(epoch=1, podName="demo-e1", podUid="pod-uid-1")
    msg = {
        "outcome": "failed",
        "runId": "run-1",
        "reason": "Budget exhausted on 'tokens': limit reached",
    }
    plan = decide(observation(session, make_pod(1).on("proc-a").terminated(1, msg)), SETTINGS)
    assert cond(plan, "BudgetExhausted") == ("True", "BudgetExhausted")
    assert plan.status.phase == "Failed"


def test_a_node_without_landlock_fails_the_session_at_once_naming_the_node() -> None:
    session = make_session().with_status(epoch=1, podName="demo-e1", podUid="pod-uid-1")
    why = "ToolSandboxUnavailable: node node-c gives pods no Landlock (...)"
    msg = {"outcome": "failed", "reason": why, "code": "ToolSandboxUnavailable"}
    plan = decide(observation(session, make_pod(1).on("node-c").terminated(1, msg)), SETTINGS)
    assert plan.status.phase == "Failed"
    assert plan.create is None and plan.status.epoch == 1  # no replacement, no retry
    assert cond(plan, "Failed") == ("True", "ToolSandboxUnavailable")
    ready = get_condition(plan.status.conditions, "Ready")
    assert ready is not None and (ready.reason, ready.message) == ("ToolSandboxUnavailable", why)
    assert [(e.type, e.reason, e.message) for e in plan.events] == [
        ("Warning", "ToolSandboxUnavailable", why)
    ]
    # later passes keep Ready saying why
    again = make_session().with_status(**plan.status.wire())
    later = decide(observation(again, now=60), SETTINGS)
    ready = get_condition(later.status.conditions, "Ready")
    assert ready is not None and (ready.reason, ready.message) == ("ToolSandboxUnavailable", why)
    # the same failure without the code is an ordinary run failure, retried
    plain = {"outcome": "failed", "reason": why}
    retried = decide(observation(session, make_pod(1).on("node-c").terminated(1, plain)), SETTINGS)
    assert retried.status.phase == "Resuming"


def test_condition_transition_time_moves_only_on_status_change() -> None:
    session = (
        make_session()
        .with_status(epoch=1, podName="demo-e1")
        .with_condition("Placed", "False", "PodCreated")
    )
    plan = decide(observation(session, make_pod(1), now=50), SETTINGS)
    placed = get_condition(plan.status.conditions, "Placed")
    assert placed is not None and placed.last_transition_time == T0 - timedelta(seconds=100)


def test_suspended_session_is_not_placed() -> None:
    plan = decide(observation(make_session().with_spec(suspend=True)), SETTINGS)
    assert plan.create is None
    assert plan.status.phase == "Passivated"


@pytest.mark.parametrize(
    "reason",
    ["ImagePullBackOff", "ErrImagePull", "CreateContainerConfigError", "CrashLoopBackOff"],
)
def test_a_container_waiting_for_a_fix_says_why_in_ready_and_once_in_an_event(
    reason: str,
) -> None:
    kubelet = f"kubelet says {reason}: details"
    session = make_session().with_status(epoch=1, podName="demo-e1", podUid="pod-uid-1")
    pod = make_pod(1).on("proc-a").waiting(reason, kubelet)
    plan = decide(observation(session, pod, nodes=(make_node("proc-a"),)), SETTINGS)
    assert plan.create is None and plan.delete == []
    assert cond(plan, "Ready") == ("False", reason)
    assert cond(plan, "Running") == ("False", reason)
    ready = get_condition(plan.status.conditions, "Ready")
    assert ready is not None and kubelet in ready.message
    assert [(e.type, e.reason) for e in plan.events] == [("Warning", reason)]
    # the same problem on the next look: no second Event
    again_session = make_session().with_status(**plan.status.wire())
    again = decide(observation(again_session, pod, nodes=(make_node("proc-a"),)), SETTINGS)
    assert again.events == [] and cond(again, "Ready") == ("False", reason)


def test_an_ordinary_start_is_not_reported_as_stuck() -> None:
    session = make_session().with_status(epoch=1, podName="demo-e1", podUid="pod-uid-1")
    pod = make_pod(1).on("proc-a").waiting("ContainerCreating", "")
    plan = decide(observation(session, pod, nodes=(make_node("proc-a"),)), SETTINGS)
    assert cond(plan, "Ready") == ("False", "Pending")
    assert cond(plan, "Running") == ("False", "Starting")


def test_an_unschedulable_pod_is_the_ready_reason_with_the_schedulers_message() -> None:
    session = make_session().with_status(epoch=1, podName="demo-e1", podUid="pod-uid-1")
    pod = make_pod(1)
    pod.body["status"]["conditions"] = [
        {
            "type": "PodScheduled",
            "status": "False",
            "reason": "Unschedulable",
            "message": "0/2 nodes are available: 2 Insufficient memory.",
        }
    ]
    plan = decide(observation(session, pod), SETTINGS)
    assert cond(plan, "Placed") == ("False", "Unschedulable")
    assert cond(plan, "Ready") == ("False", "Unschedulable")
    ready = get_condition(plan.status.conditions, "Ready")
    assert ready is not None and "Insufficient memory" in ready.message
    assert [(e.type, e.reason) for e in plan.events] == [("Warning", "Unschedulable")]


@pytest.mark.parametrize(
    ("adopted", "stopped_ago", "requeue"),
    [
        (True, 5, 1.0),
        (True, 100, SETTINGS.session_api.status_refresh_seconds),
        (False, 5, SETTINGS.session_api.status_refresh_seconds),
    ],
)
def test_an_adopted_pod_whose_runtime_does_not_answer_yet_is_asked_again_within_a_second(
    adopted: bool, stopped_ago: float, requeue: float
) -> None:
    """An adopted warm pod was Ready before its session ran: no pod event says when the run is
    up, so for a while after the session stopped running its pod is asked every second; later
    (a runtime that never answers) at the refresh interval. A created pod's readiness wakes the
    session through the pod watch, so it is not polled every second (a burst of such pods
    whose runtimes do not answer would hold every reconcile slot)."""
    session = make_session().with_status(
        epoch=2,
        podName="demo-e2",
        conditions=[
            {
                "type": "Running",
                "status": "False",
                "reason": "NotRunning",
                "message": "",
                "lastTransitionTime": ts(-stopped_ago),
            }
        ],
    )
    pod = make_pod(2).on("proc-a").running()
    if adopted:
        pod = pod.adopted()
    plan = decide(observation(session, pod, nodes=(make_node("proc-a"),)), SETTINGS)
    assert cond(plan, "Running") == ("False", "Starting")
    assert plan.requeue_after == pytest.approx(requeue)
