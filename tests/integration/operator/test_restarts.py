"""HA and restarts: two operator replicas (one holds the Lease); 20 times, at random moments, one
replica is killed (SIGKILL or SIGTERM) and a new one started, while 10 sessions run. A watch on
the session pods checks, after every event the apiserver sends, that no session ever has two
pods that are not finished; every session must succeed and no tool may run twice.
"""

from __future__ import annotations

import random
import signal
import threading
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client, config, watch

from tests.cluster import DevCluster
from tests.integration.operator.harness import (
    SECRET,
    apply_in,
    bash,
    klist,
    operator,
    scripted_model,
    session_manifest,
    session_phase,
    wait,
)

pytestmark = pytest.mark.integration

SESSIONS = 10
RESTARTS = 20
ROUNDS = 5


class PodWatcher(threading.Thread):
    """Follows the session pods of a namespace and records any moment with 2 live pods."""

    def __init__(self, namespace: str, kubeconfig: str) -> None:
        super().__init__(daemon=True)
        self.api = client.CoreV1Api(config.new_client_from_config(config_file=kubeconfig))
        self.namespace = namespace
        self.live: dict[str, dict[str, str]] = defaultdict(dict)  # session -> pod -> phase
        self.violations: list[str] = []
        self.created: dict[str, set[str]] = defaultdict(set)
        self.stop = threading.Event()
        self.watch = watch.Watch()

    def run(self) -> None:
        while not self.stop.is_set():
            try:
                for event in self.watch.stream(
                    self.api.list_namespaced_pod,
                    self.namespace,
                    label_selector="berth.dev/session",
                    timeout_seconds=5,
                ):
                    self.observe(event["type"], event["object"])
                    if self.stop.is_set():
                        return
            except Exception:  # the stream restarts; the check is per event
                time.sleep(0.2)

    def observe(self, kind: str, pod: Any) -> None:
        session = pod.metadata.labels["berth.dev/session"]
        name = pod.metadata.name
        self.created[session].add(name)
        finished = pod.status.phase in ("Succeeded", "Failed")
        if kind == "DELETED" or finished:
            self.live[session].pop(name, None)
        else:
            self.live[session][name] = pod.status.phase
        if len(self.live[session]) > 1:
            self.violations.append(f"{session}: {sorted(self.live[session])}")


def test_operator_restarts_never_duplicate_or_orphan_pods(dev_cluster: DevCluster) -> None:
    dc = dev_cluster
    rng = random.Random(4711)
    turns: list[dict[str, Any]] = [
        {"tool_calls": [bash(f"sleep 2; echo r{i} >> rounds.txt")]} for i in range(ROUNDS)
    ]
    script = {"turns": [*turns, {"text": "finished"}]}
    with (
        dc.namespace("ha") as ns,
        scripted_model(script) as llm,
        operator(dc, ns) as op,
    ):
        op.start()  # second replica: standby until the Lease frees up
        watcher = PodWatcher(ns, dc.kubeconfig)
        watcher.start()
        names = [f"s{i}" for i in range(SESSIONS)]
        apply_in(
            dc,
            ns,
            [SECRET]
            + [session_manifest(n, llm.base_url, f"restart test session {n}") for n in names],
        )
        kills = {"SIGKILL": 0, "SIGTERM": 0}
        for _ in range(RESTARTS):
            time.sleep(rng.uniform(0.3, 2.5))
            alive = [p for p in op.procs if p.poll() is None]
            victim = rng.choice(alive)
            sig = rng.choice([signal.SIGKILL, signal.SIGTERM])
            kills[sig.name] += 1
            op.stop(victim, sig)
            op.start()
        wait(
            "all sessions to finish",
            lambda: all(session_phase(dc, ns, n) in ("Succeeded", "Failed") for n in names),
            cap=300,
        )
        watcher.stop.set()
        phases = {n: session_phase(dc, ns, n) for n in names}
        print(
            f"\nrestarts: {kills}; pods created per session: "
            f"{ {s: sorted(p) for s, p in watcher.created.items()} }"
        )
        assert watcher.violations == []
        assert set(phases.values()) == {"Succeeded"}, phases
        claim = dc.claim_dir(ns)
        for n in names:
            rounds = (claim / "workspaces" / ns / n / "rounds.txt").read_text().split()
            assert rounds == [f"r{i}" for i in range(ROUNDS)], (n, rounds)
        # no orphans: exactly one (finished) pod per session, the one of its current epoch
        for n in names:
            pods = klist(dc, ns, "pods", f"berth.dev/session={n}")
            assert len(pods) == 1, (n, [p["metadata"]["name"] for p in pods])
        assert Path(op.log_dir).exists()
