"""Table tests of reconcile.migration and of migration in reconcile.session.decide.

A session whose pod runs another image than the session's current one (``spec.image``, else the
operator's ``BERTH_SESSION_IMAGE``) is passivated with reason ``migration`` and resumed on the
current image, at most ``BERTH_MIGRATION_MAX_UNAVAILABLE`` at once, unless it keeps its image.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta
from typing import Any

import pytest
from berth_operator.api.agentsession import AgentSessionStatus, PassivationStatus
from berth_operator.api.conditions import get_condition
from berth_operator.api.sessionwarmpool import WarmPodTemplate, template_hash
from berth_operator.reconcile import migration
from berth_operator.reconcile.observe import ObservedPod
from berth_operator.reconcile.session import decide
from berth_operator.reconcile.warmpool import WarmPod, choose_warm_pod
from berth_operator.settings import (
    ImageSettings,
    MigrationSettings,
    OperatorSettings,
    SessionApiSettings,
)

from tests.unit.operator.fixtures import T0, PodBuilder, make_pod, make_session, observation, ours

OLD = "registry.example/berth:1.0"
NEW = "registry.example/berth:1.1"
UID = "uid-1234567890"  # the fixtures' session uid


def settings(max_unavailable: int = 1, image: str = NEW) -> OperatorSettings:
    return OperatorSettings(
        images=ImageSettings(session=image),
        migration=MigrationSettings(max_unavailable=max_unavailable),
        session_api=SessionApiSettings(status_refresh_seconds=10),
    )


def with_image(pod: PodBuilder, image: str) -> PodBuilder:
    pod.body["spec"]["containers"] = [{"name": "session", "image": image}]
    return pod


def running_pod(image: str = OLD) -> PodBuilder:
    return with_image(make_pod(1).on("node-a").running(), image)


def observed(image: str = OLD, phase: str = "Running") -> ObservedPod:
    pod = running_pod(image).observed()
    return replace(pod, phase=phase, pod_ip="" if phase == "Pending" else pod.pod_ip)


def test_observe_pod_reads_the_session_container_image() -> None:
    pod = make_pod(1)
    pod.body["spec"]["containers"] = [
        {"name": "sidecar", "image": "other:1"},
        {"name": "session", "image": OLD},
    ]
    assert pod.observed().image == OLD
    assert make_pod(1).observed().image == ""


# ---------------------------------------------------------------------------------------------
# check


@pytest.mark.parametrize(
    ("case", "spec", "pod", "migrating", "max_unavailable", "migrate", "waiting"),
    [
        ("same image", {}, observed(NEW), frozenset(), 1, False, False),
        ("image changed", {}, observed(OLD), frozenset(), 1, True, False),
        (
            "explicit Migrate",
            {"imageUpdatePolicy": "Migrate"},
            observed(),
            frozenset(),
            1,
            True,
            False,
        ),
        ("opted out", {"imageUpdatePolicy": "Keep"}, observed(), frozenset(), 1, False, False),
        ("slots full", {}, observed(), frozenset({"other"}), 1, False, True),
        ("own slot", {}, observed(), frozenset({UID}), 1, True, False),
        ("own slot, others too", {}, observed(), frozenset({UID, "b", "c"}), 2, True, False),
        ("a free slot", {}, observed(), frozenset({"other"}), 2, True, False),
        ("migration off", {}, observed(), frozenset(), 0, False, False),
        ("pending pod", {}, observed(phase="Pending"), frozenset(), 1, True, False),
        (
            "pending pod, slots full",
            {},
            observed(phase="Pending"),
            frozenset({"x"}),
            1,
            False,
            True,
        ),
        ("image unknown", {}, replace(observed(), image=""), frozenset(), 1, False, False),
        ("spec.image is current", {"image": OLD}, observed(OLD), frozenset(), 1, False, False),
        (
            "spec.image changed",
            {"image": "team/tools:2"},
            observed(OLD),
            frozenset(),
            1,
            True,
            False,
        ),
    ],
)
def test_check(
    case: str,
    spec: dict[str, Any],
    pod: ObservedPod,
    migrating: frozenset[str],
    max_unavailable: int,
    migrate: bool,
    waiting: bool,
) -> None:
    s = make_session().with_spec(**spec).spec()
    got = migration.check(
        s,
        pod,
        migration.desired_image(s, NEW),
        uid=UID,
        migrating=migrating,
        max_unavailable=max_unavailable,
    )
    assert (got.trigger is not None, got.waiting) == (migrate, waiting), case
    if got.trigger is not None:
        assert got.trigger.reason == "migration"
        assert f"{OLD} → {migration.desired_image(s, NEW)}" in got.trigger.message


# ---------------------------------------------------------------------------------------------
# in_flight: the count, from status alone (what a restarted operator rebuilds it from)


def rec(**kw: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "reason": "migration",
        "podName": "demo-e1",
        "epoch": 1,
        "requestedAt": T0,
        "deadline": T0 + timedelta(seconds=30),
        "outcome": "passivating",
    }
    base.update(kw)
    return PassivationStatus.model_validate(base).model_dump(
        by_alias=True, mode="json", exclude_none=True
    )


def status(**kw: Any) -> AgentSessionStatus:
    return AgentSessionStatus.model_validate(kw)


@pytest.mark.parametrize(
    ("case", "st", "expected"),
    [
        ("no passivation", status(phase="Running", epoch=1), False),
        ("requested", status(phase="Passivating", epoch=1, passivation=rec()), True),
        (
            "pod ended, replacement not placed",
            status(phase="Resuming", epoch=1, passivation=rec(outcome="passivated")),
            True,
        ),
        (
            "replacement starting",
            status(phase="Resuming", epoch=2, passivation=rec(outcome="passivated")),
            True,
        ),
        (
            "replacement running",
            status(phase="Running", epoch=2, passivation=rec(outcome="deadline")),
            False,
        ),
        (
            "resumed",
            status(
                phase="Running",
                epoch=2,
                passivation=rec(outcome="passivated", resumedAt=T0 + timedelta(seconds=9)),
            ),
            False,
        ),
        ("run completed first", status(phase="Succeeded", epoch=1, passivation=rec()), False),
        (
            "run failed first",
            status(phase="Running", epoch=1, passivation=rec(outcome="failed")),
            False,
        ),
        (
            "a drain",
            status(phase="Passivating", epoch=1, passivation=rec(reason="node_drain")),
            False,
        ),
        (
            "suspended while migrating",
            status(phase="Passivated", epoch=1, passivation=rec(outcome="passivated")),
            False,
        ),
    ],
)
def test_in_flight(case: str, st: AgentSessionStatus, expected: bool) -> None:
    assert migration.in_flight(st) is expected, case


def test_slots_after_a_restart_count_what_the_watch_shows() -> None:
    """A new process has admitted nothing itself: the watched statuses are the count, and with
    one session migrating (maxUnavailable 1) a second one waits."""
    slots = migration.MigrationSlots()
    watched = [
        uid
        for uid, st in {
            "a": status(phase="Passivating", epoch=3, passivation=rec(epoch=3)),
            "b": status(phase="Running", epoch=2, passivation=rec(outcome="passivated")),
            "c": status(phase="Running", epoch=1),
        }.items()
        if migration.in_flight(st)
    ]
    assert slots.migrating(watched) == {"a"}
    s = make_session().spec()
    got = migration.check(
        s, observed(), NEW, uid=UID, migrating=slots.migrating(watched), max_unavailable=1
    )
    assert got.trigger is None and got.waiting


def test_slots_keep_an_admission_until_its_own_decision_says_done() -> None:
    """The watch lags behind the process's own writes: an admitted session holds its slot even
    when the watch does not show it yet, and gives it back once its status says it is done."""
    slots = migration.MigrationSlots()
    slots.note("a", status(phase="Passivating", epoch=1, passivation=rec()))
    assert slots.migrating(()) == {"a"}
    slots.note("a", status(phase="Running", epoch=2, passivation=rec(outcome="passivated")))
    assert slots.migrating(()) == set()
    slots.note("b", status(phase="Passivating", epoch=1, passivation=rec()))
    slots.forget("b")
    assert slots.migrating(()) == set()


# ---------------------------------------------------------------------------------------------
# decide


def running_session(**status_fields: Any) -> Any:
    return make_session().with_status(
        epoch=1, podName="demo-e1", podUID="pod-uid-1", runId="run-1", **status_fields
    )


STATE = {"state": "running", "runId": "run-1"}


def test_decide_requests_a_migration_and_says_why() -> None:
    obs = observation(running_session(), running_pod(OLD), state=STATE)
    plan = decide(obs, settings())
    assert plan.passivate is not None and plan.passivate.reason == "migration"
    rec_ = plan.status.passivation
    assert rec_ is not None and rec_.reason == "migration" and rec_.outcome == "passivating"
    assert f"{OLD} → {NEW}" in rec_.message
    assert plan.status.image == OLD and plan.status.phase == "Passivating"
    cond = get_condition(plan.status.conditions, "Passivated")
    assert cond is not None and cond.reason == "Passivating" and f"{OLD} → {NEW}" in cond.message
    reasons = [e.reason for e in plan.events]
    assert "MigrationRequested" in reasons, reasons
    assert migration.in_flight(plan.status)


def test_decide_leaves_a_pod_on_the_current_image_alone() -> None:
    plan = decide(observation(running_session(), running_pod(NEW), state=STATE), settings())
    assert plan.passivate is None and plan.status.passivation is None
    assert plan.status.image == NEW and plan.status.phase == "Running"


def test_decide_keeps_the_image_of_a_session_that_opts_out() -> None:
    s = running_session().with_spec(imageUpdatePolicy="Keep")
    plan = decide(observation(s, running_pod(OLD), state=STATE), settings())
    assert plan.passivate is None and plan.status.phase == "Running"


def test_decide_waits_while_max_unavailable_sessions_migrate() -> None:
    obs = replace(
        observation(running_session(), running_pod(OLD), state=STATE),
        migrating=frozenset({"other-uid"}),
    )
    plan = decide(obs, settings(max_unavailable=1))
    assert plan.passivate is None and plan.status.passivation is None
    plan = decide(obs, settings(max_unavailable=2))
    assert plan.passivate is not None and plan.passivate.reason == "migration"


def test_a_drain_already_recorded_wins() -> None:
    drain = rec(reason="node_drain", message="node node-a is cordoned")
    s = running_session(passivation=drain)
    plan = decide(observation(s, running_pod(OLD), state=STATE, now=1), settings())
    assert plan.status.passivation is not None
    assert plan.status.passivation.reason == "node_drain"
    assert plan.passivate is not None and plan.passivate.reason == "node_drain"
    assert "MigrationRequested" not in [e.reason for e in plan.events]


def test_a_pending_pod_on_the_old_image_is_deleted_at_once() -> None:
    pod = with_image(make_pod(1).on("node-a"), OLD)
    plan = decide(observation(running_session(), pod), settings())
    assert plan.status.passivation is not None
    assert plan.status.passivation.reason == "migration"
    assert [d.name for d in plan.delete] == ["demo-e1"] and plan.passivate is None


def test_the_replacement_after_a_migration_gets_the_new_image_and_frees_the_slot() -> None:
    """The migrated pod ended passivated: a replacement resumes the run; once it runs, the
    session holds no slot any more."""
    term = {"outcome": "passivated", "runId": "run-1", "reason": "migration"}
    s = running_session(passivation=rec())
    ended = with_image(make_pod(1).on("node-a").terminated(0, term), OLD)
    plan = decide(ours(observation(s, ended, now=2)), settings())
    assert plan.status.passivation is not None
    assert plan.status.passivation.outcome == "passivated"
    assert migration.in_flight(plan.status)
    # the pod ended for good: its replacement is placed at once, resuming run-1
    placed = plan
    assert placed.create is not None and placed.create.resume_run_id == "run-1"
    assert placed.create.epoch == 2 and [d.name for d in placed.delete] == ["demo-e1"]
    # the replacement runs the resumed run on the new image
    s3 = make_session()
    s3.body["status"] = placed.status.model_dump(by_alias=True, mode="json", exclude_none=True)
    new_pod = with_image(make_pod(2).on("node-b").running().resuming("run-1"), NEW)
    state = {"state": "running", "runId": "run-2", "resumedFrom": "run-1"}
    running = decide(observation(s3, new_pod, state=state, now=5), settings())
    assert running.status.image == NEW and running.status.phase == "Running"
    assert running.status.passivation is not None
    assert running.status.passivation.resumed_at is not None
    assert not migration.in_flight(running.status)
    runs = running.status.runs or []
    assert runs[0].outcome == "passivated" and "migration" in (runs[0].reason or ""), runs


# ---------------------------------------------------------------------------------------------
# warm pools


def test_a_warm_pod_of_the_old_image_is_never_adopted() -> None:
    """Warm pods carry the hash of their template with the default image filled in: after the
    operator's session image changed, no old pod matches the pool's current hash."""
    template = WarmPodTemplate()
    old_pod = WarmPod(
        name="pool-abc",
        uid="u1",
        pool="pool",
        template=template_hash(template, OLD),
        phase="Running",
        ready=True,
        pod_ip="10.0.0.9",
        node_name="node-a",
    )
    assert template_hash(template, OLD) != template_hash(template, NEW)
    current = template_hash(template, NEW)
    assert choose_warm_pod([old_pod], current, claimed=(), disrupted=(), avoid_nodes=()) == []
    fresh = replace(old_pod, name="pool-def", template=current)
    assert choose_warm_pod([old_pod, fresh], current, claimed=(), disrupted=(), avoid_nodes=()) == [
        fresh
    ]


# ---------------------------------------------------------------------------------------------
# the handler's index and the context


async def test_the_session_index_lists_sessions_migrating_by_their_status() -> None:
    from berth_operator.handlers.agentsession import migrating_sessions

    moving = status(phase="Passivating", epoch=1, passivation=rec())
    wire = moving.model_dump(by_alias=True, mode="json", exclude_none=True)
    assert await migrating_sessions(uid="u1", status=wire) == {"u1": True}  # type: ignore[arg-type]
    done = {"phase": "Running", "epoch": 1}
    assert await migrating_sessions(uid="u2", status=done) == {}  # type: ignore[arg-type]
    broken = {"passivation": {"reason": "no-such-reason"}}
    assert await migrating_sessions(uid="u3", status=broken) == {}  # type: ignore[arg-type]


async def test_a_session_that_stopped_migrating_leaves_the_kopf_index() -> None:
    """kopf keeps an object's old entry when its indexing function returns None (it only
    drops entries on errors and filter mismatches), so the index returns {} explicitly; a
    session that never migrated takes no entry."""
    from berth_operator.handlers.agentsession import migrating_sessions, migrating_uids
    from kopf._core.engines.indexing import OperatorIndexer

    indexer = OperatorIndexer()
    key = ("ns", "mig-0", "u1")

    async def event(st: dict[str, object]) -> None:  # what kopf's OperatorIndexers.replace does
        result = await migrating_sessions(uid="u1", status=st)  # type: ignore[arg-type]
        if result is not None:
            indexer.replace(key, result)

    moving = status(phase="Passivating", epoch=1, passivation=rec())
    wire = moving.model_dump(by_alias=True, mode="json", exclude_none=True)
    await event(wire)
    assert migrating_uids(indexer.index) == ["u1"]  # type: ignore[arg-type]
    resumed = {**wire, "passivation": {**wire["passivation"], "resumedAt": "2026-01-01T00:01:00Z"}}
    await event(resumed)
    assert migrating_uids(indexer.index) == []  # type: ignore[arg-type]
    assert len(indexer.index) == 0  # the entry is gone, not kept as False
    await event({"phase": "Running", "epoch": 1})
    assert len(indexer.index) == 0
    assert migrating_uids(None) == []


def test_a_deleted_session_gives_its_slot_back() -> None:
    from berth_operator.handlers.context import OperatorContext

    c = OperatorContext(settings=settings(), kube=None, runtime=None)  # type: ignore[arg-type]
    c.migrations.note("u1", status(phase="Passivating", epoch=1, passivation=rec()))
    assert c.migrations.migrating() == {"u1"}
    c.forget("u1")
    assert c.migrations.migrating() == set()


def test_the_image_of_a_pod_first_seen_is_information_that_may_wait() -> None:
    """status.image changes with the pod's uid when a new pod is first seen: like the uid it is
    information (reconcile.coalesce), so it does not cost a status write of its own."""
    from berth_operator.reconcile.coalesce import informational_only

    first = decide(observation(make_session()), settings())
    s = make_session().with_status(**first.status.wire())  # as stored by the first write
    plan = decide(observation(s, with_image(make_pod(1), NEW)), settings())
    assert plan.status.image == NEW
    assert informational_only(s.status(), plan)
