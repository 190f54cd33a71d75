"""AgentSessions served by a fixed pool of workers (handlers.workqueue, handlers.session_workers):
a key waits at most once, one worker per key, a key added while served runs again after, one
timer per key, never more than the bound at once and in order of arrival, the waiting counted,
the stored object without managedFields, kopf's finalizer only when needed, wake-ups
of sessions apart from those of daemons, and stopping."""

from __future__ import annotations

import asyncio
from typing import Any

import kopf
from berth_operator.handlers import agentsession
from berth_operator.handlers.context import OperatorContext
from berth_operator.handlers.session_workers import SessionWorkers, slim
from berth_operator.handlers.workqueue import WorkQueue
from berth_operator.settings import OperatorSettings
from prometheus_client import REGISTRY

KOPF_REGISTRY = kopf.get_default_registry()
"""kopf's default registry as the handlers found it when they were imported (at collection,
before any test ran: a test elsewhere runs kopf with a registry of its own as the default)."""


def body(uid: str, **meta: Any) -> dict[str, Any]:
    return {"metadata": {"uid": uid, "name": uid, "namespace": "ns", **meta}, "spec": {"a": 1}}


async def test_a_key_waits_once_however_often_it_is_added() -> None:
    q = WorkQueue()
    for key in ("a", "b", "a", "a", "b", "c"):
        q.add(key)
    assert q.backlog() == 3
    assert [await q.get() for _ in range(3)] == ["a", "b", "c"]
    assert q.backlog() == 0


async def test_a_key_added_while_served_is_served_again_after_done_not_before() -> None:
    q = WorkQueue()
    q.add("a")
    assert await q.get() == "a"
    q.add("a")  # an event while a worker serves it
    assert q.backlog() == 0  # not to a second worker
    assert q.queued("a")
    q.done("a")
    assert q.backlog() == 1 and await q.get() == "a"
    q.done("a")
    assert q.backlog() == 0 and not q.queued("a")


async def test_one_timer_per_key_the_latest_wins_and_taking_the_key_cancels_it() -> None:
    q = WorkQueue()
    q.add_after("a", 0.05)
    q.add_after("a", 10)  # replaces the earlier timer
    await asyncio.sleep(0.1)
    assert q.backlog() == 0 and q.scheduled("a")
    q.add_after("a", 0.02)
    await asyncio.sleep(0.05)
    assert q.backlog() == 1 and not q.scheduled("a")
    assert await q.get() == "a"
    q.add_after("b", 10)
    q.add("b")  # an event before the timer
    assert await q.get() == "b" and not q.scheduled("b")  # the pass sets the next one
    q.add_after("c", 0)
    assert q.backlog() == 1
    q.add_after("d", 0.02)
    q.forget("d")
    await asyncio.sleep(0.05)
    assert not q.queued("d")


async def test_at_most_the_bound_run_at_once_in_order_and_the_waiting_are_counted() -> None:
    workers = SessionWorkers()
    release = asyncio.Event()
    entered: list[str] = []
    inside: set[str] = set()
    most = 0

    async def reconcile(uid: str) -> float | None:
        nonlocal most
        entered.append(uid)
        inside.add(uid)
        most = max(most, len(inside))
        await release.wait()
        inside.discard(uid)
        return None

    for i in range(6):
        workers.observe(f"u{i}", body(f"u{i}"))
    workers.start(2, reconcile)
    await asyncio.sleep(0.01)
    assert entered == ["u0", "u1"]
    assert REGISTRY.get_sample_value("berth_operator_reconciles_waiting") == 4
    release.set()
    await asyncio.sleep(0.01)
    assert most == 2
    assert entered == [f"u{i}" for i in range(6)]
    assert REGISTRY.get_sample_value("berth_operator_reconciles_waiting") == 0
    await workers.stop()


async def test_a_pass_is_queued_again_after_its_delay_and_dropped_when_done() -> None:
    workers = SessionWorkers()
    passes: list[str] = []
    answers = {"u1": [0.02, None], "u2": [None]}

    async def reconcile(uid: str) -> float | None:
        passes.append(uid)
        workers.state[uid] = "kept"
        return answers[uid].pop(0)

    workers.observe("u1", body("u1"))
    workers.observe("u2", body("u2"))
    workers.start(1, reconcile)
    await asyncio.sleep(0.1)
    assert passes == ["u1", "u2", "u1"]
    assert workers.state == {}  # None: nothing kept, no timer
    assert not workers.queue.scheduled("u1")
    assert set(workers.bodies) == {"u1", "u2"}  # the watch still shows them
    workers.gone("u1")
    assert set(workers.bodies) == {"u2"}
    workers.wake("u1")  # unknown: not queued
    assert not workers.queue.queued("u1")
    await workers.stop()


async def test_a_failing_reconcile_keeps_its_worker_and_is_retried() -> None:
    workers = SessionWorkers()
    calls = 0

    async def reconcile(uid: str) -> float | None:
        nonlocal calls
        calls += 1
        if calls == 1:
            raise RuntimeError("boom")
        return None

    workers.observe("u1", body("u1"))
    workers.start(1, reconcile)
    await asyncio.sleep(0.01)
    assert calls == 1 and workers.queue.scheduled("u1")  # retried later
    workers.wake("u1")
    await asyncio.sleep(0.01)
    assert calls == 2
    await workers.stop()


async def test_stop_cancels_idle_workers_and_gives_a_pass_in_progress_its_grace() -> None:
    workers = SessionWorkers()
    finished: list[str] = []

    async def reconcile(uid: str) -> float | None:
        await asyncio.sleep(0.05 if uid == "quick" else 10)
        finished.append(uid)
        return 1.0

    workers.observe("quick", body("quick"))
    workers.start(3, reconcile)
    await asyncio.sleep(0.01)
    await workers.stop(grace_seconds=1)
    assert finished == ["quick"]
    workers.observe("slow", body("slow"))
    workers.start(1, reconcile)
    await asyncio.sleep(0.01)
    async with asyncio.timeout(1):
        await workers.stop(grace_seconds=0.05)  # cancelled after its grace
    assert finished == ["quick"]
    assert not workers.started


def test_the_stored_object_leaves_out_managed_fields_and_copies_nothing_else() -> None:
    spec = {"prompt": "p"}
    full = {"metadata": {"uid": "u", "managedFields": [{"manager": "kopf"}]}, "spec": spec}
    kept = slim(full)
    assert kept["metadata"] == {"uid": "u"}
    assert kept["spec"] is spec
    assert "managedFields" in full["metadata"]  # the event's object is left as it was
    assert slim({"spec": spec}) == {"spec": spec}


async def test_the_watch_replaces_the_stored_object_and_queues_it_once() -> None:
    workers = SessionWorkers()
    workers.observe("u1", body("u1", resourceVersion="1"))
    workers.observe("u1", body("u1", resourceVersion="2"))
    assert workers.bodies["u1"]["metadata"]["resourceVersion"] == "2"
    assert workers.queue.backlog() == 1


def _ctx() -> OperatorContext:
    return OperatorContext(settings=OperatorSettings(), kube=None, runtime=None)  # type: ignore[arg-type]


async def test_an_unknown_session_needs_no_pass() -> None:
    assert await agentsession.reconcile_queued(_ctx(), "nobody") is None


def test_kopf_adds_its_finalizer_only_to_a_placed_session_whose_store_is_to_go() -> None:
    """The delete handler's filter: a session whose store stays needs no finalizer (garbage
    collection removes what it owns), and kopf's finalizer PATCH never races a new session's
    first status write, which carries its first epoch."""
    handler_needed = agentsession.needs_delete_handler
    asked = {"berth.dev/delete-store": "True"}
    assert not handler_needed(status={}, annotations={})
    assert not handler_needed(status={"phase": "Pending", "epoch": 1}, annotations={})
    assert not handler_needed(status={"phase": "Running", "epoch": 3}, annotations={})
    assert not handler_needed(status={}, annotations=asked)  # its DELETED event cleans up
    assert not handler_needed(status={"phase": "Pending", "epoch": 0}, annotations=asked)
    assert handler_needed(status={"phase": "Pending", "epoch": 1}, annotations=asked)
    off = {"berth.dev/delete-store": "false"}
    assert not handler_needed(status={"phase": "Pending", "epoch": 1}, annotations=off)
    handler = next(
        h
        for h in KOPF_REGISTRY._changing.get_all_handlers()  # kopf's registry of changing handlers
        if h.fn is agentsession.agentsession_delete
    )
    assert handler.when is agentsession.needs_delete_handler and handler.requires_finalizer


async def test_wake_session_queues_sessions_and_wake_sets_only_daemon_events() -> None:
    ctx = _ctx()
    ctx.sessions.observe("u1", body("u1"))
    await ctx.sessions.queue.get()
    ctx.sessions.queue.done("u1")
    pool = ctx.wakeup("pool:ns/p")
    ctx.wake("u1")  # not a daemon's key: nothing
    assert not ctx.sessions.queue.queued("u1")
    ctx.wake_session("u1")
    assert ctx.sessions.queue.queued("u1") and not pool.is_set()
    ctx.wake_session("pool:ns/p")  # not a session: nothing
    assert not pool.is_set()
    ctx.wake("pool:ns/p")
    assert pool.is_set()


class _Stopped:
    """Stands in for kopf's DaemonStopped flag: already set (the pool was deleted)."""

    def __bool__(self) -> bool:
        return True


async def test_a_stopped_warm_pool_daemon_drops_its_wakeup_event_only() -> None:
    from berth_operator.handlers import sessionwarmpool

    ctx = _ctx()
    memo = kopf.Memo(ctx=ctx)
    run = sessionwarmpool.warmpool_daemon
    await run(stopped=_Stopped(), name="p", namespace="ns", uid="u", memo=memo, warm_pods={})
    assert ctx.wakeups == {}  # nothing kept for a deleted pool
    # A pool made again under the same name has its own event: the old daemon leaves it alone.
    ctx.wakeup("swp:ns/p")
    newer = ctx.wakeups["swp:ns/p"]
    ctx.drop_wakeup("swp:ns/p", asyncio.Event())
    assert ctx.wakeups["swp:ns/p"] is newer
    ctx.drop_wakeup("swp:ns/p", newer)
    assert "swp:ns/p" not in ctx.wakeups


def deleted(annotations: dict[str, str], status: dict[str, Any]) -> dict[str, Any]:
    meta = {"uid": "u1", "name": "s1", "namespace": "ns", "annotations": annotations}
    return {"metadata": meta, "spec": {"prompt": "p", "model": "openai/m"}, "status": status}


def test_a_store_is_owed_its_cleanup_only_when_asked() -> None:
    asked = {"berth.dev/delete-store": "true"}
    assert agentsession.owes_store_cleanup(deleted(asked, {"epoch": 1}))
    assert agentsession.owes_store_cleanup(deleted(asked, {}))  # a store of its name may exist
    assert not agentsession.owes_store_cleanup(deleted({}, {"epoch": 1}))  # not asked
    off = {"berth.dev/delete-store": "false"}
    assert not agentsession.owes_store_cleanup(deleted(off, {"epoch": 2}))


class FakeKube:
    """The two calls of the late store cleanup: pods listed (``pods``: one answer per call,
    the last one repeated) and Jobs created."""

    def __init__(self, *pods: list[dict[str, Any]]) -> None:
        self.pods = list(pods)
        self.listed: list[str] = []
        self.jobs: list[dict[str, Any]] = []

    async def list_pods(self, namespace: str, selector: str) -> list[dict[str, Any]]:
        self.listed.append(f"{namespace} {selector}")
        return self.pods.pop(0) if len(self.pods) > 1 else self.pods[0]

    async def create_job(self, body: dict[str, Any]) -> None:
        self.jobs.append(body)


async def test_a_deleted_session_owed_a_cleanup_gets_its_job_once_its_pods_are_gone(
    monkeypatch: Any,
) -> None:
    monkeypatch.setattr(agentsession, "STORE_CLEANUP_POLL_SECONDS", 0.01)
    kube = FakeKube([{"metadata": {"name": "s1-1"}}], [])
    ctx = OperatorContext(settings=OperatorSettings(), kube=kube, runtime=None)  # type: ignore[arg-type]
    ctx.sessions.observe("u1", body("u1"))
    ctx.phases.set("u1", "Running")
    assert ctx.phases.count("Running") == 1
    gone = deleted({"berth.dev/delete-store": "true"}, {"epoch": 1})
    await agentsession.agentsession_event(type="DELETED", uid="u1", body=gone, memo=SimpleMemo(ctx))
    assert "u1" not in ctx.sessions.bodies and ctx.phases.count("Running") == 0  # all dropped
    await asyncio.wait_for(asyncio.gather(*ctx.background), timeout=5)
    assert kube.listed == ["ns berth.dev/session-uid=u1"] * 2  # waited for the pod to go
    [job] = kube.jobs
    assert job["kind"] == "Job" and job["metadata"]["name"].startswith("s1-store-cleanup-")
    assert not ctx.background


async def test_the_late_cleanup_gives_up_while_pods_stay(monkeypatch: Any) -> None:
    monkeypatch.setattr(agentsession, "STORE_CLEANUP_POLL_SECONDS", 0.01)
    monkeypatch.setattr(agentsession, "STORE_CLEANUP_WAIT_SECONDS", 0.05)
    kube = FakeKube([{"metadata": {"name": "s1-1"}}])
    ctx = OperatorContext(settings=OperatorSettings(), kube=kube, runtime=None)  # type: ignore[arg-type]
    gone = deleted({"berth.dev/delete-store": "true"}, {"epoch": 1})
    await agentsession.agentsession_event(type="DELETED", uid="u1", body=gone, memo=SimpleMemo(ctx))
    await asyncio.wait_for(asyncio.gather(*ctx.background), timeout=5)
    assert kube.jobs == [] and len(kube.listed) >= 2


class SimpleMemo:
    """kopf's memo as the handlers read it: ``memo.ctx``."""

    def __init__(self, ctx: OperatorContext) -> None:
        self.ctx = ctx
