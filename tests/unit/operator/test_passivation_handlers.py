"""The pods/eviction webhook handler and the node handlers, called directly with plain mappings
in place of kopf's indices (kopf.Index is a read-only mapping of key → collection)."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import kopf
import pytest
from berth_operator.handlers import nodes, webhook
from berth_operator.handlers.context import OperatorContext
from berth_operator.reconcile.passivation import Trigger
from berth_operator.settings import OperatorSettings

from tests.unit.operator.fixtures import make_pod


def ctx() -> OperatorContext:
    return OperatorContext(settings=OperatorSettings(), kube=None, runtime=None)  # type: ignore[arg-type]


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


async def test_eviction_of_a_running_session_pod_is_denied_429_and_recorded() -> None:
    c = ctx()
    event = c.wakeup("uid-1")
    with pytest.raises(kopf.AdmissionError) as err:
        await call(c, "demo-e1")
    assert err.value.code == 429
    assert "passivating" in str(err.value)
    assert c.evictions == {"uid-1": {"demo-e1"}}
    assert event.is_set()


async def test_dry_run_is_denied_without_side_effects() -> None:
    c = ctx()
    with pytest.raises(kopf.AdmissionError):
        await call(c, "demo-e1", dryrun=True)
    assert c.evictions == {}


@pytest.mark.parametrize(("pod", "terminal"), [("other-pod", False), ("demo-e1", True)])
async def test_foreign_and_finished_pods_are_allowed(pod: str, terminal: bool) -> None:
    c = ctx()
    await call(c, pod, terminal=terminal)
    assert c.evictions == {}


async def test_node_index_and_wakeups() -> None:
    body: Any = {"spec": {"unschedulable": True}, "status": {}}
    index = await nodes.node_disruptions(name="proc-a", body=body)
    assert list(index) == ["proc-a"] and index["proc-a"].reason == "node_drain"
    assert await nodes.node_disruptions(name="proc-b", body={"spec": {}, "status": {}}) == {}
    c = ctx()
    woken = c.wakeup("uid-1")
    other = c.wakeup("uid-2")
    on_node = {"proc-a": [nodes.PodOnNode("ns", "demo-e1", "uid-1")]}
    await nodes.node_event(
        name="proc-a",
        memo=SimpleNamespace(ctx=c),  # type: ignore[arg-type]
        node_disruptions={"proc-a": [Trigger("node_drain", "cordoned", "proc-a")]},
        session_pods_on_node=on_node,
    )
    assert woken.is_set() and not other.is_set()
    woken.clear()
    await nodes.node_event(
        name="proc-a",
        memo=SimpleNamespace(ctx=c),  # type: ignore[arg-type]
        node_disruptions={},
        session_pods_on_node=on_node,
    )
    assert not woken.is_set()
