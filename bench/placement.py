"""Benchmark: time from create to Running for N AgentSessions vs N equivalent bare pods.

Both run on the kwok (fake) nodes of the dev cluster, so the figures are the control plane plus
the operator, not process start-up. The bare pods are the very pods the operator would build
(``build_session_pod``), without owner references. For each object the client-side create time
and the time a pod watch first sees phase Running are recorded (monotonic clock).

Prints: N, total time until every pod is Running, p50/p99 create→Running for both, the ratios,
and the operator's peak RSS (VmHWM of the leader process). Figures only; nothing is asserted.

    .venv/bin/python bench/placement.py            # N=500 (BERTH_BENCH_N to change)
    .venv/bin/python bench/placement.py --warm     # adoption from a SessionWarmPool, N=20
"""

from __future__ import annotations

import os
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "operator")]

from berth_operator.api.agentsession import AgentSessionSpec  # noqa: E402
from berth_operator.builders.names import SessionRef  # noqa: E402
from berth_operator.builders.session_pod import build_session_pod  # noqa: E402
from berth_operator.settings import OperatorSettings  # noqa: E402
from kubernetes import client, config, watch  # noqa: E402

from tests.cluster import DevCluster  # noqa: E402
from tests.integration.operator.harness import (  # noqa: E402
    OperatorProcess,
    install_crds,
    operator_kubeconfig,
)

N = int(os.environ.get("BERTH_BENCH_N", "500"))
WORKERS = 16
KWOK_PLACEMENT: dict[str, Any] = {
    "nodeSelector": {"type": "kwok"},
    "tolerations": [{"key": "kwok.x-k8s.io/node", "operator": "Exists", "effect": "NoSchedule"}],
}
SPEC: dict[str, Any] = {
    "prompt": "benchmark",
    "model": "openai/gpt-4o-mini",
    "placement": KWOK_PLACEMENT,
}


class RunningWatch(threading.Thread):
    """Records the monotonic time each pod of a namespace is first seen Running."""

    def __init__(self, api: Any, namespace: str) -> None:
        super().__init__(daemon=True)
        self.api = api
        self.namespace = namespace
        self.running: dict[str, float] = {}
        self.stop = threading.Event()

    def run(self) -> None:
        while not self.stop.is_set():
            try:
                for ev in watch.Watch().stream(
                    self.api.list_namespaced_pod, self.namespace, timeout_seconds=5
                ):
                    pod = ev["object"]
                    if pod.status.phase == "Running" and pod.metadata.name not in self.running:
                        self.running[pod.metadata.name] = time.monotonic()
                    if self.stop.is_set():
                        return
            except Exception:
                time.sleep(0.1)


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def run_batch(
    names: list[str],
    create: Callable[[str], None],
    pod_of: Callable[[str], str],
    watcher: RunningWatch,
) -> dict[str, float]:
    created: dict[str, float] = {}

    def one(name: str) -> None:
        created[name] = time.monotonic()
        create(name)

    start = time.monotonic()
    with ThreadPoolExecutor(WORKERS) as pool:
        list(pool.map(one, names))
    deadline = time.monotonic() + 900
    while time.monotonic() < deadline:
        if all(pod_of(n) in watcher.running for n in names):
            break
        time.sleep(0.2)
    else:
        missing = [n for n in names if pod_of(n) not in watcher.running]
        raise SystemExit(f"{len(missing)} pods never Running, e.g. {missing[:5]}")
    lat = [watcher.running[pod_of(n)] - created[n] for n in names]
    total = max(watcher.running[pod_of(n)] for n in names) - start
    return {"total": total, "p50": statistics.median(lat), "p99": pct(lat, 0.99)}


def peak_rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def main() -> int:
    dc = DevCluster.ensure()
    install_crds(dc)
    api_client = config.new_client_from_config(config_file=dc.kubeconfig)
    api_client.configuration.connection_pool_maxsize = WORKERS * 2
    core = client.CoreV1Api(api_client)
    custom = client.CustomObjectsApi(api_client)
    settings = OperatorSettings()
    spec = AgentSessionSpec.model_validate(SPEC)
    print(f"N={N} on kwok nodes: {dc.env.get('BERTH_KWOK_NODE_NAMES', '?')}")

    with dc.namespace("bench-pods", shared_pvc=True) as ns_pods:
        watcher = RunningWatch(core, ns_pods)
        watcher.start()

        def create_pod(name: str) -> None:
            ref = SessionRef(ns_pods, name, f"bench-{name}")
            pod = build_session_pod(
                ref, spec, settings, epoch=1, resume_run_id=None, reason="Initial"
            )
            pod["metadata"].pop("ownerReferences")
            core.create_namespaced_pod(ns_pods, pod)

        names = [f"b{i:04d}" for i in range(N)]
        bare = run_batch(names, create_pod, lambda n: f"{n}-e1", watcher)
        watcher.stop.set()
        dc.kubectl("-n", ns_pods, "delete", "pods", "--all", "--wait=false", check=False)

    with (
        dc.namespace("bench-ags", shared_pvc=True) as ns_ags,
        tempfile.TemporaryDirectory() as tmp,
    ):
        kubeconfig = operator_kubeconfig(dc, Path(tmp))
        op = OperatorProcess(
            dc,
            ns_ags,
            kubeconfig,
            Path(tmp),
            BERTH_STATUS_REFRESH_SECONDS="30",
            BERTH_STATE_TIMEOUT_SECONDS="1",
            BERTH_LEASE_DURATION_SECONDS="15",
            BERTH_LEASE_RENEW_SECONDS="5",
        )
        proc = op.start()
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                if "berth_operator_leader 1.0" in op.metrics():
                    break
            except OSError:
                pass
            time.sleep(0.2)
        time.sleep(1.0)  # kopf watches established
        watcher = RunningWatch(core, ns_ags)
        watcher.start()

        def create_session(name: str) -> None:
            body = {
                "apiVersion": "berth.dev/v1alpha1",
                "kind": "AgentSession",
                "metadata": {"name": name},
                "spec": SPEC,
            }
            custom.create_namespaced_custom_object(
                "berth.dev", "v1alpha1", ns_ags, "agentsessions", body
            )

        names = [f"s{i:04d}" for i in range(N)]
        sessions = run_batch(names, create_session, lambda n: f"{n}-e1", watcher)
        watcher.stop.set()
        rss = peak_rss_mib(proc.pid)
        placements = [
            line
            for line in op.metrics().splitlines()
            if line.startswith('berth_operator_placements_total{reason="Initial"}')
        ]
        # Delete the sessions while the operator runs (they carry its finalizer).
        dc.kubectl(
            "-n",
            ns_ags,
            "delete",
            "agentsessions",
            "--all",
            "--wait=true",
            "--timeout=300s",
            check=False,
            timeout=330,
        )
        op.stop_all()

    print(
        f"bare pods    : all Running after {bare['total']:.2f}s; create→Running "
        f"p50 {bare['p50'] * 1000:.0f} ms, p99 {bare['p99'] * 1000:.0f} ms"
    )
    print(
        f"AgentSessions: all Running after {sessions['total']:.2f}s; create→Running "
        f"p50 {sessions['p50'] * 1000:.0f} ms, p99 {sessions['p99'] * 1000:.0f} ms"
    )
    print(
        f"ratio (sessions / bare pods): total {sessions['total'] / bare['total']:.2f}x, "
        f"p50 {sessions['p50'] / bare['p50']:.2f}x, p99 {sessions['p99'] / bare['p99']:.2f}x"
    )
    print(f"operator peak RSS: {rss:.1f} MiB; {placements[0] if placements else ''}")
    return 0


if __name__ == "__main__":
    if (
        "--warm" in sys.argv[1:]
    ):  # cold vs warm-pool adoption on real nodes (bench/warm_placement.py)
        from bench.warm_placement import main as warm_main

        raise SystemExit(warm_main())
    raise SystemExit(main())
