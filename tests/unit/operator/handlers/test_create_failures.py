"""A pod whose create fails after its epoch was stored (an object it needs, or the create
itself, refused) is placed again at the same epoch after the placement backoff, with the error
in ``Placed``/``Ready`` and a Warning Event; the epoch does not move on per failed attempt."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from berth_operator.api.conditions import PlacementReason, Reason, get_condition
from berth_operator.errors import KubeError
from berth_operator.handlers import session_apply
from berth_operator.handlers.context import OperatorContext
from berth_operator.reconcile.plan import CreateFailure, CreatePod, DeletePod, Observation, Plan
from berth_operator.reconcile.session import decide
from berth_operator.settings import OperatorSettings, PlacementSettings

from tests.unit.operator.fixtures import T0, fresh_live, make_session, observation

SETTINGS = OperatorSettings(placement=PlacementSettings(backoff_base_seconds=2))
FORBIDDEN = "create poddisruptionbudget: 403 Forbidden: exceeded quota: pdbs"


def unplaced_session(epoch: int = 3) -> Any:
    """Status names the pod of ``epoch`` and has never seen it (no uid, no pod)."""
    return make_session().with_status(
        epoch=epoch, podName=f"demo-e{epoch}", runId="run-1", placementReason="Passivated"
    )


def failure(epoch: int, attempts: int = 1, seconds_ago: float = 1) -> CreateFailure:
    create = CreatePod(epoch=epoch, reason="Passivated", resume_run_id="run-1")
    return CreateFailure(create, FORBIDDEN, attempts, T0 - timedelta(seconds=seconds_ago))


def placed(plan: Plan) -> tuple[str, str]:
    cond = get_condition(plan.status.conditions, "Placed")
    assert cond is not None
    return cond.reason, cond.message


def test_a_failed_create_waits_its_backoff_and_says_why_without_a_new_epoch() -> None:
    obs = replace(observation(unplaced_session()), create_failure=failure(3, seconds_ago=0.5))
    plan = decide(obs, SETTINGS)
    assert plan.create is None and plan.status.epoch == 3
    assert plan.status.pod_name == "demo-e3"
    assert placed(plan) == (
        Reason.POD_CREATE_FAILED,
        f"pod demo-e3 could not be created: {FORBIDDEN}",
    )
    ready = get_condition(plan.status.conditions, "Ready")
    assert ready is not None and ready.reason == Reason.POD_CREATE_FAILED
    assert [(e.type, e.reason) for e in plan.events] == [("Warning", Reason.POD_CREATE_FAILED)]
    assert plan.requeue_after == 1.5  # backoff 2 s after the attempt, 0.5 s ago
    assert plan.status.restarts in (None, 0)  # no pod died


def test_once_the_backoff_passed_the_same_epochs_pod_is_created_again() -> None:
    first = decide(replace(observation(unplaced_session()), create_failure=failure(3)), SETTINGS)
    stored = unplaced_session()
    stored.body["status"] = wire(first)
    # attempt 2 (backoff 4 s) of a create that went beside its status write (a reserved epoch)
    late = failure(3, attempts=2, seconds_ago=4.5)
    late = replace(late, create=replace(late.create, reserved=True))
    plan = decide(replace(observation(stored), create_failure=late), SETTINGS)
    assert plan.create == replace(late.create, reserved=False)  # stored now: after the write
    assert plan.status.epoch == 3
    assert placed(plan) == placed(first)  # the error stays shown until the pod exists
    assert wire(plan) == wire(first)  # so nothing to write for the retry
    assert plan.events == []  # the same error: its Event was posted already


def wire(plan: Plan) -> dict[str, Any]:
    return plan.status.model_dump(by_alias=True, exclude_none=True, mode="json")


def test_without_a_failure_of_this_epoch_a_pod_never_seen_moves_to_the_next_epoch() -> None:
    """After an operator restart (nothing remembered) or for another epoch's failure, the
    unseen pod counts as an interrupted placement, as before: never the same epoch twice
    without knowing its create did not happen."""
    for known in (None, failure(2)):
        obs = replace(observation(unplaced_session()), create_failure=known)
        plan = decide(obs, SETTINGS)
        assert plan.create is not None and plan.create.epoch == 4
        assert plan.create.reason == PlacementReason.INTERRUPTED


class Kube:
    """The apiserver of one session: its status as last written, pods created."""

    def __init__(self) -> None:
        self.status_writes: list[int] = []
        self.created: list[str] = []

    async def replace_session_status(self, body: dict[str, Any]) -> dict[str, Any]:
        self.status_writes.append(body["status"]["epoch"])
        rv = str(len(self.status_writes) + 1)
        return {**body, "metadata": {**body["metadata"], "resourceVersion": rv}}

    async def list_pods(self, namespace: str, selector: str) -> list[dict[str, Any]]:
        return []

    async def create_pod(self, body: dict[str, Any]) -> None:
        self.created.append(body["metadata"]["name"])


class Disruption:
    """PDB calls that are refused ``refusals`` times, then succeed."""

    def __init__(self, refusals: int) -> None:
        self.refusals = refusals
        self.done: set[str] = set()

    async def ensure_namespace(self, namespace: str, owner: Any) -> None:
        if self.refusals > 0:
            self.refusals -= 1
            raise KubeError(FORBIDDEN)
        self.done.add(namespace)


async def test_passes_keep_the_epoch_while_the_pdb_is_refused_then_create_its_pod(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Whole passes (decide + ``apply_plan``) against an apiserver that refuses the namespace's PDB
    three times: epoch 1 is stored once, each pass after a refusal keeps it (and the backoff grows),
    and the fourth attempt creates ``demo-e1``."""
    kube, pdbs = Kube(), Disruption(refusals=3)
    events: list[str] = []
    monkeypatch.setattr(
        session_apply,
        "post_events",
        lambda body, plan: events.extend(e.reason for e in plan.events),
    )
    ctx = OperatorContext(
        settings=SETTINGS,
        kube=kube,  # type: ignore[arg-type]
        runtime=None,  # type: ignore[arg-type]
        disruption=pdbs,  # type: ignore[arg-type]
    )
    body = make_session().obj()
    attempts: list[int] = []
    for _ in range(12):
        failed = ctx.memory(body["metadata"]["uid"]).create_failure
        # each pass runs once the last attempt's backoff has passed
        now = datetime.now(UTC) + timedelta(seconds=600)
        obs = _observe(body, failed, now)
        plan = decide(obs, SETTINGS)
        await session_apply.apply_plan(ctx, body, obs, plan, live=fresh_live())
        body = {**body, "status": wire(plan)}
        if failed is not None and failed is not ctx.memory(body["metadata"]["uid"]).create_failure:
            attempts.append(failed.attempts)
        if kube.created:
            break
    assert kube.created == ["demo-e1"]
    assert set(kube.status_writes) == {1}  # never a second epoch
    assert attempts == [1, 2, 3]
    assert all(m.create_failure is None for _, m in ctx.memory)  # forgotten once created
    assert pdbs.refusals == 0
    assert events.count(Reason.POD_CREATE_FAILED) == 1  # one Event for one error


def _observe(body: dict[str, Any], failed: CreateFailure | None, now: datetime) -> Observation:
    session = make_session()
    session.body = body
    return replace(observation(session), create_failure=failed, now=now)


class RefusingDeletes(Kube):
    """An apiserver that refuses every pod delete."""

    async def delete_pod(self, namespace: str, name: str, **options: Any) -> None:
        raise KubeError(f"delete pod {namespace}/{name}: 500 Internal Server Error")


async def test_a_refused_delete_before_the_create_keeps_the_stored_epoch(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A plan that deletes a pod that has not ended, then creates the next epoch's: the delete
    is refused after the epoch was written, so the pod of that epoch is never made. That is a
    failed create of the epoch (tried again at the same epoch), not an interrupted placement."""
    kube = RefusingDeletes()
    monkeypatch.setattr(session_apply, "post_events", lambda body, plan: None)
    ctx = OperatorContext(settings=SETTINGS, kube=kube, runtime=None)  # type: ignore[arg-type]
    session = make_session().with_status(epoch=1, podName="demo-e1", podUid="pod-uid-1")
    obs = observation(session)
    create = CreatePod(epoch=2, reason=PlacementReason.INTERRUPTED, resume_run_id=None)
    stored = obs.status.model_copy(update={"epoch": 2, "pod_name": "demo-e2", "pod_uid": None})
    plan = Plan(stored, delete=[DeletePod("demo-e1", "pod-uid-1")], create=create)

    assert await session_apply.apply_plan(ctx, session.obj(), obs, plan, live=fresh_live()) == 0.0

    assert kube.status_writes == [2] and kube.created == []
    failure = ctx.memory(obs.ref.uid).create_failure
    assert failure is not None
    assert (failure.create.epoch, failure.attempts) == (2, 1)
    assert "500 Internal Server Error" in failure.message
    # so the next decision places epoch 2 again instead of moving to 3
    again = replace(
        observation(make_session().with_status(**wire(plan))),
        create_failure=failure,
        now=failure.failed_at + timedelta(seconds=600),
    )
    replan = decide(again, SETTINGS)
    assert replan.create is not None and replan.create.epoch == 2
