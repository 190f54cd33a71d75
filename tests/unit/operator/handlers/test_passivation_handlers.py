"""The pods/eviction webhook handler and the node handlers, called directly with plain mappings
in place of kopf's indices (kopf.Index is a read-only mapping of key → collection)."""

from __future__ import annotations

from datetime import UTC, datetime
from types import SimpleNamespace
from typing import Any

import kopf
import pytest
from berth_operator.api.constants import COMPONENT_SESSION, LABEL_COMPONENT, LABEL_SESSION_UID
from berth_operator.errors import KubeError
from berth_operator.handlers import nodes, webhook
from berth_operator.handlers.context import OperatorContext
from berth_operator.reconcile.passivation import Trigger
from berth_operator.settings import OperatorSettings, ScopeSettings

from tests.unit.operator.fixtures import make_pod


class Pods:
    """A stand-in for the operator's KubeClient that serves GET pod from a dict and counts reads;
    ``fail`` makes every read raise KubeError."""

    def __init__(self, pods: dict[tuple[str, str], dict[str, Any]] | None = None) -> None:
        self.pods = pods or {}
        self.reads: list[tuple[str, str]] = []
        self.deleted: list[tuple[str, str, str]] = []
        self.fail = False

    async def delete_pod(self, namespace: str, name: str, *, uid: str = "") -> None:
        self.deleted.append((namespace, name, uid))
        if self.fail:
            raise KubeError("delete pod: 503 Service Unavailable")

    async def get_pod(self, namespace: str, name: str) -> dict[str, Any] | None:
        self.reads.append((namespace, name))
        if self.fail:
            raise KubeError("get pod: 503 Service Unavailable")
        return self.pods.get((namespace, name))


def ctx(kube: Pods | None = None, namespaces: list[str] | None = None) -> OperatorContext:
    settings = OperatorSettings(scope=ScopeSettings(namespaces=namespaces or []))
    return OperatorContext(settings=settings, kube=kube or Pods(), runtime=None)  # type: ignore[arg-type]


def deleting_body() -> dict[str, Any]:
    body = session_pod_body()
    body["metadata"]["deletionTimestamp"] = "2026-01-01T12:00:00Z"
    return body


def session_pod_body(phase: str = "Running", component: str = COMPONENT_SESSION) -> dict[str, Any]:
    body = make_pod(1).on("proc-a").running().obj()
    body["metadata"]["labels"].update({LABEL_SESSION_UID: "uid-9", LABEL_COMPONENT: component})
    body["status"]["phase"] = phase
    return body


async def call(
    c: OperatorContext, pod: str, *, dryrun: bool = False, terminal: bool = False
) -> None:
    observed = make_pod(1).on("proc-a").running()
    if terminal:
        observed = observed.terminated(0, {"outcome": "completed"})
    await webhook.pod_eviction(
        name=pod,
        namespace="ns",
        dryrun=dryrun,
        memo=SimpleNamespace(ctx=c),  # type: ignore[arg-type]
        session_pods_by_name={("ns", "demo-e1"): ["uid-1"]},
        session_pods={"uid-1": [observed.observed()]},
    )


def known(c: OperatorContext, uid: str) -> None:
    """Session ``uid`` as the AgentSession watch has shown it (served, so not queued)."""
    c.sessions.bodies[uid] = {"metadata": {"uid": uid}}


async def queued(c: OperatorContext) -> list[str]:
    """The sessions queued since the last call (served and done, as by a worker)."""
    out = []
    while c.sessions.queue.backlog():
        key = await c.sessions.queue.get()
        c.sessions.queue.done(key)
        out.append(key)
    return out


async def test_eviction_of_a_running_session_pod_is_denied_429_and_recorded() -> None:
    c = ctx()
    known(c, "uid-1")
    with pytest.raises(kopf.AdmissionError) as err:
        await call(c, "demo-e1")
    assert err.value.code == 429
    assert "passivating" in str(err.value)
    assert c.memory.evicting() == {"uid-1": {"demo-e1"}}
    assert c.sessions.queue.queued("uid-1")


async def test_dry_run_is_denied_without_side_effects() -> None:
    c = ctx()
    with pytest.raises(kopf.AdmissionError):
        await call(c, "demo-e1", dryrun=True)
    assert c.memory.evicting() == {}


@pytest.mark.parametrize(("pod", "terminal"), [("other-pod", False), ("demo-e1", True)])
async def test_foreign_and_finished_pods_are_allowed(pod: str, terminal: bool) -> None:
    kube = Pods()
    c = ctx(kube)
    await call(c, pod, terminal=terminal)
    assert c.memory.evicting() == {}
    assert kube.deleted == []  # a terminal pod passes the Eviction API's budget check as is


async def evict(c: OperatorContext, pod: Any, dryrun: bool = False) -> None:
    """An eviction of ns/demo-e1, session uid-1's pod as ``pod`` (a PodBuilder) shows it."""
    await webhook.pod_eviction(
        name="demo-e1",
        namespace="ns",
        dryrun=dryrun,
        memo=SimpleNamespace(ctx=c),  # type: ignore[arg-type]
        session_pods_by_name={("ns", "demo-e1"): ["uid-1"]},
        session_pods={"uid-1": [pod.observed()]},
    )


async def test_a_dry_run_deletes_nothing() -> None:
    """A done pod's eviction, dry run: allowed, and the pod is not deleted."""
    running = make_pod(1).on("proc-a").running()
    kube = Pods()
    c = ctx(kube)
    c.memory("uid-1").outcome = (
        running.observed().uid,
        '{"outcome": "passivated"}',
        datetime.now(UTC),
    )
    await evict(c, running, dryrun=True)
    assert kube.deleted == [] and c.memory.evicting() == {}


async def test_a_pod_being_deleted_or_that_reported_its_end_is_allowed() -> None:
    """A passivated pod the operator is deleting, or whose process reported its end before the
    kubelet did: nothing left to protect, and a denial would hold ``kubectl drain`` back until
    its next retry. A pod whose end another pod of the session reported is still denied."""
    running = make_pod(1).on("proc-a").running()
    deleting = make_pod(1).on("proc-a").running().deleting()
    kube = Pods()
    c = ctx(kube)
    await evict(c, deleting)
    assert kube.deleted == []  # being deleted already
    uid = running.observed().uid
    c.memory("uid-1").outcome = (uid, '{"outcome": "passivated"}', datetime.now(UTC))
    await evict(c, running)
    assert c.memory.evicting() == {}
    # Still Running to the apiserver: deleted before the answer, or the Eviction API would
    # check it against its PodDisruptionBudget and answer 429 with Retry-After: 10.
    assert kube.deleted == [("ns", "demo-e1", uid)]
    kube.fail = True  # a failed delete still allows: the budget decides
    await evict(c, running)
    c.memory("uid-1").outcome = ("another-pod-uid", '{"outcome": "passivated"}', datetime.now(UTC))
    with pytest.raises(kopf.AdmissionError):
        await evict(c, running)
    assert c.memory.evicting() == {"uid-1": {"demo-e1"}}
    assert len(kube.deleted) == 2


async def evict_unindexed(c: OperatorContext) -> None:
    """An eviction of pod ns/demo-e1 with both pod indices still empty (a new leader)."""
    await webhook.pod_eviction(
        name="demo-e1",
        namespace="ns",
        dryrun=False,
        memo=SimpleNamespace(ctx=c),  # type: ignore[arg-type]
        session_pods_by_name={},
        session_pods={},
    )


async def test_a_session_pod_missing_from_the_index_is_read_and_denied() -> None:
    """A new leader serves admission before its pod watch has listed: the pod is read from the
    apiserver and an unfinished session pod is still denied and passivated."""
    kube = Pods({("ns", "demo-e1"): session_pod_body()})
    c = ctx(kube)
    known(c, "uid-9")
    with pytest.raises(kopf.AdmissionError) as err:
        await evict_unindexed(c)
    assert err.value.code == 429
    assert c.memory.evicting() == {"uid-9": {"demo-e1"}} and c.sessions.queue.queued("uid-9")
    assert kube.reads == [("ns", "demo-e1")]


@pytest.mark.parametrize(
    ("pod", "fail", "namespaces"),
    [
        (None, False, None),  # no such pod
        (session_pod_body(phase="Succeeded"), False, None),  # finished
        (deleting_body(), False, None),  # being deleted already
        (session_pod_body(component="lane-worker"), False, None),  # not a session pod
        (session_pod_body(), True, None),  # the read fails: allowed, as failurePolicy Ignore
        (session_pod_body(), False, ["other"]),  # a namespace this operator does not watch
    ],
)
async def test_a_pod_missing_from_the_index_is_allowed_unless_it_is_an_unfinished_session_pod(
    pod: dict[str, Any] | None, fail: bool, namespaces: list[str] | None
) -> None:
    kube = Pods({("ns", "demo-e1"): pod} if pod else {})
    kube.fail = fail
    c = ctx(kube, namespaces)
    await evict_unindexed(c)
    assert c.memory.evicting() == {}
    assert kube.reads == ([] if namespaces else [("ns", "demo-e1")])


async def test_node_index_and_wakeups() -> None:
    body: Any = {"spec": {"unschedulable": True}, "status": {}}
    index = await nodes.node_disruptions(name="proc-a", body=body)
    assert list(index) == ["proc-a"] and index["proc-a"].reason == "node_drain"
    assert await nodes.node_disruptions(name="proc-b", body={"spec": {}, "status": {}}) == {}
    c = ctx()
    known(c, "uid-1")
    known(c, "uid-2")
    on_node = {"proc-a": [nodes.PodOnNode("ns", "demo-e1", "uid-1")]}
    await nodes.node_event(
        name="proc-a",
        memo=SimpleNamespace(ctx=c),  # type: ignore[arg-type]
        node_disruptions={"proc-a": [Trigger("node_drain", "cordoned", "proc-a")]},
        session_pods_on_node=on_node,
    )
    assert await queued(c) == ["uid-1"]
    await nodes.node_event(
        name="proc-a",
        memo=SimpleNamespace(ctx=c),  # type: ignore[arg-type]
        node_disruptions={},
        session_pods_on_node=on_node,
    )
    assert await queued(c) == []
