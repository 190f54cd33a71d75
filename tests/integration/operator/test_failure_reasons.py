"""Every pod failure a user must fix is named where they look first: the REASON column of
``kubectl get ags`` (Ready's reason), ``kubectl describe`` (the kubelet's or scheduler's
message) and a Warning Event on the AgentSession. Real control plane, real nodes; the image
pull case is in test_sessions.py.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest

from tests.cluster import DevCluster
from tests.integration.operator.harness import (
    apply_in,
    condition,
    example_docs,
    kget,
    operator,
    wait,
)

pytestmark = pytest.mark.integration


def session_docs(change: Callable[[dict[str, Any]], None]) -> list[dict[str, Any]]:
    """examples/agentsession.yaml with ``change`` applied to the AgentSession's spec."""
    docs = example_docs("agentsession.yaml")
    for doc in docs:
        if doc.get("kind") == "AgentSession":
            change(doc["spec"])
    return docs


def ready_reason_becomes(dc: DevCluster, ns: str, reasons: set[str]) -> dict[str, Any]:
    """Wait until Ready's reason is one of ``reasons``; the AgentSession then."""

    def check() -> Any:
        obj = kget(dc, ns, "agentsession", "hello")
        ready = condition(obj, "Ready") if obj else None
        return obj if ready and ready["reason"] in reasons else None

    obj: dict[str, Any] = wait(f"Ready reason in {sorted(reasons)}", check)
    return obj


def reason_column(dc: DevCluster, ns: str) -> str:
    header, row = dc.kubectl("-n", ns, "get", "ags", "hello").stdout.splitlines()[:2]
    return row.split()[header.split().index("REASON")]


def session_events(dc: DevCluster, ns: str) -> list[dict[str, Any]]:
    items = json.loads(dc.kubectl("-n", ns, "get", "events", "-o", "json").stdout)["items"]
    return [e for e in items if e["involvedObject"]["kind"] == "AgentSession"]


def test_an_unschedulable_session_says_why_the_scheduler_cannot_place_it(
    dev_cluster: DevCluster,
) -> None:
    dc = dev_cluster

    def nowhere(spec: dict[str, Any]) -> None:
        spec["placement"] = {"nodeSelector": {"berth.dev/test-no-such-node": "true"}}

    with dc.namespace("unsched") as ns, operator(dc, ns):
        apply_in(dc, ns, session_docs(nowhere))
        obj = ready_reason_becomes(dc, ns, {"Unschedulable"})
        ready = condition(obj, "Ready")
        assert ready is not None and "node" in ready["message"]  # the scheduler's own words
        assert obj["status"]["phase"] == "Pending"
        assert reason_column(dc, ns) == "Unschedulable"
        described = dc.kubectl("-n", ns, "describe", "agentsession", "hello").stdout
        assert "Unschedulable" in described
        wait(
            "an Unschedulable Event",
            lambda: any(
                e["reason"] == "Unschedulable" and e["type"] == "Warning"
                for e in session_events(dc, ns)
            ),
        )


def test_an_oom_killed_session_pod_is_named_and_replaced(dev_cluster: DevCluster) -> None:
    dc = dev_cluster

    def tiny(spec: dict[str, Any]) -> None:
        spec["placement"] = {
            "resources": {"requests": {"memory": "24Mi"}, "limits": {"memory": "24Mi"}}
        }

    with dc.namespace("oom") as ns, operator(dc, ns):
        apply_in(dc, ns, session_docs(tiny))
        obj = ready_reason_becomes(dc, ns, {"OOMKilled"})
        ready = condition(obj, "Ready")
        assert ready is not None and "(OOMKilled)" in ready["message"]
        degraded = condition(obj, "Degraded")
        assert degraded is not None and degraded["reason"] == "OOMKilled"
        assert obj["status"]["phase"] in ("Pending", "Resuming", "Failed")  # never Running
        assert reason_column(dc, ns) == "OOMKilled"
        assert "OOMKilled" in dc.kubectl("-n", ns, "describe", "agentsession", "hello").stdout
        assert any(
            e["reason"] == "OOMKilled" and e["type"] == "Warning" for e in session_events(dc, ns)
        )


def test_a_missing_llm_secret_is_named_before_any_pod_is_placed(dev_cluster: DevCluster) -> None:
    dc = dev_cluster

    def other_secret(spec: dict[str, Any]) -> None:
        spec["llm"]["apiKeySecretRef"] = {"name": "no-such-secret", "key": "api-key"}

    with dc.namespace("nosecret") as ns, operator(dc, ns):
        apply_in(dc, ns, session_docs(other_secret))
        obj = ready_reason_becomes(dc, ns, {"SecretNotFound"})
        ready = condition(obj, "Ready")
        assert ready is not None and "no-such-secret" in ready["message"]
        assert reason_column(dc, ns) == "SecretNotFound"
        assert not obj["status"].get("podName")
        pods = dc.kubectl("-n", ns, "get", "pods", "-o", "name").stdout.split()
        assert not [p for p in pods if "hello" in p]
        wait(
            "a SecretNotFound Event",
            lambda: any(e["reason"] == "SecretNotFound" for e in session_events(dc, ns)),
        )


def test_a_refused_pod_create_is_named_and_retried_at_the_same_epoch(
    dev_cluster: DevCluster,
) -> None:
    """A ResourceQuota allowing no long-running pods: the apiserver refuses the session's pod.
    The session says so (Ready's reason ``PodCreateFailed`` with the apiserver's words, a Warning
    Event) and keeps its epoch while the operator retries with backoff; once the quota goes, the
    same epoch's pod is created. (Scoped ``NotTerminating``: the claim's set-up pod, bounded by
    ``activeDeadlineSeconds``, still runs, as it would under a quota for long-running pods.)"""
    dc = dev_cluster
    quota = {
        "apiVersion": "v1",
        "kind": "ResourceQuota",
        "metadata": {"name": "no-pods"},
        "spec": {"hard": {"pods": "0"}, "scopes": ["NotTerminating"]},
    }
    with dc.namespace("quota") as ns, operator(dc, ns) as op:
        apply_in(dc, ns, [quota])
        apply_in(dc, ns, session_docs(lambda spec: None))
        obj = ready_reason_becomes(dc, ns, {"PodCreateFailed"})
        ready = condition(obj, "Ready")
        assert ready is not None and "quota" in ready["message"]
        assert reason_column(dc, ns) == "PodCreateFailed"
        wait(
            "a PodCreateFailed Event",
            lambda: any(
                e["reason"] == "PodCreateFailed" and e["type"] == "Warning"
                for e in session_events(dc, ns)
            ),
        )
        wait("a third refused attempt", lambda: "not created (attempt 3)" in op.logs())
        held = kget(dc, ns, "agentsession", "hello")
        assert held is not None and held["status"]["epoch"] == 1  # no epoch per attempt
        dc.kubectl("-n", ns, "delete", "resourcequota", "no-pods")
        placed = wait(
            "the pod of epoch 1 created",
            lambda: dc.kubectl("-n", ns, "get", "pod", "hello-e1", check=False).returncode == 0,
            cap=120,
        )
        assert placed
        obj = kget(dc, ns, "agentsession", "hello")
        assert obj is not None and obj["status"]["epoch"] == 1


def test_a_crash_looping_worker_pool_says_so(dev_cluster: DevCluster) -> None:
    """A LaneWorker whose pods are OOM-killed over and over: Ready=False with the kubelet's
    CrashLoopBackOff in ``kubectl get lw`` and a Warning Event on the LaneWorker."""
    dc = dev_cluster
    pool = {
        "apiVersion": "berth.dev/v1alpha1",
        "kind": "LaneWorker",
        "metadata": {"name": "exec"},
        "spec": {
            "lane": "execute",
            "replicas": 1,
            "template": {
                "resources": {"requests": {"memory": "24Mi"}, "limits": {"memory": "24Mi"}}
            },
        },
    }
    with dc.namespace("crashpool") as ns, operator(dc, ns):
        apply_in(dc, ns, [pool])

        def looping() -> Any:
            obj = kget(dc, ns, "laneworker", "exec")
            ready = condition(obj, "Ready") if obj else None
            return ready if ready and ready["reason"] == "CrashLoopBackOff" else None

        ready = wait("Ready reason CrashLoopBackOff", looping, cap=300)
        assert ready["status"] == "False" and "0/1 pods ready; pod exec-" in ready["message"]
        header, row = dc.kubectl("-n", ns, "get", "lw", "exec").stdout.splitlines()[:2]
        columns = dict(zip(header.split(), row.split(), strict=False))
        assert (columns["READY"], columns["REASON"]) == ("False", "CrashLoopBackOff")
        items = json.loads(dc.kubectl("-n", ns, "get", "events", "-o", "json").stdout)["items"]
        assert any(
            e["reason"] == "CrashLoopBackOff" and e["involvedObject"]["kind"] == "LaneWorker"
            for e in items
        )
