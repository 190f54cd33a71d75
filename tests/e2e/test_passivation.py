"""Passivation before eviction, end to end (docs/architecture.md §8).

Real pieces: the control plane (kube-apiserver with admission, the disruption controller of
kube-controller-manager, the scheduler), ``kubectl drain`` and the Eviction API, ``berth-operator``
as a subprocess under its own ServiceAccount (config/rbac, plus config/rbac/webhook when its
pods/eviction webhook is on, served over HTTPS with openssl certificates), ``berth-session`` pods
run as processes by a private process node agent on two fresh nodes (see passivation_support), the
shared volume, and the scripted OpenAI-compatible model.

Asserted: drains complete, every session moves to the other node and finishes, each execute-lane
tool (a ``bash`` that appends ``step-<i>`` to the workspace) ran exactly once, the lineage shows the
passivation with its reason, evictions are answered 429 (by the webhook, or by the PDB when the
webhook is off), a runtime that ignores passivation is cut off at the deadline and resumed, and
suspend/resume keeps one lineage. Latencies are printed (and measured by bench/drain.py), never
asserted.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import threading
import time
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from tests.cluster import DevCluster
from tests.e2e.passivation_support import (
    PrivateNodes,
    apply,
    condition,
    delete_webhook_configurations,
    drain,
    evict,
    operator_env,
    pods,
    private_nodes,
    session_doc,
    status,
    step_script,
    steps,
    wait,
    webhook_env,
)
from tests.integration.operator.harness import SECRET, free_port, kget, operator, scripted_model

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(900)]

ROUNDS = 36
"""About 15 to 20 s of run: every session of a test must still be mid-run when its drain or eviction
starts, after all of them were seen running one by one (a busy machine slows that look)."""
HA_ROUNDS = 48
"""The failover test's run lasts ≈45 s: it must still be running after the first move, the
leader's death, the Lease changing hands and the webhook following (≈15-25 s), or the second
eviction finds a finished pod and is rightly allowed."""


@pytest.fixture(scope="module")
def nodes(dev_cluster: DevCluster) -> Iterator[PrivateNodes]:
    with private_nodes(dev_cluster) as n:
        yield n


@pytest.fixture
def clean_nodes(dev_cluster: DevCluster, nodes: PrivateNodes) -> Iterator[PrivateNodes]:
    """Both private nodes schedulable before and after each test; webhook configs removed."""
    for node in (nodes.a, nodes.b):
        dev_cluster.kubectl("uncordon", node)
    yield nodes
    for node in (nodes.a, nodes.b):
        dev_cluster.kubectl("uncordon", node, check=False)
    delete_webhook_configurations(dev_cluster, "berth-eviction-pz-")


def place_on_a(dc: DevCluster, ns: str, nodes: PrivateNodes, docs: list[dict[str, Any]]) -> None:
    """Create the sessions with B cordoned so they all start on A; wait until each is mid-run."""
    dc.kubectl("cordon", nodes.b)
    try:
        apply(dc, ns, docs)
        for doc in docs:
            name = doc["metadata"]["name"]
            try:
                wait(
                    f"{name} running on {nodes.a}",
                    lambda n=name: _running_on(dc, ns, n, nodes.a),
                    cap=240,
                )
            except AssertionError as exc:
                st = json.dumps(status(dc, ns, name), indent=1)[:4000]
                pod_list = dc.kubectl("-n", ns, "get", "pods", "-o", "wide").stdout
                raise AssertionError(f"{exc}\nstatus: {st}\npods:\n{pod_list}") from exc
    finally:
        dc.kubectl("uncordon", nodes.b)


def _running_on(dc: DevCluster, ns: str, name: str, node: str) -> bool:
    st = status(dc, ns, name)
    return (
        st.get("phase") == "Running"
        and st.get("nodeName") == node
        and ((st.get("checkpoint") or {}).get("turn") or 0) >= 1
    )


def finished(dc: DevCluster, ns: str, name: str) -> dict[str, Any] | None:
    st = status(dc, ns, name)
    if st.get("phase") == "Failed":
        raise AssertionError(f"{name} failed: {json.dumps(st)[:3000]}")
    return st if st.get("phase") == "Succeeded" else None


def passivated_runs(st: dict[str, Any]) -> list[dict[str, Any]]:
    return [r for r in st.get("runs") or [] if r.get("outcome") == "passivated"]


def events(dc: DevCluster, ns: str, name: str) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = json.loads(
        dc.kubectl(
            "-n",
            ns,
            "get",
            "events",
            "--field-selector",
            f"involvedObject.name={name}",
            "-o",
            "json",
        ).stdout
    )["items"]
    return out


def latency(st: dict[str, Any]) -> str:
    p = st.get("passivation") or {}

    def t(key: str) -> datetime | None:
        v = p.get(key)
        return datetime.fromisoformat(v.replace("Z", "+00:00")) if v else None

    req, done, res = t("requestedAt"), t("passivatedAt"), t("resumedAt")
    a = (done - req).total_seconds() if req and done else float("nan")
    b = (res - done).total_seconds() if done and res else float("nan")
    return f"passivation {a:.2f}s resume {b:.2f}s"


# ---------------------------------------------------------------------------------------------


def test_drain_moves_five_sessions_without_losing_work(
    dev_cluster: DevCluster, clean_nodes: PrivateNodes, tmp_path: Path
) -> None:
    dc, nodes = dev_cluster, clean_nodes
    with (
        dc.namespace("pz-drain") as ns,
        scripted_model(step_script(ROUNDS)) as srv,
        operator(dc, ns, **operator_env(**webhook_env(dc, ns, tmp_path / "certs"))) as op,
    ):
        apply(dc, ns, [SECRET])
        names = [f"drain-{i}" for i in range(5)]
        place_on_a(dc, ns, nodes, [session_doc(n, srv.base_url, nodes, 60) for n in names])

        res, seconds = drain(dc, nodes.a)
        print(f"\nkubectl drain {nodes.a}: rc={res.returncode} in {seconds:.1f}s")
        assert res.returncode == 0, res.stderr
        # how drain was told to wait (webhook 429 while passivating, or the PDB); whether it had
        # to retry at all depends on whether the sessions passivated before its first eviction
        print("drain retries:", res.stderr.count("will retry"))

        for name in names:
            st = wait(f"{name} Succeeded", lambda n=name: finished(dc, ns, n), cap=300)
            print(f"{name}: {latency(st)}")
            done = passivated_runs(st)
            assert len(done) == 1, st["runs"]
            assert "node_drain" in (done[0].get("reason") or ""), done[0]
            assert done[0]["nodeName"] == nodes.a
            last = st["runs"][-1]
            assert last["nodeName"] == nodes.b
            assert last["resumedFrom"] == done[0]["runId"]
            assert last["outcome"] == "completed"
            p = st["passivation"]
            assert (p["reason"], p["outcome"], p["nodeName"]) == (
                "node_drain",
                "passivated",
                nodes.a,
            )
            assert p["resumedRunId"] == last["runId"]
            assert (st.get("restarts") or 0) == 0
            assert st["result"]["text"] == "all steps done"
            # every execute-lane tool ran exactly once, none lost
            assert steps(nodes, ns, name) == [f"step-{i}" for i in range(1, ROUNDS + 1)]
            assert {"Passivating", "Passivated", "Resumed"} <= {
                e["reason"] for e in events(dc, ns, name)
            }
        metrics = op.metrics()
        assert (
            'berth_operator_passivations_total{outcome="passivated",reason="node_drain"} 5.0'
            in (metrics)
        )
        assert "berth_operator_resume_seconds_count" in metrics


def test_eviction_is_answered_429_and_the_session_moves(
    dev_cluster: DevCluster, clean_nodes: PrivateNodes, tmp_path: Path
) -> None:
    dc, nodes = dev_cluster, clean_nodes
    with (
        dc.namespace("pz-evict") as ns,
        scripted_model(step_script(ROUNDS)) as srv,
        operator(dc, ns, **operator_env(**webhook_env(dc, ns, tmp_path / "certs"))),
    ):
        apply(dc, ns, [SECRET])
        place_on_a(dc, ns, nodes, [session_doc("ev", srv.base_url, nodes, 60)])
        vwc = json.loads(
            dc.kubectl(
                "get", "validatingwebhookconfiguration", f"berth-eviction-{ns}", "-o", "json"
            ).stdout
        )
        hook = vwc["webhooks"][0]
        assert hook["failurePolicy"] == "Ignore"
        assert hook["rules"][0]["resources"] == ["pods/eviction"]
        assert hook["clientConfig"]["caBundle"]
        pdb = json.loads(dc.kubectl("-n", ns, "get", "pdb", "berth-sessions", "-o", "json").stdout)
        assert pdb["spec"]["minAvailable"] == 2**31 - 1

        pod = status(dc, ns, "ev")["podName"]
        res = evict(dc, ns, pod)
        assert res.returncode != 0
        assert "429 Too Many Requests" in res.stderr, res.stderr
        assert "is passivating" in res.stderr, res.stderr

        st = wait("passivation recorded", lambda: status(dc, ns, "ev").get("passivation"))
        assert st["reason"] == "eviction"
        # the evicting client retries until the pod is gone (404), as kubectl drain does
        wait(
            "old pod gone",
            lambda: (
                "NotFound" in evict(dc, ns, pod).stderr
                or not any(p["metadata"]["name"] == pod for p in pods(dc, ns, "ev"))
            ),
            cap=120,
            every=1,
        )
        final = wait("ev Succeeded", lambda: finished(dc, ns, "ev"), cap=300)
        print(f"\nev: {latency(final)}")
        done = passivated_runs(final)
        assert len(done) == 1 and "eviction" in (done[0].get("reason") or "")
        assert final["runs"][-1]["nodeName"] == nodes.b
        assert final["runs"][-1]["resumedFrom"] == done[0]["runId"]
        assert steps(nodes, ns, "ev") == [f"step-{i}" for i in range(1, ROUNDS + 1)]


def _hook_url(dc: DevCluster, ns: str) -> str:
    vwc = json.loads(
        dc.kubectl(
            "get", "validatingwebhookconfiguration", f"berth-eviction-{ns}", "-o", "json"
        ).stdout
    )
    # kopf creates the configuration empty, then patches its webhooks in.
    hooks = vwc.get("webhooks") or [{}]
    return str((hooks[0].get("clientConfig") or {}).get("url", ""))


def _session_state(dc: DevCluster, ns: str, name: str) -> str:
    """The session's phase, pod and conditions and its pods' phases, for a failure report."""
    st = status(dc, ns, name)
    conds = [(c.get("type"), c.get("status"), c.get("reason")) for c in st.get("conditions") or []]
    found = [
        (p["metadata"]["name"], (p.get("status") or {}).get("phase"), p["spec"].get("nodeName"))
        for p in pods(dc, ns, name)
    ]
    return f"session {st.get('phase')} pod {st.get('podName')} {conds}; pods {found}"


def _listening(port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(1)
        return s.connect_ex(("127.0.0.1", port)) == 0


def test_two_replicas_only_the_leader_serves_evictions(
    dev_cluster: DevCluster, clean_nodes: PrivateNodes, tmp_path: Path
) -> None:
    """Two operator replicas with the webhook on: the configuration points at the Lease holder,
    the standby serves nothing (its port is closed), an eviction is answered 429 by the leader;
    after the leader is SIGKILLed the standby takes the Lease, the configuration follows it and
    the next eviction is answered by it; the session moves twice and loses nothing."""
    dc, nodes = dev_cluster, clean_nodes
    with (
        dc.namespace("pz-ha") as ns,
        scripted_model(step_script(HA_ROUNDS, delay_ms=600)) as srv,
        operator(dc, ns, **operator_env(**webhook_env(dc, ns, tmp_path / "certs"))) as op,
    ):
        leader_port = int(op.extra["BERTH_WEBHOOK_PORT"])
        wait(
            "the first replica to lead and configure the webhook",
            lambda: _hook_url(dc, ns).startswith(f"https://127.0.0.1:{leader_port}/"),
            cap=60,
        )
        standby_port = free_port()
        op.start(BERTH_WEBHOOK_PORT=str(standby_port))
        apply(dc, ns, [SECRET])
        place_on_a(dc, ns, nodes, [session_doc("ha", srv.base_url, nodes, 60)])
        assert _hook_url(dc, ns).startswith(f"https://127.0.0.1:{leader_port}/")
        assert _listening(leader_port) and not _listening(standby_port)

        first = status(dc, ns, "ha")["podName"]
        res = evict(dc, ns, first)
        assert "429 Too Many Requests" in res.stderr and "is passivating" in res.stderr, res.stderr
        wait(
            "the session resumed on B",
            lambda: (
                (s := status(dc, ns, "ha")).get("podName") not in (None, first)
                and s.get("phase") == "Running"
            ),
            cap=180,
            every=1,
        )

        op.stop(op.procs[0], signal.SIGKILL)
        wait(
            "the configuration to follow the new leader",
            lambda: _hook_url(dc, ns).startswith(f"https://127.0.0.1:{standby_port}/"),
            cap=60,
        )
        second = status(dc, ns, "ha")["podName"]
        # The apiserver applies a changed webhook configuration asynchronously: for a moment it
        # may still call the old leader's closed port, and failurePolicy Ignore then admits. A
        # dry-run eviction (no side effects) shows when the new leader is the one asked.
        try:
            wait(
                "the apiserver to ask the new leader (a dry-run eviction denied)",
                lambda: "is passivating" in evict(dc, ns, second, dry_run=True).stderr,
                cap=60,
                every=1,
            )
        except AssertionError as exc:
            raise AssertionError(f"{exc}; {_session_state(dc, ns, 'ha')}") from None
        answers: list[str] = []  # what each attempt got, for the failure report

        def denied_by_the_new_leader() -> subprocess.CompletedProcess[str] | None:
            r = evict(dc, ns, second)
            answers.append(f"rc={r.returncode} {r.stderr.strip()[-300:]}")
            return r if r.returncode != 0 and "is passivating" in r.stderr else None

        try:
            res = wait(
                f"the new leader to answer an eviction of {second}",
                denied_by_the_new_leader,
                cap=60,
                every=1,
            )
        except AssertionError as exc:
            raise AssertionError(
                f"{exc}; first answers {answers[:3]}; last {answers[-2:]}"
            ) from None
        assert "429 Too Many Requests" in res.stderr
        final = wait("ha Succeeded", lambda: finished(dc, ns, "ha"), cap=300)
        done = passivated_runs(final)
        assert len(done) == 2 and all("eviction" in (d.get("reason") or "") for d in done)
        assert steps(nodes, ns, "ha") == [f"step-{i}" for i in range(1, HA_ROUNDS + 1)]


def test_without_the_webhook_the_pdb_keeps_drain_waiting(
    dev_cluster: DevCluster, clean_nodes: PrivateNodes
) -> None:
    dc, nodes = dev_cluster, clean_nodes
    # 5 s tools: passivation lets the running tool finish, so it outlasts the moment between
    # drain's cordon and its first eviction, and the budget is what drain meets
    with (
        dc.namespace("pz-pdb") as ns,
        scripted_model(step_script(8, sleep_s=5)) as srv,
        operator(dc, ns, **operator_env(BERTH_WEBHOOK_ENABLED="false")) as op,
    ):
        apply(dc, ns, [SECRET])
        names = ["pdb-0", "pdb-1"]
        place_on_a(dc, ns, nodes, [session_doc(n, srv.base_url, nodes, 60) for n in names])
        # no webhook: the PodDisruptionBudget itself answers the Eviction API with 429
        res = evict(dc, ns, status(dc, ns, "pdb-0")["podName"])
        assert res.returncode != 0 and "disruption budget" in res.stderr, res.stderr
        assert "429 Too Many Requests" in res.stderr, res.stderr

        # the operator down: drain waits on the namespace's budget and kills no session
        running = {n: status(dc, ns, n)["podName"] for n in names}
        op.stop_all()
        stalled, _ = drain(dc, nodes.a, 15)
        assert stalled.returncode != 0 and "disruption budget" in stalled.stderr, stalled.stderr
        for name, pod in running.items():
            assert kget(dc, ns, "pod", pod)["status"]["phase"] == "Running", name  # type: ignore[index]
        op.start()

        outcome: dict[str, Any] = {}

        def run_drain() -> None:
            outcome["res"], outcome["seconds"] = drain(dc, nodes.a)
            outcome["ended"] = time.time()

        thread = threading.Thread(target=run_drain)
        thread.start()
        thread.join(timeout=400)
        assert not thread.is_alive(), "kubectl drain hung"
        drained = outcome["res"]
        print(f"\nkubectl drain (PDB only): rc={drained.returncode} in {outcome['seconds']:.1f}s")
        assert drained.returncode == 0, drained.stderr
        # drain retried on the budget instead of killing the sessions
        assert "disruption budget" in drained.stderr, drained.stderr
        for name in names:
            st = wait(f"{name} Succeeded", lambda n=name: finished(dc, ns, n), cap=300)
            p = st["passivation"]
            assert (p["reason"], p["outcome"]) == ("node_drain", "passivated")
            passivated_at = datetime.fromisoformat(p["passivatedAt"].replace("Z", "+00:00"))
            assert passivated_at.timestamp() <= outcome["ended"]
            assert not any("PodEvicted" in (r.get("reason") or "") for r in st["runs"])
            assert st["runs"][-1]["nodeName"] == nodes.b
            assert steps(nodes, ns, name) == [f"step-{i}" for i in range(1, 9)]


def test_a_runtime_that_ignores_passivation_is_cut_off_at_the_deadline(
    dev_cluster: DevCluster, clean_nodes: PrivateNodes, tmp_path: Path
) -> None:
    dc, nodes = dev_cluster, clean_nodes
    rounds = 40
    with (
        dc.namespace("pz-ignore") as ns,
        scripted_model(step_script(rounds)) as srv,
        operator(dc, ns, **operator_env(**webhook_env(dc, ns, tmp_path / "certs"))),
    ):
        apply(dc, ns, [SECRET])
        place_on_a(dc, ns, nodes, [session_doc("ignore-1", srv.base_url, nodes, 3)])
        (pod,) = pods(dc, ns, "ignore-1")
        os.kill(dc.container_pid(pod), signal.SIGSTOP)  # wedged: takes connections, never answers
        res, seconds = drain(dc, nodes.a)
        print(
            f"\nkubectl drain (ignoring runtime, deadline 3s): rc={res.returncode} {seconds:.1f}s"
        )
        assert res.returncode == 0, res.stderr
        st = wait("ignore-1 Succeeded", lambda: finished(dc, ns, "ignore-1"), cap=300)
        p = st["passivation"]
        assert (p["reason"], p["outcome"]) == ("node_drain", "deadline")
        assert "PassivationDeadlineExceeded" in {e["reason"] for e in events(dc, ns, "ignore-1")}
        first = st["runs"][0]
        assert first["outcome"] == "passivated" and "node_drain" in first["reason"]
        last = st["runs"][-1]
        assert last["resumedFrom"] == first["runId"] and last["nodeName"] == nodes.b
        assert (st.get("restarts") or 0) == 0
        # resumed from the last durable round: nothing ran twice; at most the step that was
        # running when the pod was killed is reported to the model as interrupted
        lines = steps(nodes, ns, "ignore-1")
        assert len(lines) == len(set(lines)), lines
        assert len(lines) >= rounds - 1, lines


def test_suspend_then_resume_keeps_the_lineage(
    dev_cluster: DevCluster, clean_nodes: PrivateNodes
) -> None:
    dc, nodes = dev_cluster, clean_nodes
    with (
        dc.namespace("pz-suspend") as ns,
        scripted_model(step_script(ROUNDS)) as srv,
        operator(dc, ns, **operator_env()),
    ):
        apply(dc, ns, [SECRET])
        place_on_a(dc, ns, nodes, [session_doc("sus", srv.base_url, nodes, 30)])
        dc.kubectl(
            "-n",
            ns,
            "patch",
            "agentsession",
            "sus",
            "--type=merge",
            "-p",
            '{"spec":{"suspend":true}}',
        )

        def suspended() -> dict[str, Any] | None:
            st = status(dc, ns, "sus")
            ok = (
                st.get("phase") == "Passivated"
                and condition(st, "Passivated").get("status") == "True"
                and not pods(dc, ns, "sus")
            )
            return st if ok else None

        st = wait("sus Passivated with no pod", suspended, cap=120)
        assert st["passivation"]["reason"] == "suspend"
        first_run = st["runs"][0]["runId"]
        dc.kubectl(
            "-n",
            ns,
            "patch",
            "agentsession",
            "sus",
            "--type=merge",
            "-p",
            '{"spec":{"suspend":false}}',
        )
        final = wait("sus Succeeded", lambda: finished(dc, ns, "sus"), cap=300)
        runs = final["runs"]
        assert runs[0]["runId"] == first_run and runs[0]["outcome"] == "passivated"
        assert "suspend" in runs[0]["reason"]
        assert runs[-1]["resumedFrom"] == first_run
        assert final["passivation"]["resumedRunId"] == runs[-1]["runId"]
        assert steps(nodes, ns, "sus") == [f"step-{i}" for i in range(1, ROUNDS + 1)]
