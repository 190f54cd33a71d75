"""Retention of finished and deleted sessions' stores and workspaces: the policy and where it
comes from, the suspended store-cleanup Job that records a pending removal, what a sweep does
with it (remove after the period; keep for a session re-created under the same name), and the
removal command run on a real directory tree, leaving every other session's files alone."""

from __future__ import annotations

import subprocess
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from berth_operator.api.common import SessionRef
from berth_operator.api.constants import SHARED_MOUNT_PATH
from berth_operator.api.retention import StoreRetentionSpec
from berth_operator.builders.cleanup_job import build_store_cleanup_job
from berth_operator.errors import NotFound, SettingsError, SpecError
from berth_operator.handlers import retention as handler
from berth_operator.handlers.context import OperatorContext
from berth_operator.retention import ledger, policy
from berth_operator.settings import OperatorSettings, SharedClaimSettings

T0 = datetime(2026, 1, 1, tzinfo=UTC)


# --- policy ---------------------------------------------------------------------------------


def test_policy_settings_parse_and_refuse() -> None:
    assert policy.parse_setting("Keep") == policy.KEEP
    assert policy.parse_setting("Delete") == policy.RetentionPolicy(True, 0)
    assert policy.parse_setting("Delete/3600").after_seconds == 3600
    for bad in ("keep", "Keep/10", "Delete/-1", "Delete/x", "Remove", "Delete/99999999999"):
        with pytest.raises(SettingsError):
            policy.parse_setting(bad)
    assert policy.parse_namespaces(["a=Delete/60", " b = Keep"]) == {
        "a": policy.RetentionPolicy(True, 60, "namespace a"),
        "b": policy.RetentionPolicy(False, 0, "namespace b"),
    }
    with pytest.raises(SettingsError):
        policy.parse_namespaces(["Delete/60"])


def test_the_spec_wins_over_the_namespace_over_the_default() -> None:
    namespaces = {"team": policy.RetentionPolicy(True, 60, "namespace team")}
    default = policy.parse_setting("Keep")
    own = {"policy": "Keep", "afterSeconds": 0}
    assert policy.effective(own, "team", namespaces, default).delete is False
    assert policy.effective(None, "team", namespaces, default).after_seconds == 60
    assert policy.effective(None, "other", namespaces, default) == default
    assert policy.effective({"policy": "Delete"}, "other", namespaces, default).source == "spec"
    assert policy.effective({"policy": "Bogus"}, "other", namespaces, default) == default


def test_the_crd_model_validates_the_spec() -> None:
    assert StoreRetentionSpec.model_validate({"policy": "Delete", "afterSeconds": 5}).after_seconds
    with pytest.raises(ValueError):
        StoreRetentionSpec.model_validate({"policy": "Delete", "afterSeconds": -1})
    with pytest.raises(ValueError):
        StoreRetentionSpec.model_validate({"policy": "Sometimes"})


# --- the planned Job --------------------------------------------------------------------------


def planned(name: str = "demo", uid: str = "uid-1", after: int = 600) -> dict[str, Any]:
    from berth_operator.api.agentsession import AgentSessionSpec

    ref = ledger.checked_ref(SessionRef("ns", name, uid))
    spec = AgentSessionSpec.model_validate({"prompt": "p", "model": "openai/m"})
    job = build_store_cleanup_job(ref, spec, OperatorSettings())
    return ledger.plan_job(job, policy.RetentionPolicy(True, after, "spec"), "deleted", T0)


def test_a_planned_removal_is_a_suspended_job_due_after_the_period() -> None:
    job = planned()
    assert job["spec"]["suspend"] is True
    assert "ttlSecondsAfterFinished" not in job["spec"]
    assert job["metadata"]["labels"][ledger.LABEL_RETENTION] == "true"
    assert ledger.due_at(job) == T0 + timedelta(seconds=600)
    args = job["spec"]["template"]["spec"]["containers"][0]["command"][4:]
    assert args == [f"{SHARED_MOUNT_PATH}/store/ns/demo", f"{SHARED_MOUNT_PATH}/workspaces/ns/demo"]


@pytest.mark.parametrize("name", ["../x", "a/b", "..", "A", "a..b", ""])
def test_no_removal_for_a_name_that_could_leave_its_directory(name: str) -> None:
    with pytest.raises(SpecError):
        ledger.checked_ref(SessionRef("ns", name, "uid"))
    with pytest.raises(SpecError):
        ledger.checked_ref(SessionRef(name or "..", "demo", "uid"))


def test_the_removal_command_deletes_only_that_sessions_directories(tmp_path: Path) -> None:
    """Run the Job's container command (sh, rm) on a real tree standing in for the volume."""
    for ns, name in (("ns", "demo"), ("ns", "demo2"), ("other", "demo")):
        for top in ("store", "workspaces"):
            d = tmp_path / top / ns / name
            d.mkdir(parents=True)
            (d / "file").write_text("x")
    command = planned()["spec"]["template"]["spec"]["containers"][0]["command"]
    local = [a.replace(SHARED_MOUNT_PATH, str(tmp_path)) for a in command]
    subprocess.run(local, check=True)
    assert not (tmp_path / "store" / "ns" / "demo").exists()
    assert not (tmp_path / "workspaces" / "ns" / "demo").exists()
    for ns, name in (("ns", "demo2"), ("other", "demo")):
        assert (tmp_path / "store" / ns / name / "file").exists()
        assert (tmp_path / "workspaces" / ns / name / "file").exists()


# --- what a sweep does ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("session", "pods", "seconds", "action"),
    [
        (None, False, 599, "wait"),  # not due yet
        (None, False, 601, "remove"),  # deleted, period over, nothing left running
        (None, True, 601, "wait"),  # its pods still there
        (("uid-2", "Pending"), False, 601, "cancel"),  # re-created: the store is kept
        (("uid-1", "Succeeded"), False, 601, "remove"),  # finished, still there
        (("uid-1", "Running"), False, 601, "cancel"),  # runs again
    ],
)
def test_decide(session: Any, pods: bool, seconds: int, action: str) -> None:
    now = T0 + timedelta(seconds=seconds)
    assert ledger.decide(planned(), session, pods, now).action == action


def test_a_removed_store_is_forgotten_once_its_session_is_gone() -> None:
    done = {**planned(), "spec": {"suspend": False}, "status": {"succeeded": 1}}
    now = T0 + timedelta(days=1)
    assert ledger.decide(done, None, False, now).action == "forget"
    assert ledger.decide(done, ("uid-1", "Succeeded"), False, now).action == "wait"


class Api:
    """The apiserver as the sweep sees it: sessions, pods by uid and Jobs."""

    def __init__(self) -> None:
        self.sessions: list[dict[str, Any]] = []
        self.jobs: dict[str, dict[str, Any]] = {}
        self.pods: dict[str, int] = {}
        self.rest = self

    async def get(self, what: str, path: str, **query: Any) -> dict[str, Any]:
        assert "labelSelector" in query
        return {"items": list(self.jobs.values())}

    async def patch(self, what: str, path: str, patch: dict[str, Any]) -> dict[str, Any]:
        job = self.jobs[path.rsplit("/", 1)[1]]
        job["spec"].update(patch["spec"])
        return job

    async def delete(self, what: str, path: str, options: Any = None) -> dict[str, Any]:
        if self.jobs.pop(path.rsplit("/", 1)[1], None) is None:
            raise NotFound(what, status=404)
        return {}

    async def create_job(self, body: dict[str, Any]) -> None:
        self.jobs.setdefault(body["metadata"]["name"], body)

    async def get_job(self, namespace: str, name: str) -> dict[str, Any] | None:
        return self.jobs.get(name)

    async def list_sessions_in(self, namespaces: Any) -> list[dict[str, Any]]:
        return self.sessions

    async def list_pods(self, namespace: str, selector: str) -> list[Any]:
        return [{}] * self.pods.get(selector.split("=", 1)[1], 0)


def session_body(uid: str, phase: str, **spec: Any) -> dict[str, Any]:
    return {
        "metadata": {"namespace": "ns", "name": "demo", "uid": uid, "annotations": {}},
        "spec": {"prompt": "p", "model": "openai/m", **spec},
        "status": {"phase": phase, "result": {"finishedAt": "2026-01-01T00:00:00Z"}},
    }


@pytest.fixture
def ctx(monkeypatch: pytest.MonkeyPatch) -> Any:
    events: list[tuple[str, str]] = []
    monkeypatch.setattr(handler, "_event", lambda body, reason, msg: events.append((reason, msg)))
    settings = OperatorSettings(
        claims=SharedClaimSettings(retention="Keep", retention_namespaces=["ns=Delete/600"])
    )
    context = OperatorContext(settings=settings, kube=Api(), runtime=None)  # type: ignore[arg-type]
    context.events = events  # type: ignore[attr-defined]
    return context


async def test_a_deleted_session_is_removed_after_the_period(ctx: Any) -> None:
    api: Api = ctx.kube
    job = handler.planned_job(ctx, session_body("uid-1", "Running"), "deleted", T0)
    assert job is not None
    await api.create_job(job)
    api.pods["uid-1"] = 1
    await handler.sweep(ctx, T0 + timedelta(seconds=300))
    assert api.jobs[job["metadata"]["name"]]["spec"]["suspend"] is True
    await handler.sweep(ctx, T0 + timedelta(seconds=700))  # due, but a pod is left
    assert api.jobs[job["metadata"]["name"]]["spec"]["suspend"] is True
    api.pods.clear()
    await handler.sweep(ctx, T0 + timedelta(seconds=760))
    assert api.jobs[job["metadata"]["name"]]["spec"]["suspend"] is False  # its pod runs rm
    assert ("StoreRemoved", "retention period of demo (uid uid-1) is over") in ctx.events


async def test_a_session_recreated_before_the_period_keeps_its_store(ctx: Any) -> None:
    api: Api = ctx.kube
    job = handler.planned_job(ctx, session_body("uid-1", "Running"), "deleted", T0)
    assert job is not None
    await api.create_job(job)
    api.sessions = [session_body("uid-2", "Running")]  # the same name, a new object
    await handler.sweep(ctx, T0 + timedelta(seconds=700))
    assert api.jobs == {}  # the removal is cancelled: the new object continues the store
    assert [r for r, _ in ctx.events] == ["StoreKept"]


async def test_a_finished_session_is_planned_removed_and_forgotten(ctx: Any) -> None:
    api: Api = ctx.kube
    api.sessions = [session_body("uid-1", "Succeeded")]
    await handler.sweep(ctx, T0 + timedelta(seconds=10))  # plans it: due finishedAt + 600
    (name,) = api.jobs
    assert ledger.due_at(api.jobs[name]) == T0 + timedelta(seconds=600)
    await handler.sweep(ctx, T0 + timedelta(seconds=20))
    assert len(api.jobs) == 1  # planned once, not again
    await handler.sweep(ctx, T0 + timedelta(seconds=601))
    assert api.jobs[name]["spec"]["suspend"] is False
    api.jobs[name]["status"] = {"succeeded": 1}
    await handler.sweep(ctx, T0 + timedelta(seconds=700))
    assert name in api.jobs  # the record that it was removed, while the object exists
    api.sessions = []
    await handler.sweep(ctx, T0 + timedelta(seconds=800))
    assert api.jobs == {}
    reasons = [r for r, _ in ctx.events]
    assert reasons.count("StoreRemovalPlanned") >= 1 and "StoreRemoved" in reasons


async def test_keep_and_delete_store_plan_nothing(ctx: Any) -> None:
    keep = session_body("uid-1", "Succeeded", storeRetention={"policy": "Keep"})
    assert handler.planned_job(ctx, keep, "finished", T0) is None
    asked = session_body("uid-1", "Succeeded")
    asked["metadata"]["annotations"]["berth.dev/delete-store"] = "true"
    assert handler.planned_job(ctx, asked, "deleted", T0) is None  # removed at once instead


async def test_deleting_a_finished_session_keeps_the_earlier_due_time(ctx: Any) -> None:
    api: Api = ctx.kube
    api.sessions = [session_body("uid-1", "Succeeded")]
    await handler.sweep(ctx, T0 + timedelta(seconds=10))
    (name,) = api.jobs
    before = len(ctx.events)
    job = handler.planned_job(
        ctx, session_body("uid-1", "Succeeded"), "deleted", T0 + timedelta(days=1)
    )
    assert job is not None
    await handler._plan_quietly(ctx, job)
    assert ledger.due_at(api.jobs[name]) == T0 + timedelta(seconds=600)
    assert len(ctx.events) == before  # no second plan, no second Event
