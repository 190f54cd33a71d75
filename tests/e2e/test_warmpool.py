"""SessionWarmPool on the dev cluster's real nodes: adoption, refill, resume from a pool, a
template change, a pool on a node being drained, and the isolation of an adopted pod.

A warm pod mounts its namespace's ``workspaces/<ns>`` and ``store/<ns>`` (its session is not
known when it starts); the adopted runtime confines itself with Landlock to its own session's
directories, so its tools see no other session's workspace or store (the same probe as
tests/e2e/test_isolation.py, run by an adopted session).

Waits are bounded only so that a hang fails; no timing is asserted (bench/placement.py --warm
measures adoption).
"""

from __future__ import annotations

import json
import uuid
from typing import Any

import pytest

from tests.cluster import DevCluster
from tests.integration.operator.harness import (
    SECRET,
    apply_in,
    kget,
    klist,
    operator,
    scripted_model,
    session_manifest,
    wait,
)

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(600)]

LLM_REF = {"name": "llm-credentials", "key": "api-key"}


def pool_manifest(name: str, base_url: str, replicas: int, **template: Any) -> dict[str, Any]:
    """A SessionWarmPool whose template matches :func:`session_manifest` sessions."""
    return {
        "apiVersion": "berth.dev/v1alpha1",
        "kind": "SessionWarmPool",
        "metadata": {"name": name},
        "spec": {
            "replicas": replicas,
            "template": {"llm": {"baseURL": base_url, "apiKeySecretRef": LLM_REF}, **template},
        },
    }


def warm_pods(dc: DevCluster, ns: str, pool: str) -> list[dict[str, Any]]:
    return [
        p
        for p in klist(dc, ns, "pods", f"berth.dev/warm-pool={pool}")
        if not p["metadata"].get("deletionTimestamp")
    ]


def ready(pod: dict[str, Any]) -> bool:
    return any(
        c["type"] == "Ready" and c["status"] == "True"
        for c in (pod.get("status") or {}).get("conditions") or []
    )


def ready_warm(dc: DevCluster, ns: str, pool: str, n: int) -> list[dict[str, Any]] | None:
    pods = [p for p in warm_pods(dc, ns, pool) if ready(p)]
    return pods if len(pods) >= n else None


def status_of(dc: DevCluster, ns: str, name: str) -> dict[str, Any]:
    st: dict[str, Any] = (kget(dc, ns, "agentsession", name) or {}).get("status") or {}
    return st


def finished(dc: DevCluster, ns: str, name: str) -> dict[str, Any] | None:
    st = status_of(dc, ns, name)
    if st.get("phase") == "Failed":
        raise AssertionError(f"{name} failed: {st}")
    return st if st.get("phase") == "Succeeded" else None


def running(dc: DevCluster, ns: str, name: str) -> dict[str, Any] | None:
    st = status_of(dc, ns, name)
    return st if st.get("phase") == "Running" and st.get("podName") else None


def test_warm_pool_adoption_refill_and_isolation(dev_cluster: DevCluster) -> None:
    """A session naming a pool runs on one of its Ready warm pods (owner reference, labels, epoch
    and PDB as a created pod); the pool refills to its size; the adopted session's tools see
    nothing of another session's workspace or store."""
    dc = dev_cluster
    secret = uuid.uuid4().hex
    probe = (
        "for p in ../victim/secret.txt /var/lib/berth/workspaces/victim/secret.txt "
        "/var/lib/berth/store/{ns}/victim /var/lib/berth/store/{ns} /var/run/berth; "
        'do echo "== $p"; cat $p; ls $p; done > leak.txt 2>&1; '
        "echo x > ../victim/pwned 2>> leak.txt; echo done >> leak.txt"
    )
    with dc.namespace("warm") as ns:
        script = {
            "turns": [
                {"tool_calls": [{"name": "bash", "arguments": {"command": probe.format(ns=ns)}}]},
                {
                    "tool_calls": [
                        {
                            "name": "read",
                            "arguments": {
                                "file_path": "/var/lib/berth/workspaces/victim/secret.txt"
                            },
                        }
                    ]
                },
                {"text": "probed"},
            ],
            "cursor": "history",
            "on_exhausted": "repeat_last",
        }
        claim = dc.claim_dir(ns)
        victim_ws = dc.make_dirs(claim / "workspaces" / ns / "victim")
        (victim_ws / "secret.txt").write_text(secret)
        victim_store = dc.make_dirs(claim / "store" / ns / "victim")
        (victim_store / "state.json").write_text(secret)
        with scripted_model(script) as llm, operator(dc, ns) as op:
            apply_in(dc, ns, [SECRET, pool_manifest("pool", llm.base_url, 2)])
            before = wait("2 Ready warm pods", lambda: ready_warm(dc, ns, "pool", 2), cap=240)
            warm_names = {p["metadata"]["name"] for p in before}
            pool = wait(
                "pool status ready 2",
                lambda: (
                    (o := kget(dc, ns, "sessionwarmpool", "pool"))
                    and (o.get("status") or {}).get("readyReplicas") == 2
                    and o
                ),
            )
            assert pool["status"]["selector"] == "berth.dev/warm-pool=pool"

            s = session_manifest("adopted", llm.base_url, "probe", warmPoolRef={"name": "pool"})
            apply_in(dc, ns, [s])
            st = wait("adopted Succeeded", lambda: finished(dc, ns, "adopted"), cap=240)
            run = st["runs"][0]
            assert run["podName"] in warm_names, (run, warm_names)
            assert st["epoch"] == 1
            pod = kget(dc, ns, "pod", run["podName"])
            assert pod is not None
            meta = pod["metadata"]
            session_uid = kget(dc, ns, "agentsession", "adopted")["metadata"]["uid"]  # type: ignore[index]
            assert meta["labels"]["berth.dev/session-uid"] == session_uid
            assert meta["labels"]["berth.dev/epoch"] == "1"
            assert "berth.dev/warm-pool" not in meta["labels"]
            assert meta["annotations"]["berth.dev/adopted-from-pool"] == "pool"
            assert [o["kind"] for o in meta["ownerReferences"]] == ["AgentSession"]
            assert meta["ownerReferences"][0]["uid"] == session_uid
            # the namespace's session budget covers the adopted pod as a created one
            pdb = kget(dc, ns, "pdb", "berth-sessions")
            assert pdb is not None
            wanted = pdb["spec"]["selector"]["matchLabels"]
            assert wanted.items() <= meta["labels"].items(), (wanted, meta["labels"])

            # the pool refilled: two Ready warm pods again, the adopted one not among them
            after = wait("refill to 2 Ready", lambda: ready_warm(dc, ns, "pool", 2), cap=240)
            assert run["podName"] not in {p["metadata"]["name"] for p in after}
            assert len(warm_pods(dc, ns, "pool")) == 2
            assert 'berth_operator_warm_adoptions_total{outcome="adopted"} 1.0' in op.metrics()

            # isolation of the adopted session
            leak = (claim / "workspaces" / ns / "adopted" / "leak.txt").read_text()
            assert secret not in leak, leak
            assert "done" in leak, leak
            assert not (victim_ws / "pwned").exists()
            outputs = [
                str(m.get("content", ""))
                for req in llm.requests
                for m in req["messages"]
                if m.get("role") == "tool"
            ]
            assert outputs and all(secret not in o for o in outputs), outputs
            assert st["result"]["text"] == "probed"


def test_warm_pool_template_change_replaces_waiting_pods_only(dev_cluster: DevCluster) -> None:
    """Changing the template replaces the waiting pods; a pod adopted before keeps running."""
    dc = dev_cluster
    script = {"turns": [{"text": "idle"}], "on_exhausted": "repeat_last"}
    with (
        dc.namespace("warm-t") as ns,
        scripted_model(script) as llm,
        operator(dc, ns),
    ):
        apply_in(dc, ns, [SECRET, pool_manifest("pool", llm.base_url, 1)])
        wait("1 Ready warm pod", lambda: ready_warm(dc, ns, "pool", 1), cap=240)
        s = session_manifest(
            "kept", llm.base_url, "wait", keepAlive=True, warmPoolRef={"name": "pool"}
        )
        apply_in(dc, ns, [s])
        st = wait("kept Running", lambda: running(dc, ns, "kept"), cap=240)
        adopted = kget(dc, ns, "pod", st["podName"])
        assert adopted is not None
        assert adopted["metadata"]["annotations"].get("berth.dev/adopted-from-pool") == "pool"
        old_hash = adopted["metadata"]["labels"]["berth.dev/warm-template"]

        dc.kubectl(
            "-n",
            ns,
            "patch",
            "sessionwarmpool",
            "pool",
            "--type=merge",
            "-p",
            json.dumps({"spec": {"template": {"llm": {"timeoutSeconds": 30}}}}),
        )

        def replaced() -> list[dict[str, Any]] | None:
            pods = warm_pods(dc, ns, "pool")
            hashes = {p["metadata"]["labels"]["berth.dev/warm-template"] for p in pods}
            ok = len(pods) == 1 and old_hash not in hashes and all(ready(p) for p in pods)
            return pods if ok else None

        wait("the waiting pod replaced by one of the new template", replaced, cap=240)
        pool = kget(dc, ns, "sessionwarmpool", "pool")
        assert pool is not None and pool["status"]["templateHash"] != old_hash
        still = kget(dc, ns, "pod", st["podName"])
        assert still is not None
        assert still["metadata"]["uid"] == adopted["metadata"]["uid"]
        assert not still["metadata"].get("deletionTimestamp")
        assert running(dc, ns, "kept") is not None

        # a session whose template differs from the pool's is not adopted: its pod is created
        other = session_manifest(
            "cold", llm.base_url, "wait", warmPoolRef={"name": "pool"}, image=dc.image
        )
        other["spec"]["llm"]["timeoutSeconds"] = 31
        apply_in(dc, ns, [other])
        cold = wait("cold Succeeded", lambda: finished(dc, ns, "cold"), cap=240)
        assert cold["runs"][0]["podName"] == "cold-e1"


def test_warm_pool_resume_from_pool(dev_cluster: DevCluster) -> None:
    """After passivation (spec.suspend, then resumed) the replacement is an adopted warm pod
    and the run is resumed on it."""
    dc = dev_cluster
    script = {
        "turns": [
            {"tool_calls": [{"name": "bash", "arguments": {"command": "echo one >> steps.log"}}]},
            {"text": "first", "delay_ms": 0},
        ],
        "cursor": "history",
        "on_exhausted": "repeat_last",
    }
    with (
        dc.namespace("warm-r") as ns,
        scripted_model(script) as llm,
        operator(dc, ns),
    ):
        apply_in(dc, ns, [SECRET, pool_manifest("pool", llm.base_url, 2)])
        wait("2 Ready warm pods", lambda: ready_warm(dc, ns, "pool", 2), cap=240)
        s = session_manifest(
            "resumed", llm.base_url, "wait", keepAlive=True, warmPoolRef={"name": "pool"}
        )
        apply_in(dc, ns, [s])
        first = wait("resumed Running", lambda: running(dc, ns, "resumed"), cap=240)
        assert first["podName"] != "resumed-e1"
        wait("refill to 2 Ready", lambda: ready_warm(dc, ns, "pool", 2), cap=240)
        dc.kubectl(
            "-n",
            ns,
            "patch",
            "agentsession",
            "resumed",
            "--type=merge",
            "-p",
            '{"spec": {"suspend": true}}',
        )
        wait(
            "resumed Passivated",
            lambda: status_of(dc, ns, "resumed").get("phase") == "Passivated",
            cap=240,
        )
        warm_names = {p["metadata"]["name"] for p in warm_pods(dc, ns, "pool")}
        dc.kubectl(
            "-n",
            ns,
            "patch",
            "agentsession",
            "resumed",
            "--type=merge",
            "-p",
            '{"spec": {"suspend": false}}',
        )
        second = wait(
            "resumed Running again on epoch 2",
            lambda: (st := running(dc, ns, "resumed")) and (st.get("epoch") or 0) >= 2 and st,
            cap=240,
        )
        assert second["podName"] in warm_names, (second["podName"], warm_names)
        pod = kget(dc, ns, "pod", second["podName"])
        assert pod is not None
        assert pod["metadata"]["labels"]["berth.dev/epoch"] == str(second["epoch"])
        assert pod["metadata"]["annotations"]["berth.dev/adopted-from-pool"] == "pool"


def test_warm_pool_on_a_draining_node(dev_cluster: DevCluster) -> None:
    """Warm pods on a node being drained (cordoned) are never adopted: they are deleted and the
    pool refills on the other node; a session created meanwhile runs on the other node."""
    from tests.e2e.passivation_support import private_nodes

    dc = dev_cluster
    script = {"turns": [{"text": "done"}], "on_exhausted": "repeat_last"}
    placement = {"nodeSelector": {"berth.dev/dev-node": "real"}}
    with (
        private_nodes(dc) as nodes,
        dc.namespace("warm-d") as ns,
        scripted_model(script) as llm,
        operator(dc, ns),
    ):
        apply_in(dc, ns, [SECRET, pool_manifest("pool", llm.base_url, 2, placement=placement)])
        pods = wait("2 Ready warm pods", lambda: ready_warm(dc, ns, "pool", 2), cap=240)
        drained = pods[0]["spec"]["nodeName"]
        other = nodes.b if drained == nodes.a else nodes.a
        on_drained = {p["metadata"]["name"] for p in pods if p["spec"]["nodeName"] == drained}
        dc.kubectl("cordon", drained)
        try:

            def moved() -> list[dict[str, Any]] | None:
                now = warm_pods(dc, ns, "pool")
                names = {p["metadata"]["name"] for p in now}
                ok = (
                    not (names & on_drained)
                    and len(now) == 2
                    and all(ready(p) and p["spec"]["nodeName"] == other for p in now)
                )
                return now if ok else None

            wait("the pool moved off the cordoned node", moved, cap=240)
            s = session_manifest(
                "away", llm.base_url, "go", warmPoolRef={"name": "pool"}, placement=placement
            )
            apply_in(dc, ns, [s])
            st = wait("away Succeeded", lambda: finished(dc, ns, "away"), cap=240)
            run = st["runs"][0]
            assert run["nodeName"] == other, run
            assert run["podName"] not in on_drained
        finally:
            dc.kubectl("uncordon", drained, check=False)
