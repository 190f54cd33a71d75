"""The crash campaign's cluster faults: seeded scenarios on the dev cluster's real nodes.

The process-level campaign (:mod:`tests.chaos.runner`) kills and fences the runtime directly;
this one drives the whole product — two operator replicas with leader election, session pods
on the two real nodes (kubelet + containerd), PDBs, drains — and injects the faults a cluster
adds: the leader operator killed (SIGKILL; the standby takes the Lease over), the standby
killed, a session's node lost (its kubelet, containerd and containers killed; restored after
a while), a session's node drained while another session's pod is evicted through the Eviction
API (drain and eviction racing the PDB and the passivation they trigger), and a session pod
force-deleted (a crash the node never reports). Each scenario draws two sessions of a few bash
rounds and one to three faults from its seed; tools report to the same side-effect ledger as
the process campaign (:mod:`tests.chaos.ledger`, listening on an address pods reach), and once
both sessions are over the same invariants are checked against their stores
(:func:`tests.chaos.invariants.after_attempt` and ``after_session``: nothing ran twice, no
result lost, every call answered truthfully).

    .venv/bin/python -m tests.chaos.cluster --scenarios 10 [--seed 1]   # `make chaos-cluster`
    .venv/bin/python -m tests.chaos.cluster --replay 7

The operators run as local processes (as in tests/integration/operator). A tool takes the epoch
for its ledger lines from the name of the pod it runs in (``<session>-e<epoch>``), one attempt per
epoch, so ``epoch_overlap`` (no tool started by an older placement after a newer one started
tools) is checked here too. A scenario takes one to three minutes; waits are bounded only to
turn a hang into a failure.
"""

from __future__ import annotations

import argparse
import json
import random
import signal
import sys
import tempfile
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.chaos.invariants import Violation, after_attempt, after_session
from tests.chaos.ledger import LedgerServer
from tests.chaos.model import ChaosModel, final_text
from tests.chaos.scenario import SessionPlan
from tests.cluster import DevCluster, host_ip, poll_until
from tests.e2e.passivation_support import (
    PrivateNodes,
    apply,
    drain,
    evict,
    pods,
    private_nodes,
    session_doc,
    status,
)
from tests.integration.operator.harness import OPERATOR_NS, SECRET, OperatorProcess, operator

CLUSTER_FAULTS: dict[str, str] = {
    "kill_leader": "SIGKILL of the operator replica holding the Lease (a new standby is started)",
    "kill_standby": "SIGKILL of a standby operator replica (a new one is started)",
    "node_loss": "the node of a session's pod lost (kubelet, containerd, containers killed), "
    "restored after 5-20 s",
    "drain": "kubectl drain of a session's node while the other session's pod is evicted",
    "delete_pod": "a session pod force-deleted (grace 0): the crash of a pod the node never saw",
}
FINISH_CAP_SECONDS = 480.0


@dataclass(frozen=True, slots=True)
class ClusterFault:
    """One fault: ``kind`` (a key of :data:`CLUSTER_FAULTS`), ``after_s`` (seconds after the
    previous fault, or after both sessions run) and ``target`` (index of the session it aims at)."""

    kind: str
    after_s: float
    target: int


@dataclass(frozen=True, slots=True)
class ClusterScenario:
    """Two sessions and the faults that hit them, drawn from ``seed`` (:func:`generate`)."""

    seed: int
    sessions: tuple[SessionPlan, ...]
    faults: tuple[ClusterFault, ...]


def generate(seed: int) -> ClusterScenario:
    """The scenario of ``seed`` (pure: the same seed always gives the same scenario)."""
    rng = random.Random(seed)
    sessions = tuple(
        SessionPlan(
            name=f"c{seed}-s{i}",
            rounds=tuple(
                tuple(rng.choice((["bash"], ["bash"], ["bash", "bash"])))
                for _ in range(rng.randint(4, 6))
            ),
            linger_ms=rng.choice((1000, 2000, 3000)),
            faults=(),
        )
        for i in range(2)
    )
    faults = tuple(
        ClusterFault(
            rng.choice(sorted(CLUSTER_FAULTS)), round(rng.uniform(0.5, 3.0), 1), rng.randrange(2)
        )
        for _ in range(rng.randint(1, 3))
    )
    return ClusterScenario(seed, sessions, faults)


@dataclass
class ScenarioResult:
    """What one scenario did and found."""

    seed: int
    faults: list[str] = field(default_factory=list)
    landed: list[str] = field(default_factory=list)
    phases: dict[str, str] = field(default_factory=dict)
    violations: list[Violation] = field(default_factory=list)
    seconds: float = 0.0


def _leader_index(dc: DevCluster, op: OperatorProcess) -> int | None:
    """Index in ``op.procs`` of the replica named by the Lease (None when none holds it)."""
    out = dc.kubectl(
        "-n",
        OPERATOR_NS,
        "get",
        "lease",
        f"berth-operator-{op.namespace}",
        "-o",
        "jsonpath={.spec.holderIdentity}",
        check=False,
    ).stdout.strip()
    if not out.startswith("test-operator-"):
        return None
    index = int(out.rsplit("-", 1)[1]) - 1
    return index if index < len(op.procs) and op.procs[index].poll() is None else None


def _running_pod(dc: DevCluster, ns: str, name: str) -> dict[str, Any] | None:
    """The session's pod of its current epoch while it is Running on a node, else None."""
    st = status(dc, ns, name)
    for pod in pods(dc, ns, name):
        meta = pod["metadata"]
        if (
            meta["name"] == st.get("podName")
            and not meta.get("deletionTimestamp")
            and (pod.get("status") or {}).get("phase") == "Running"
        ):
            return pod
    return None


def _apply_fault(
    dc: DevCluster,
    nodes: PrivateNodes,
    op: OperatorProcess,
    ns: str,
    names: list[str],
    fault: ClusterFault,
    background: list[threading.Thread],
    rng: random.Random,
) -> bool:
    """Inject ``fault``; True when it hit something running (a process, a session's pod)."""
    if fault.kind in ("kill_leader", "kill_standby"):
        leader = _leader_index(dc, op)
        alive = [i for i, p in enumerate(op.procs) if p.poll() is None]
        victims = [i for i in alive if (i == leader) == (fault.kind == "kill_leader")]
        if not victims:
            op.start()
            return False
        op.stop(op.procs[victims[0]], signal.SIGKILL)
        op.start()
        return True
    target = names[fault.target]
    pod = _running_pod(dc, ns, target)
    if pod is None:
        return False
    node = pod["spec"]["nodeName"]
    if fault.kind == "delete_pod":
        dc.kubectl(
            "-n",
            ns,
            "delete",
            "pod",
            pod["metadata"]["name"],
            "--grace-period=0",
            "--force",
            check=False,
        )
        return True
    if fault.kind == "node_loss":
        dc.lose_node(node)
        down = rng.uniform(5, 20)

        def restore() -> None:
            time.sleep(down)
            dc.restore_node(node)

        thread = threading.Thread(target=restore, daemon=True)
        thread.start()
        background.append(thread)
        return True
    # drain: the target's node, racing an eviction of the other session's pod
    other = _running_pod(dc, ns, names[1 - fault.target])

    def run_drain() -> None:
        drain(dc, node, timeout=240)
        dc.kubectl("uncordon", node, check=False)

    thread = threading.Thread(target=run_drain, daemon=True)
    thread.start()
    background.append(thread)
    if other is not None:
        evict(dc, ns, other["metadata"]["name"])
    return True


def run_scenario(
    dc: DevCluster,
    nodes: PrivateNodes,
    sc: ClusterScenario,
    ledger: LedgerServer,
    model: ChaosModel,
) -> ScenarioResult:
    """Run one scenario in a fresh namespace with two operator replicas; check the invariants."""
    started = time.monotonic()
    result = ScenarioResult(sc.seed)
    names = [p.name for p in sc.sessions]
    for plan in sc.sessions:
        model.register(plan)
    env = {"BERTH_STATUS_REFRESH_SECONDS": "1", "BERTH_PASSIVATION_KILL_GRACE_SECONDS": "2"}
    background: list[threading.Thread] = []
    rng = random.Random(sc.seed * 7919)  # what the faults draw while they run (node downtime)
    with dc.namespace("chaos") as ns, operator(dc, ns, **env) as op:
        op.start()  # the standby
        docs = [SECRET] + [
            session_doc(plan.name, model.base_url_for(plan.name, 0, 0), nodes, 20)
            for plan in sc.sessions
        ]
        apply(dc, ns, docs)
        begun: set[str] = set()

        def all_started() -> bool:
            # each session seen running once (a short one may be over before the other starts)
            for n in names:
                if n not in begun and (
                    _running_pod(dc, ns, n) is not None
                    or status(dc, ns, n).get("phase") in ("Succeeded", "Failed")
                ):
                    begun.add(n)
            return len(begun) == len(names)

        poll_until("both sessions started", all_started, timeout=180)
        for fault in sc.faults:
            time.sleep(fault.after_s)
            result.faults.append(fault.kind)
            if _apply_fault(dc, nodes, op, ns, names, fault, background, rng):
                result.landed.append(fault.kind)
        try:
            poll_until(
                "both sessions over",
                lambda: all(
                    status(dc, ns, n).get("phase") in ("Succeeded", "Failed") for n in names
                ),
                timeout=FINISH_CAP_SECONDS,
            )
        except AssertionError as exc:
            result.violations.append(Violation("not_terminal", ",".join(names), str(exc)[:500]))
        for thread in background:
            thread.join(timeout=300)
        result.phases = {n: str(status(dc, ns, n).get("phase")) for n in names}
        ledger.sync()
        store_dir = nodes.claim_dir(ns) / "store" / ns
        for n in names:
            entries = ledger.entries(f"{n}-")
            result.violations += after_attempt(store_dir, n, entries)
            found, _ = after_session(store_dir, n, entries, final_text(n))
            result.violations += found
            ledger.forget(f"{n}-")
            model.forget(n)
    for node in (nodes.a, nodes.b):
        dc.kubectl("uncordon", node, check=False)
    result.seconds = time.monotonic() - started
    return result


def campaign(seeds: list[int], progress: bool = True) -> list[ScenarioResult]:
    """Run the scenarios of ``seeds`` one after another on the dev cluster."""
    dc = DevCluster.ensure()
    results: list[ScenarioResult] = []
    with (
        private_nodes(dc) as nodes,
        tempfile.TemporaryDirectory(prefix="berth-chaos-cluster-") as tmp,
    ):
        ledger = LedgerServer(Path(tmp) / "ledger.txt", host=host_ip())
        model = ChaosModel(ledger.port, host=host_ip(), epoch_from_hostname=True)
        model.start_in_thread()
        try:
            for seed in seeds:
                sc = generate(seed)
                res = run_scenario(dc, nodes, sc, ledger, model)
                results.append(res)
                if progress:
                    print(
                        f"[chaos-cluster] seed {seed}: faults {res.faults} (landed "
                        f"{res.landed}), phases {res.phases}, {len(res.violations)} violations, "
                        f"{res.seconds:.0f} s",
                        flush=True,
                    )
        finally:
            model.stop_thread()
            ledger.close()
    return results


def report(results: list[ScenarioResult]) -> str:
    """Fault counts (applied / landed), the violations, and the closing line
    ``N scenarios, V violations``."""
    applied = Counter(k for r in results for k in r.faults)
    landed = Counter(k for r in results for k in r.landed)
    lines = [f"{k:14s} applied {applied[k]:4d}  landed {landed[k]:4d}" for k in CLUSTER_FAULTS]
    for r in results:
        for v in r.violations:
            lines.append(f"VIOLATION seed {r.seed}: {json.dumps(v.as_dict())}")
    total = sum(len(r.violations) for r in results)
    lines.append(f"{len(results)} scenarios, {total} violations")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    """Command line (module docstring); exit status 1 when any invariant broke."""
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    ap.add_argument("--scenarios", type=int, default=10)
    ap.add_argument("--seed", type=int, default=1, help="first seed")
    ap.add_argument("--replay", type=int, help="run the scenario of this seed only")
    args = ap.parse_args(argv)
    seeds = (
        [args.replay] if args.replay is not None else [args.seed + i for i in range(args.scenarios)]
    )
    results = campaign(seeds)
    print(report(results))
    return 1 if any(r.violations for r in results) else 0


if __name__ == "__main__":
    sys.exit(main())
