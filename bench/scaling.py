"""Benchmark: LaneWorker reaction time to a burst, at polling intervals 1 s and 5 s.

    .venv/bin/python bench/scaling.py [--intervals 1 5] [--runs 3] [--sessions 4] [--tasks 40]
    .venv/bin/python bench/scaling.py --intervals 1 --runs 3 --baseline-src /tmp/berth-base
                    # each run also with another checkout's operator, alternating, same run
    .venv/bin/python bench/scaling.py --intervals 1 --runs 3 --baseline-image IMAGE
                    # ... or with the worker pods of another image (this checkout's operator)

Needs the dev cluster (``make cluster-up``; started here if it is not up). Per run: a fresh
LaneWorker (``targetTasksPerReplica`` 40, concurrency 8, ``scaleDownStabilizationSeconds`` 5,
source ``broker``), ``--sessions`` session-simulator pods (``tests/e2e/autoscaling_support.py``:
they publish with the session runtime's ``RedisTaskTransport``) that wait for a go signal, then a
random delay in ``[0, interval)`` so the burst lands at a random phase of the polling tick, then
the burst. A sampler reads the Deployment every 0.2 s.

Printed figures, per interval (min / median / max over the runs):

- **decision**: burst -> the Deployment's ``spec.replicas`` reaches the burst's size
  ``ceil(sessions * tasks / 40)`` (the operator read pressure and scaled);
- **ready**: burst -> that many worker pods Ready (decision + container start on a real node +
  the worker's readiness probe, period 1 s);
- **drain**: burst -> every task answered;
- the new worker pods' steps (median over the pods of a run): burst -> first seen (created),
  bound to a node, container running, Ready, as a pod watch sees them; and burst -> the last of
  them Ready (the workers all serve then; **ready** above also waits for the ReplicaSet and
  Deployment controllers to count them).

Timing is printed, never asserted. The KEDA comparison is in the printed note: KEDA's documented
defaults are ``pollingInterval: 30`` s and ``cooldownPeriod: 300`` s (keda.sh, ScaledObject
specification); scale-from-zero is done by KEDA's own loop at the polling interval, and 1 -> N by
the HPA it creates (``--horizontal-pod-autoscaler-sync-period`` 15 s by default).
"""

from __future__ import annotations

import argparse
import math
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from berth_operator.builders.laneworker import selector_string  # noqa: E402
from podsteps import STEPS, PodSteps  # noqa: E402  (bench/, the script's own directory)

from tests.cluster import DevCluster  # noqa: E402
from tests.e2e.autoscaling_support import (  # noqa: E402
    Harness,
    Sampler,
    first,
    laneworker_manifest,
)
from tests.integration.operator.harness import OperatorProcess, install_crds  # noqa: E402

TARGET = 40
CONCURRENCY = 8
DOWN_WINDOW = 5

KEDA_NOTE = """\
KEDA comparison (documented defaults, keda.sh ScaledObject spec): pollingInterval 30 s,
cooldownPeriod 300 s. From zero, KEDA notices a burst on its next poll: 0-30 s, 15 s on average,
before the first replica is even requested; the HPA it creates then takes 1 -> N on its own
15 s sync period. Scale to zero waits cooldownPeriod (300 s) after the last active poll. Berth's
loop reads lag+pending of the consumer group every pollingIntervalSeconds (default 5 s; 1 s
here) and scales 0 -> N at once (in two ticks when a tick lands mid-burst), so its decision
time is about one polling interval plus one API call, and its scale-to-zero waits
scaleDownStabilizationSeconds (default 300 s, the HPA's own default, 5 s in this bench).
The pod start-up after the decision is the same for both: the 'ready - decision' part above."""


class WorkerPodSteps(PodSteps):
    """The new worker pods of LaneWorker ``lw``: where a scale-up's time goes after the
    decision."""

    def __init__(self, api: Any, namespace: str, lw: str) -> None:
        super().__init__(api, namespace, selector_string(lw))

    def after(self, t0: float) -> dict[str, float]:
        """Medians over the pods first seen after ``t0``: seconds from ``t0`` to each step; and
        ``last_ready``, to the last of them seen Ready."""
        new = [s for s in self.at.values() if s["seen"] >= t0]
        if not new:
            print(f"no new worker pod seen ({len(self.at)} before; last error {self.error!r})")
        ready = [s["ready"] - t0 for s in new if "ready" in s]
        return {
            **{
                step: statistics.median([s[step] - t0 for s in new if step in s] or [float("nan")])
                for step in STEPS
            },
            "last_ready": max(ready) if len(ready) == len(new) and ready else float("nan"),
        }


def run_once(
    h: Harness, interval: int, index: int, sessions: int, tasks: int, image: str | None = None
) -> dict[str, float]:
    """One burst onto a new LaneWorker (``image``: its pods' image, default the operator's)."""
    lw = f"b{interval}-{index}-{random.randrange(16**4):04x}"
    manifest = laneworker_manifest(
        lw,
        concurrency=CONCURRENCY,
        max_replicas=10,
        scaling={
            "targetTasksPerReplica": TARGET,
            "pollingIntervalSeconds": interval,
            "scaleDownStabilizationSeconds": DOWN_WINDOW,
        },
    )
    if image:
        manifest["spec"]["image"] = image
    h.apply(manifest)
    h.wait_pool_idle(lw)
    sims = h.start_sims(lw, "go", count=sessions, tasks=tasks, command="sleep 2")
    h.wait_sims_ready(sims)
    time.sleep(random.uniform(0, interval))
    pods = WorkerPodSteps(h.api, h.namespace, lw)
    pods.start()
    with Sampler(h.api, h.namespace, [lw], every=0.1) as sampler:
        t_go = h.go(lw, "go")
        results = h.results(lw, "go", sessions)
        end = time.monotonic() + 60
        while time.monotonic() < end:  # the pods may get Ready after the last answer
            now = sampler.of(lw)
            top = max(s.spec_replicas for s in now)
            if top and any(s.t >= t_go and s.ready_replicas >= top for s in now):
                break
            time.sleep(0.2)
    pods.stop.set()
    samples = sampler.of(lw)
    # The replicas the scaler settled on for this burst (a tick landing mid-burst may first set
    # fewer; by the next tick the workers may already have drained part of it).
    peak = max(s.spec_replicas for s in samples)
    decided = first(samples, lambda s: s.spec_replicas >= peak, after=t_go)
    first_up = first(samples, lambda s: s.spec_replicas > 0, after=t_go)
    ready = first(samples, lambda s: s.ready_replicas >= peak, after=t_go)
    lost = sum(r["worker_lost"] for r in results)
    h.cluster.kubectl("-n", h.namespace, "delete", "laneworker", lw, "--wait=false")
    h.delete_sims(lw)
    if decided is None or ready is None or first_up is None or peak == 0:
        raise RuntimeError(f"{lw}: never scaled up; samples: {samples[-3:]}")
    return {
        "replicas": float(peak),
        "first": first_up.t - t_go,
        "decision": decided.t - t_go,
        "ready": ready.t - t_go,
        "drain": max(r["t_done"] for r in results) - t_go,
        "worker_lost": float(lost),
        **{f"pod_{k}": v for k, v in pods.after(t_go).items()},
    }


def summary(values: list[float]) -> str:
    return f"{min(values):6.2f} / {statistics.median(values):6.2f} / {max(values):6.2f}"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--intervals", type=int, nargs="+", default=[1, 5])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--sessions", type=int, default=4)
    parser.add_argument("--tasks", type=int, default=40)
    parser.add_argument(
        "--baseline-src",
        help="also run every burst with the operator of this checkout (e.g. a git worktree of "
        "an older commit), alternating with this one's, in the same run",
    )
    parser.add_argument(
        "--baseline-image",
        help="also run every burst with worker pods of this image (e.g. an older commit's dev "
        "image), alternating with the dev cluster's, in the same run",
    )
    args = parser.parse_args()

    cluster = DevCluster.ensure()
    install_crds(cluster)
    figures: dict[tuple[str, int], list[dict[str, float]]] = {}
    with (
        cluster.namespace("bench-scaling") as ns,
        tempfile.TemporaryDirectory(prefix="berth-bench-") as tmp,
    ):
        op = OperatorProcess(
            cluster,
            ns,
            Path(cluster.kubeconfig),
            Path(tmp),
            BERTH_LEADER_ELECTION="false",
        )
        op.start()
        try:
            h = Harness(cluster, ns, str(ROOT))
            sides: list[tuple[str, Path, str | None]] = [("this", ROOT, None)]
            if args.baseline_src or args.baseline_image:
                base = Path(args.baseline_src).resolve() if args.baseline_src else ROOT
                sides.append(("baseline", base, args.baseline_image))
            running = ROOT
            for interval in args.intervals:
                for index in range(args.runs):
                    order = sides if index % 2 == 0 else sides[::-1]  # the machine drifts
                    for side, src, image in order:
                        if src != running:  # that checkout's operator, this one's CRDs and RBAC
                            op.stop_all()
                            op.use_checkout(src)
                            op.start()
                            running = src
                        fig = run_once(h, interval, index, args.sessions, args.tasks, image)
                        figures.setdefault((side, interval), []).append(fig)
                        print(
                            f"{side} interval {interval}s run {index}: {fig['replicas']:.0f} "
                            f"replicas, first scale-up {fig['first']:.2f}s decision "
                            f"{fig['decision']:.2f}s ready {fig['ready']:.2f}s drain "
                            f"{fig['drain']:.2f}s worker lost {fig['worker_lost']:.0f}; last new "
                            f"pod Ready {fig['pod_last_ready']:.2f}s; new pods "
                            "(median, from the burst): "
                            + ", ".join(f"{k} {fig['pod_' + k]:.2f}s" for k in STEPS),
                            flush=True,
                        )
        except BaseException:
            print(op.logs(), file=sys.stderr)
            raise
        finally:
            op.stop_all()

    peak = math.ceil(args.sessions * args.tasks / TARGET)
    print()
    print(
        f"burst: {args.sessions} sessions x {args.tasks} tasks (sleep 2 s), target {TARGET} "
        f"tasks/replica -> {peak} replicas of concurrency {CONCURRENCY}; "
        f"{args.runs} runs per interval; seconds, min / median / max"
    )
    print(
        f"{'operator':>8} | {'polling':>8} | {'burst -> decision':>24} | "
        f"{'burst -> replicas Ready':>24} | {'burst -> all answered':>24}"
    )
    rows: list[Any] = []
    for (side, interval), figs in figures.items():
        rows.append(
            f"{side:>8} | {interval:>7}s | {summary([f['decision'] for f in figs]):>24} | "
            f"{summary([f['ready'] for f in figs]):>24} | {summary([f['drain'] for f in figs]):>24}"
        )
    print("\n".join(rows))
    for (side, interval), figs in figures.items():
        print(
            f"{side:>8} | {interval:>7}s | new worker pods, burst -> "
            + "; ".join(f"{k} {summary([f['pod_' + k] for f in figs]).strip()}" for k in STEPS)
            + f"; last Ready {summary([f['pod_last_ready'] for f in figs]).strip()}"
        )
    for interval in args.intervals:
        mine, base = figures.get(("this", interval)), figures.get(("baseline", interval))
        if mine and base:
            ratio = {
                k: statistics.median(f[k] for f in mine) / statistics.median(f[k] for f in base)
                for k in ("decision", "ready", "pod_last_ready")
            }
            print(
                f"{interval}s polling, this / baseline (medians): decision "
                f"{ratio['decision']:.2f}x, replicas Ready {ratio['ready']:.2f}x, last new pod "
                f"Ready {ratio['pod_last_ready']:.2f}x"
            )
    lost = sum(f["worker_lost"] for v in figures.values() for f in v)
    print(f"tasks answered 'worker lost': {lost:.0f}")
    print()
    print(KEDA_NOTE)
    return 0


if __name__ == "__main__":
    sys.exit(main())
