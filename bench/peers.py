"""Benchmark: Berth against the peers a user would pick, in one run on the dev cluster
(``make bench-peers``), ending with one ``PEER ...`` line per figure (ratio = Berth / peer).

Phases (``--phases``, default all; each merges its figures into ``--results``, so phases may be
run in separate invocations and the ``PEER`` lines printed from the merged file):

- ``placement``: N (``--n``, default 1000; ``BERTH_BENCH_PEERS_N``) objects at once on
  ``--kwok-nodes`` (100) kwok nodes, create → Running, total and p99, apiserver writes per object
  (every component's), the controller's peak RSS: bare pods, AgentSessions, Jobs at the
  controller-manager's default client limit (20 QPS / 30 burst), agent-sandbox Sandboxes (its
  controller built from its Go module, ``hack/build-binaries.sh agent-sandbox``), and last Jobs
  with the controller-manager restarted at 1000 QPS / 2000 burst (restored afterwards). Every
  kind runs the session pod's own template (``build_session_pod``).
- ``adoption`` (real nodes): pools of 20 on each side; a burst of 20 and Poisson arrivals at
  2/s for 60 s (``--steady-seconds``): AgentSession with ``warmPoolRef`` created → its first model
  request, against SandboxClaim created → Ready (``bench/peer_startup.py``).
- ``cold`` (real nodes): 20 AgentSessions without a pool against 20 bare pods of the same image
  running a trivial Python command (creation → containers started, by watch).
- ``drain`` (real nodes): ``bench/drain.py``'s drain of 20 sessions without and with a
  SessionWarmPool; resume (pod ended → resumed run started) p99.

``BERTH_BENCH_N`` sets the 20 of the last three. Nothing is asserted.

    .venv/bin/python bench/peers.py                          # all of it (about 25 min)
    .venv/bin/python bench/peers.py --n 100 --phases placement
    .venv/bin/python bench/peers.py --phases none            # only print the merged PEER lines
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "operator")]

from bench.peer_figures import peer_lines, poisson_offsets  # noqa: E402

PHASES = ("placement", "adoption", "cold", "drain")
PLACEMENT_KINDS = ("bare", "sessions", "jobs-default-qps", "agent-sandbox", "jobs")
DEFAULT_RESULTS = ROOT / ".berth" / "bench" / "peers.json"


def placement_phase(
    dc: Any,
    counts: list[int],
    kwok_nodes: int,
    logs: Path,
    profile: Path | None = None,
    kinds: frozenset[str] = frozenset(PLACEMENT_KINDS),
) -> dict[str, Any]:
    """Each of ``kinds`` at every N of ``counts``; the rows by N and, as ``kinds``, the largest
    N's. With ``profile``, the control plane's CPU profiles of each burst go there (and are
    printed)."""
    from berth_operator.settings import OperatorSettings
    from kubernetes import client, config

    from bench import placement
    from bench.peer_kinds import (
        RAISED_QPS,
        agent_sandbox_controller,
        bench_peer_kind,
        kwok_session_pod,
        restart_controller_manager,
        wait_pods_gone,
    )
    from tests.integration.operator.harness import install_crds

    install_crds(dc)
    placement.ensure_kwok_nodes(dc, kwok_nodes)
    api_client = config.new_client_from_config(config_file=dc.kubeconfig)
    api_client.configuration.connection_pool_maxsize = placement.WORKERS * 2
    core = client.CoreV1Api(api_client)
    custom = client.CustomObjectsApi(api_client)
    pod = kwok_session_pod(OperatorSettings())
    rows: dict[int, dict[str, Any]] = {n: {} for n in counts}
    restart_controller_manager(dc, {})  # the defaults, whatever a crashed run left
    for n in counts:
        print(f"== placement N={n} on {kwok_nodes} kwok nodes", flush=True)
        if "bare" in kinds:
            wait_pods_gone(core)
            bare, writes = placement.bench_bare(dc, core, n, profile)
            rows[n]["bare"] = {
                **bare,
                "writes_per_object": sum(writes.values()) / n,
                "writes": dict(writes),
            }
        if "sessions" in kinds:
            wait_pods_gone(core)
            sessions, writes, rss, _ = placement.bench_sessions(
                dc, core, custom, n, keep_logs=logs, profile=profile
            )
            rows[n]["sessions"] = {
                **sessions,
                "writes_per_object": sum(writes.values()) / n,
                "writes": dict(writes),
                "rss_mib": rss,
            }
        if "jobs-default-qps" in kinds:
            wait_pods_gone(core)
            rows[n]["jobs-default-qps"] = bench_peer_kind(
                dc, core, "jobs", n, pod, profile=profile, tag="jobs-default-qps"
            )
        if "agent-sandbox" in kinds:
            wait_pods_gone(core)
            with agent_sandbox_controller(dc, logs / f"agent-sandbox-n{n}.log") as proc:
                rows[n]["agent-sandbox"] = bench_peer_kind(
                    dc, core, "agent-sandbox", n, pod, proc.pid, profile
                )
        report_row(n, rows[n])
    if "jobs" not in kinds:
        largest = max(counts)
        return {
            "kwok_nodes": kwok_nodes,
            "n": largest,
            "rows": [{"n": n, "kinds": rows[n]} for n in counts],
            "kinds": rows[largest],
        }
    try:
        argv = restart_controller_manager(dc, RAISED_QPS)
        limits = " ".join(a for a in argv if "qps" in a or "burst" in a)
        print(f"controller-manager restarted: {limits}", flush=True)
        for n in counts:
            wait_pods_gone(core)
            rows[n]["jobs"] = bench_peer_kind(dc, core, "jobs", n, pod, profile=profile)
            report_row(n, rows[n])
    finally:
        restart_controller_manager(dc, {})
    largest = max(counts)
    return {
        "kwok_nodes": kwok_nodes,
        "n": largest,
        "rows": [{"n": n, "kinds": rows[n]} for n in counts],
        "kinds": rows[largest],
    }


def report_row(n: int, kinds: dict[str, Any]) -> None:
    """Print one N's figures so far, one line per kind."""
    for kind, s in kinds.items():
        rss = f", controller RSS peak {s['rss_mib']:.0f} MiB" if "rss_mib" in s else ""
        print(
            f"N={n} {kind:>16}: all Running {s['total']:.2f} s, p50 {s['p50']:.2f} s, "
            f"p99 {s['p99']:.2f} s, apiserver writes per object {s['writes_per_object']:.2f}{rss}",
            flush=True,
        )
        if s.get("writes"):
            top = sorted(s["writes"].items(), key=lambda kv: -kv[1])[:8]
            print("    writes: " + ", ".join(f"{k} {v / n:.2f}" for k, v in top), flush=True)


def adoption_phase(dc: Any, steady_seconds: float, logs: Path) -> dict[str, Any]:
    """Burst and steady adoption on both sides; latencies in seconds."""
    from bench.peer_startup import POOL, berth_adoption, sandbox_adoption
    from tests.integration.operator.harness import scripted_model

    script = {"turns": [{"text": "done"}], "on_exhausted": "repeat_last"}
    out: dict[str, Any] = {}
    modes = {"burst": [0.0] * POOL, "steady": poisson_offsets(2.0, steady_seconds)}
    with scripted_model(script) as llm:
        for mode, offsets in modes.items():
            print(f"== adoption {mode}: {len(offsets)} arrivals, pools of {POOL}", flush=True)
            asb = sandbox_adoption(dc, offsets, mode, logs / f"agent-sandbox-{mode}.log")
            berth = berth_adoption(dc, llm, offsets, mode)
            out[mode] = {"berth": berth, "agent-sandbox": asb}
    return out


def cold_phase(dc: Any) -> dict[str, Any]:
    from bench.peer_startup import POOL, cold_start
    from tests.integration.operator.harness import scripted_model

    script = {"turns": [{"text": "done"}], "on_exhausted": "repeat_last"}
    with scripted_model(script) as llm:
        return cold_start(dc, llm, POOL)


def drain_phase(dc: Any) -> dict[str, Any]:
    from bench import drain
    from tests.e2e.passivation_support import delete_webhook_configurations, private_nodes

    with private_nodes(dc) as nodes:
        try:
            cold = drain.berth_drain(dc, nodes)
            warm = drain.berth_drain(dc, nodes, warm=True)
        finally:
            delete_webhook_configurations(dc, "berth-eviction-bench-")
    drain.report("drain, no pool (pods created)", cold)
    drain.report("drain, SessionWarmPool on the other node", warm)
    return {"cold": cold["resume"], "warm": warm["resume"], "adopted": warm.get("adopted")}


def main() -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    ap.add_argument("--phases", default=",".join(PHASES), help="comma-separated, or 'none'")
    ap.add_argument(
        "--n",
        default=os.environ.get("BERTH_BENCH_PEERS_N", "1000"),
        help="placement counts, comma-separated (default 1000)",
    )
    ap.add_argument("--kwok-nodes", type=int, default=100)
    ap.add_argument(
        "--kinds",
        default=",".join(PLACEMENT_KINDS),
        help="placement kinds to run, comma-separated (default: all)",
    )
    ap.add_argument("--steady-seconds", type=float, default=60.0)
    ap.add_argument(
        "--results",
        type=Path,
        default=DEFAULT_RESULTS,
        help="JSON the phases merge their figures into",
    )
    ap.add_argument("--cpu-profile", type=Path, help="keep the control plane's CPU profiles here")
    ap.add_argument("--fresh", action="store_true", help="start from empty results")
    args = ap.parse_args()
    phases = [] if args.phases == "none" else args.phases.split(",")
    unknown = set(phases) - set(PHASES)
    if unknown:
        ap.error(f"unknown phases {sorted(unknown)}; choose from {PHASES}")
    results: dict[str, Any] = {}
    if args.results.exists() and not args.fresh:
        results = json.loads(args.results.read_text())
    args.results.parent.mkdir(parents=True, exist_ok=True)
    logs = Path(tempfile.mkdtemp(prefix="berth-peers-"))
    if phases:
        from tests.cluster import DevCluster

        dc = DevCluster.ensure()
        print(f"logs in {logs}", flush=True)
        runners = {
            "placement": lambda: placement_phase(
                dc,
                [int(x) for x in args.n.split(",")],
                args.kwok_nodes,
                logs,
                args.cpu_profile,
                kinds=frozenset(args.kinds.split(",")),
            ),
            "adoption": lambda: adoption_phase(dc, args.steady_seconds, logs),
            "cold": lambda: cold_phase(dc),
            "drain": lambda: drain_phase(dc),
        }
        for phase in phases:
            results[phase] = runners[phase]()
            args.results.write_text(json.dumps(results, indent=1))
    print("\n".join(peer_lines(results)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
