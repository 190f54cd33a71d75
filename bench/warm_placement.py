"""Benchmark: AgentSession created → its run started, cold (a pod created) vs adopted from a
SessionWarmPool, N concurrent sessions (``bench/placement.py --warm`` runs this).

Real pieces: the dev cluster's real nodes (kubelet + containerd), ``berth-operator`` as a
subprocess, the scripted model over HTTP. "Run started" is when the scripted model receives the
run's first request (its arrival time, ``at`` in its request log; the bench process's clock, which
also stamps each create, made with the Python client from a thread pool, so no process start
is counted). Both batches run in one invocation, one after the other in fresh
namespaces: first N sessions without a pool (the baseline), then a pool of N warm pods is filled
and N sessions naming it are created at once. Prints p50/p99/max for both, the ratio, how many
sessions were adopted, and the operator's ``berth_operator_warm_adoption_seconds``. Nothing is
asserted.

    .venv/bin/python bench/placement.py --warm      # N=20 (BERTH_BENCH_N to change)
    .venv/bin/python bench/placement.py --warm --baseline-src /tmp/berth-base --rounds 3
                                    # warm batches alternating with another checkout's operator
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "operator")]

from kubernetes import client, config  # noqa: E402

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
IMAGE_ENV = {"BERTH_SESSION_IMAGE": i} if (i := os.environ.get("BERTH_BENCH_IMAGE")) else {}
"""``BERTH_BENCH_IMAGE``: the session image the operator runs (default: the dev cluster's)."""


def pct(values: list[float], q: float) -> float:
    """Nearest-rank percentile (q in 0..100); NaN for no values."""
    if not values:
        return float("nan")
    ordered = sorted(values)
    rank = max(1, min(len(ordered), round(q / 100 * len(ordered) + 0.5)))
    return ordered[rank - 1]


def first_request(llm: Any, prompt: str, after: float = 0.0) -> float | None:
    """When the scripted model ``llm`` first received a request carrying the user message
    ``prompt`` after ``after`` (both its clock, the wall clock in epoch seconds); None if none
    came yet."""
    return min(
        (
            float(req["at"])
            for req in list(llm.requests)
            if req["at"] > after
            and any(m.get("role") == "user" and m.get("content") == prompt for m in req["messages"])
        ),
        default=None,
    )


def batch(
    dc: DevCluster,
    ns: str,
    llm: Any,
    names: list[str],
    created: dict[str, float] | None = None,
    **spec: Any,
) -> list[float]:
    """Create one session per name at once; return create → first model request (seconds).
    ``created``, when given, receives each session's create time (epoch seconds)."""
    created = {} if created is None else created
    api = client.CustomObjectsApi(config.new_client_from_config(config_file=dc.kubeconfig))

    def create(name: str) -> None:
        doc = session_manifest(name, llm.base_url, f"bench {ns} {name}", **spec)
        created[name] = time.time()
        api.create_namespaced_custom_object("berth.dev", "v1alpha1", ns, "agentsessions", doc)

    with ThreadPoolExecutor(max_workers=len(names)) as pool:
        list(pool.map(create, names))
    wait(
        f"{len(names)} runs started",
        lambda: all(first_request(llm, f"bench {ns} {n}") is not None for n in names),
        cap=600,
    )
    return [(first_request(llm, f"bench {ns} {n}") or float("nan")) - created[n] for n in names]


def _ready_warm(dc: DevCluster, ns: str) -> int:
    items = json.loads(
        dc.kubectl("-n", ns, "get", "pods", "-l", "berth.dev/warm-pool=pool", "-o", "json").stdout
    )["items"]
    return sum(
        1
        for p in items
        if any(
            c["type"] == "Ready" and c["status"] == "True"
            for c in (p.get("status") or {}).get("conditions") or []
        )
    )


def _adopted(dc: DevCluster, ns: str) -> int:
    """Session pods that came from the pool (the adoption's pod annotation; status.runs may
    still wait for the operator's coalescing window)."""
    items = json.loads(dc.kubectl("-n", ns, "get", "pods", "-o", "json").stdout)["items"]
    return sum(
        1
        for p in items
        if "berth.dev/session" in (p["metadata"].get("labels") or {})
        and "berth.dev/adopted-from-pool" in (p["metadata"].get("annotations") or {})
    )


def _log_time(line: str) -> float | None:
    """Epoch seconds of a session process's log line (``2026-11-30 07:34:33,100 INFO ...``,
    UTC), None for a line without one."""
    try:
        at = datetime.strptime(line[:23], "%Y-%m-%d %H:%M:%S,%f")
    except ValueError:
        return None
    return at.replace(tzinfo=UTC).timestamp()


def _split(dc: DevCluster, ns: str, llm: Any, created: dict[str, float]) -> str:
    """Where each adoption's time went: create → the adopt call received by the warm process
    (its log: the operator's share, with the watch and the apiserver), then → the run's first
    model request (the process's share), as p50 / max over the adopted sessions."""
    items = json.loads(dc.kubectl("-n", ns, "get", "pods", "-o", "json").stdout)["items"]
    operator_share: list[float] = []
    process_share: list[float] = []
    for p in items:
        meta = p["metadata"]
        name = (meta.get("labels") or {}).get("berth.dev/session")
        if name not in created or "berth.dev/adopted-from-pool" not in (
            meta.get("annotations") or {}
        ):
            continue
        log = dc.kubectl("-n", ns, "logs", meta["name"], check=False).stdout
        received = next(
            (_log_time(line) for line in log.splitlines() if "adopted by" in line), None
        )
        asked = first_request(llm, f"bench {ns} {name}")
        if received is None or asked is None:
            continue
        operator_share.append(received - created[name])
        process_share.append(asked - received)
    if not operator_share:
        return "no adoption found in the pods' logs"
    return (
        f"create→adopt received p50 {pct(operator_share, 50) * 1000:.0f} / max "
        f"{max(operator_share) * 1000:.0f} ms, →first request p50 "
        f"{pct(process_share, 50) * 1000:.0f} / max {max(process_share) * 1000:.0f} ms"
    )


def pool_manifest(base_url: str, **template: Any) -> dict[str, Any]:
    """The SessionWarmPool ``pool`` of N pods for sessions of the scripted model at
    ``base_url`` (its key in the ``llm-credentials`` Secret); ``template`` adds fields."""
    return {
        "apiVersion": "berth.dev/v1alpha1",
        "kind": "SessionWarmPool",
        "metadata": {"name": "pool"},
        "spec": {
            "replicas": N,
            "template": {
                "llm": {
                    "baseURL": base_url,
                    "apiKeySecretRef": {"name": "llm-credentials", "key": "api-key"},
                },
                **template,
            },
        },
    }


def warm_round(
    dc: DevCluster, llm: Any, names: list[str], tag: str, source: str | None = None
) -> tuple[list[float], int, list[str]]:
    """Fill a fresh pool of N warm pods, then create N sessions naming it at once, with this
    checkout's operator or (``source``) another checkout's. Returns create → run started
    (seconds), how many were adopted, and the operator's adoption histogram lines."""
    with (
        dc.namespace(f"bench-warm-{tag}") as ns,
        operator(dc, ns, **IMAGE_ENV) as op,
    ):
        if source is not None:  # that checkout's operator instead, with this one's CRDs and RBAC
            src = Path(source).resolve()
            op.stop_all()
            op.use_checkout(src)
            op.start()
        apply_in(dc, ns, [SECRET, pool_manifest(llm.base_url)])
        wait(f"{N} Ready warm pods", lambda: _ready_warm(dc, ns) >= N, cap=600)
        created: dict[str, float] = {}
        warm = batch(dc, ns, llm, names, created, warmPoolRef={"name": "pool"})
        adopted = _adopted(dc, ns)
        split = _split(dc, ns, llm, created)
        hist = [
            line
            for line in op.metrics().splitlines()
            if line.startswith("berth_operator_warm_adoption_seconds_")
            and ("_sum" in line or "_count" in line)
        ] + [split]
    return warm, adopted, hist


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--warm", action="store_true", help="(how bench/placement.py calls this)")
    parser.add_argument(
        "--baseline-src",
        help="also run the warm batch with the operator of this checkout (e.g. a git worktree "
        "of an older commit), alternating with this one's, in the same run",
    )
    parser.add_argument("--rounds", type=int, default=1, help="warm batches per operator")
    args = parser.parse_args(argv)
    dc = DevCluster.ensure()
    script = {"turns": [{"text": "done"}], "on_exhausted": "repeat_last"}
    names = [f"s{i:03d}" for i in range(N)]
    print(f"N={N} sessions at once, real nodes {dc.nodes}")
    rounds: dict[str, list[tuple[list[float], int]]] = {"this": [], "baseline": []}
    with scripted_model(script) as llm:
        with dc.namespace("bench-cold") as ns, operator(dc, ns, **IMAGE_ENV):
            apply_in(dc, ns, [SECRET])
            time.sleep(2)  # operator leading, watches established
            cold = batch(dc, ns, llm, names)
        for k in range(args.rounds):
            sides = [("this", None)]
            if args.baseline_src:
                sides.append(("baseline", args.baseline_src))
                if k % 2:
                    sides.reverse()  # alternate which goes first: the machine drifts
            for side, source in sides:
                warm, adopted, hist = warm_round(dc, llm, names, f"{side}-{k}", source)
                rounds[side].append((warm, adopted))
                print(
                    f"round {k + 1} {side}: warm p50 {pct(warm, 50) * 1000:.0f} ms, "
                    f"p99 {pct(warm, 99) * 1000:.0f} ms; adopted {adopted}/{N}; " + "; ".join(hist),
                    flush=True,
                )
    print(
        f"cold (pod created): create→run started p50 {pct(cold, 50) * 1000:.0f} ms, "
        f"p99 {pct(cold, 99) * 1000:.0f} ms, max {max(cold) * 1000:.0f} ms"
    )
    for side, results in rounds.items():
        if not results:
            continue
        p50s = [pct(w, 50) for w, _ in results]
        p99s = [pct(w, 99) for w, _ in results]
        print(
            f"warm (adopted), {side}: create→run started p50 "
            f"{', '.join(f'{v * 1000:.0f}' for v in p50s)} ms (median "
            f"{statistics.median(p50s) * 1000:.0f}), p99 "
            f"{', '.join(f'{v * 1000:.0f}' for v in p99s)} ms (median "
            f"{statistics.median(p99s) * 1000:.0f}); adopted "
            f"{', '.join(str(a) for _, a in results)} of {N}; warm/cold p50 "
            f"{statistics.median(p50s) / pct(cold, 50):.3f}x, p99 "
            f"{statistics.median(p99s) / pct(cold, 99):.3f}x"
        )
    if rounds["baseline"]:
        mine = statistics.median(pct(w, 99) for w, _ in rounds["this"])
        base = statistics.median(pct(w, 99) for w, _ in rounds["baseline"])
        print(f"warm p99 median, this / baseline: {mine / base:.3f}x")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
