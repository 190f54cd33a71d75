"""Benchmark: where a cold session pod's time and CPU go — N AgentSessions created at once (no
warm pool) on the dev cluster's real nodes.

    .venv/bin/python bench/cold.py            # N=20 (BERTH_BENCH_N to change)

Real pieces: the dev cluster's two real nodes (kubelet + containerd), ``berth-operator`` as a
subprocess, the scripted model over HTTP. Per session, seconds from its create (the bench's
clock, as ``placement.py --warm`` stamps it) until a pod watch first saw its pod, saw it bound,
saw its container running, saw it Ready, and until the run's first model request. Over the whole
burst (create → the last first request): the machine's busy CPU (``/proc/stat``), the CPU of the
pods' containers (the ``k8s.io`` cpuacct cgroup containerd puts them under on this cluster), and
by process name the CPU of every process alive at the end, plus what each process reaped from
its children (runc, shims, session processes that exited). Nothing is asserted; ``placement.py
--warm`` gives the same create → first request figure beside adopted sessions.
"""

from __future__ import annotations

import os
import statistics
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "operator")]

from cpu import busy_seconds, by_name, cgroup_seconds, processes  # noqa: E402  (bench/)
from kubernetes import client, config  # noqa: E402
from podsteps import PodSteps  # noqa: E402  (bench/, the script's own directory)
from warm_placement import first_request  # noqa: E402

from tests.cluster import DevCluster  # noqa: E402
from tests.integration.operator.harness import (  # noqa: E402
    SECRET,
    apply_in,
    operator,
    scripted_model,
    session_manifest,
    wait,
)

N = int(os.environ.get("BERTH_BENCH_N", "20"))
STEPS = ("seen", "bound", "started", "ready", "first request")  # podsteps.STEPS + the run's
CONTAINERS_CGROUP = Path("/sys/fs/cgroup/cpuacct/k8s.io/cpuacct.usage")


def session_of(pod: Any) -> str | None:
    """A pod's session (its ``berth.dev/session`` label); None for other pods."""
    return (pod.metadata.labels or {}).get("berth.dev/session")


def main() -> int:
    dc = DevCluster.ensure()
    names = [f"c{i:03d}" for i in range(N)]
    script = {"turns": [{"text": "done"}], "on_exhausted": "repeat_last"}
    with (
        scripted_model(script) as llm,
        dc.namespace("bench-cold-steps") as ns,
        operator(dc, ns),
    ):
        apply_in(dc, ns, [SECRET])
        time.sleep(2)  # operator leading, watches established
        api = config.new_client_from_config(config_file=dc.kubeconfig)
        pods = PodSteps(api, ns, key=session_of)
        pods.start()
        time.sleep(1)
        custom = client.CustomObjectsApi(api)
        created: dict[str, float] = {}

        def create(name: str) -> None:
            doc = session_manifest(name, llm.base_url, f"bench {ns} {name}")
            created[name] = time.time()
            custom.create_namespaced_custom_object(
                "berth.dev", "v1alpha1", ns, "agentsessions", doc
            )

        procs0, busy0 = processes(), busy_seconds()
        cg0 = cgroup_seconds(CONTAINERS_CGROUP)
        t0 = time.time()
        with ThreadPoolExecutor(max_workers=N) as pool:
            list(pool.map(create, names))
        wait(
            f"{N} runs started",
            lambda: all(first_request(llm, f"bench {ns} {n}") for n in names),
            cap=600,
        )
        wall = time.time() - t0
        busy = busy_seconds() - busy0
        cg1 = cgroup_seconds(CONTAINERS_CGROUP)
        own, reaped = by_name(procs0, processes())
        pods.stop.set()
        rows = []
        for n in names:
            steps = pods.at.get(n, {})
            row = {k: steps.get(k, float("nan")) - created[n] for k in STEPS[:-1]}
            row["first request"] = (first_request(llm, f"bench {ns} {n}") or 0.0) - created[n]
            rows.append(row)
    print(f"N={N} AgentSessions created at once (no warm pool), real nodes {dc.nodes}")
    print("seconds after each create, p50 / max over the sessions:")
    for step in STEPS:
        # A pod whose run ended between two watch events may never be seen running or Ready.
        values = sorted(v for r in rows if (v := r[step]) == v)  # NaN != NaN
        if values:
            print(
                f"  {step:>14}: {statistics.median(values):6.2f} / {values[-1]:6.2f}"
                + (f" ({len(values)} of {N} seen)" if len(values) < N else "")
            )
    cores = os.cpu_count() or 1
    print(
        f"burst: {wall:.2f} s wall; machine busy {busy:.2f} core-s of {cores * wall:.1f} "
        f"({cores} cores)"
    )
    if cg0 is not None and cg1 is not None:
        containers = cg1 - cg0
        print(
            f"  pods' containers (k8s.io cgroup): {containers:.2f} core-s, "
            f"{containers / N:.2f} per session"
        )
    print("  by process (own): " + ", ".join(f"{k} {v:.2f}" for k, v in own.most_common(10)))
    print(
        "  reaped from children: "
        + ", ".join(f"{k} {v:.2f}" for k, v in reaped.most_common(4) if v > 0.005)
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
