"""Benchmark: ``kubectl drain`` of a node running N Berth sessions vs the same with plain pods.

Setup (real pieces, as in tests/e2e/test_passivation.py): the dev cluster's two real nodes (A,
B; kubelet + containerd, pods are containers of Berth's image), ``berth-operator`` as a
subprocess with its PDBs and its pods/eviction webhook, N AgentSessions (default 20) running a
scripted conversation of bash rounds against the scripted model, all placed on A. Then
``kubectl drain A --ignore-daemonsets --delete-emptydir-data`` and, once every session finished
on B, the same drain of a Deployment of N plain pods (a shell in Berth's image; no Berth, no
PDB) placed on A the same way; their shell exits on SIGTERM, so the baseline is the drain itself,
not a 30 s grace period.

Prints, from each session's ``status.passivation`` (millisecond timestamps): p50/p99 of the
passivation latency (request → pod ended, operator clock) and of the resume latency (pod ended →
the resumed run started, as the replacement's runtime reports it; before the runtime reported
that, the operator's first look at the run running, at its status refresh, 0.5 s here), the total
drain time for both cases, and how long until every session ran again. The resumed run's first
model request, on the model's own clock, is printed beside it. Nothing is asserted.

    .venv/bin/python bench/drain.py          # N=20 (BERTH_BENCH_N to change)
    .venv/bin/python bench/drain.py --warm   # also the same drain with a SessionWarmPool on B

A change is compared in one run with ``--baseline-image IMAGE`` (another session image) and/or
``--baseline-src DIR`` (another checkout's operator, e.g. a git worktree of an older commit), with
``--rounds K`` (default 2): only the drains with a pool, K on each side, alternating (the side
under test runs this checkout's operator and ``BERTH_BENCH_IMAGE``, else the dev cluster's image).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import statistics
import sys
import tempfile
import time
from collections import Counter
from datetime import datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "operator")]

from kubernetes import config  # noqa: E402

from bench.cpu import FsyncProbe, busy_seconds, by_name, processes, top  # noqa: E402
from bench.podsteps import PodSteps  # noqa: E402
from bench.warm_placement import first_request, pct, pool_manifest  # noqa: E402
from tests.cluster import DevCluster  # noqa: E402
from tests.e2e.passivation_support import (  # noqa: E402
    PrivateNodes,
    apply,
    delete_webhook_configurations,
    drain,
    operator_env,
    private_nodes,
    session_doc,
    status,
    step_script,
    wait,
    webhook_env,
)
from tests.integration.operator.harness import SECRET, operator, scripted_model  # noqa: E402

N = int(os.environ.get("BERTH_BENCH_N", "20"))
ROUNDS = int(os.environ.get("BERTH_BENCH_ROUNDS", "150"))
"""Rounds of each scripted run (≈0.6 s each): long enough that no run ends before all N run on
A and the drain has passivated them (the runs' round limit is raised to match)."""
IMAGE = os.environ.get("BERTH_BENCH_IMAGE", "")
"""``BERTH_BENCH_IMAGE``: the image sessions and plain pods run (default: the dev cluster's)."""


def _t(value: str | None) -> datetime | None:
    return datetime.fromisoformat(value.replace("Z", "+00:00")) if value else None


def _phase_count(dc: DevCluster, ns: str) -> dict[str, int]:
    items = json.loads(dc.kubectl("-n", ns, "get", "agentsessions", "-o", "json").stdout)["items"]
    out: dict[str, int] = {}
    for item in items:
        phase = (item.get("status") or {}).get("phase", "")
        out[phase] = out.get(phase, 0) + 1
    return out


ADOPTED_LINE = re.compile(
    r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d),(\d{3}) INFO berth\.operator\.warm: "
    r"[^/\s]+/(\S+): adopted warm pod \S+ of pool \S+ \(epoch (\d+)\)"
)
"""The operator's log line for a done adoption (its ``asctime``, local time, and the session)."""


def _adoptions(log_dir: Path, epoch: int) -> dict[str, float]:
    """Per session name, when the operator logged the adoption of a warm pod for ``epoch``
    (epoch seconds; the adopt call answered and the pod relabelled)."""
    done: dict[str, float] = {}
    for path in sorted(log_dir.glob("operator-*.log")):
        for line in path.read_text(errors="replace").splitlines():
            m = ADOPTED_LINE.match(line)
            if m and int(m.group(4)) == epoch:
                at = time.mktime(time.strptime(m.group(1), "%Y-%m-%d %H:%M:%S"))
                done.setdefault(m.group(3), at + int(m.group(2)) / 1000)
    return done


def _bench_namespaces(dc: DevCluster) -> list[str]:
    """The ``bench-drain-*`` namespaces that still exist (deleted ones included until gone)."""
    out = dc.kubectl("get", "namespaces", "-o", "name").stdout.split()
    return [n for n in out if n.startswith("namespace/bench-drain-")]


def _resumed_or_ended(dc: DevCluster, ns: str) -> int:
    """Sessions whose passivation record says resumed, or whose run ended."""
    items = json.loads(dc.kubectl("-n", ns, "get", "agentsessions", "-o", "json").stdout)["items"]
    return sum(
        1
        for item in items
        if ((item.get("status") or {}).get("passivation") or {}).get("resumedAt")
        or (item.get("status") or {}).get("phase") in ("Succeeded", "Failed")
    )


def _all_running_on(dc: DevCluster, ns: str, names: list[str], node: str) -> bool:
    items = json.loads(dc.kubectl("-n", ns, "get", "agentsessions", "-o", "json").stdout)["items"]
    ready = 0
    for item in items:
        st = item.get("status") or {}
        if (
            item["metadata"]["name"] in names
            and st.get("phase") == "Running"
            and st.get("nodeName") == node
            and ((st.get("checkpoint") or {}).get("turn") or 0) >= 1
        ):
            ready += 1
    return ready == len(names)


FILL_TAINT = "bench.berth.dev/pool-filling"
"""Taint key that keeps the pool's pods off node A while it fills (not a disruption taint)."""


def _warm_pool_on(dc: DevCluster, ns: str, base_url: str, nodes: PrivateNodes) -> None:
    """A SessionWarmPool of N pods matching the sessions' template, all on B: A carries a
    ``NoSchedule`` taint of the bench's own while the pool fills. Not a cordon: a cordon is a
    drain signal, and the sessions on A would passivate before the pool exists."""
    pool = pool_manifest(base_url, placement=nodes.placement())

    def ready_on_b() -> bool:
        items = json.loads(
            dc.kubectl(
                "-n", ns, "get", "pods", "-l", "berth.dev/warm-pool=pool", "-o", "json"
            ).stdout
        )["items"]
        return (
            sum(
                1
                for p in items
                if p["spec"].get("nodeName") == nodes.b
                and any(
                    c["type"] == "Ready" and c["status"] == "True"
                    for c in (p.get("status") or {}).get("conditions") or []
                )
            )
            >= N
        )

    dc.kubectl("taint", "nodes", nodes.a, f"{FILL_TAINT}=pool:NoSchedule", "--overwrite")
    try:
        apply(dc, ns, [pool])
        wait(f"{N} Ready warm pods on {nodes.b}", ready_on_b, cap=600, every=1)
    finally:
        dc.kubectl("taint", "nodes", nodes.a, f"{FILL_TAINT}-", check=False)


def berth_drain(
    dc: DevCluster,
    nodes: PrivateNodes,
    warm: bool = False,
    image: str = IMAGE,
    source: Path | None = None,
) -> dict[str, Any]:
    """N sessions on A, drain A; latencies from status.passivation. ``warm``: the sessions name
    a SessionWarmPool, filled on B before the drain (their first pods are created: the pool does
    not exist yet), so every resume is an adoption. ``image``: the session image (default: the
    dev cluster's); ``source``: another checkout whose operator runs instead of this one's."""
    cert_dir = Path(tempfile.mkdtemp(prefix="berth-bench-wh-"))
    with (
        dc.namespace("bench-drain") as ns,
        scripted_model(step_script(ROUNDS, delay_ms=300, sleep_s=0.3)) as srv,
        operator(
            dc,
            ns,
            **operator_env(**webhook_env(dc, ns, cert_dir)),
            **({"BERTH_SESSION_IMAGE": image} if image else {}),
        ) as op,
    ):
        if source is not None:  # that checkout's operator instead, with this one's CRDs and RBAC
            op.stop_all()
            op.use_checkout(source.resolve())
            op.start()
        apply(dc, ns, [SECRET])
        names = [f"b{i:02d}" for i in range(N)]
        extra: dict[str, Any] = {"limits": {"maxToolRounds": ROUNDS + 10}}
        if warm:
            extra["warmPoolRef"] = {"name": "pool"}
        dc.kubectl("cordon", nodes.b)
        try:
            docs = {n: session_doc(n, srv.base_url, nodes, 120, **extra) for n in names}
            apply(dc, ns, list(docs.values()))
            wait(
                f"{N} sessions running on {nodes.a}",
                lambda: _all_running_on(dc, ns, names, nodes.a),
                cap=600,
                every=1,
            )
        finally:
            dc.kubectl("uncordon", nodes.b)
        if warm:
            _warm_pool_on(dc, ns, srv.base_url, nodes)
        phases = _phase_count(dc, ns)
        ended = phases.get("Succeeded", 0) + phases.get("Failed", 0)
        if ended:
            raise RuntimeError(
                f"{ended} of {N} runs ended before the drain (the pool filled too slowly): "
                "raise BERTH_BENCH_ROUNDS"
            )
        pods = PodSteps(config.new_client_from_config(config_file=dc.kubeconfig), ns)
        pods.start()
        time.sleep(0.5)  # the watch's first list
        drain_started = time.time()
        procs0, busy0 = processes(), busy_seconds()
        fsyncs = FsyncProbe(Path(dc.shared_dir))  # the disk the session stores are on
        fsyncs.start()
        res, drain_seconds = drain(dc, nodes.a, 600, "-v=6")  # -v=6: its requests, timed
        if res.returncode != 0:
            raise RuntimeError(f"drain failed: {res.stderr}")
        wait(
            "every session resumed or finished",
            lambda: _resumed_or_ended(dc, ns) == N,
            cap=900,
            every=1,
        )
        busy, wall = busy_seconds() - busy0, time.time() - drain_started
        fsyncs.stop.set()
        pods.stop.set()
        own, reaped = by_name(procs0, processes())
        cpu = (
            f"{busy:.1f} CPU-s in {wall:.1f} s ({busy / wall / (os.cpu_count() or 1):.0%} of "
            f"{os.cpu_count()} cores); by process: {top(own)}; by the parents of processes "
            f"that ended: {top(reaped, 3)}; a 4 KiB write + fsync on the stores' disk: "
            f"{fsyncs.summary()}"
        )
        pas: list[float] = []
        res_l: list[float] = []
        to_request: list[float] = []  # pod ended -> the resumed run's first model request
        downtime: list[float] = []  # passivation requested -> that request
        to_seen: list[float] = []  # that request -> the operator records the resume
        to_adopted: list[float] = []  # pod ended -> the operator adopted a warm pod
        adopted_to_request: list[float] = []  # -> the resumed run's first model request
        adopted_at = _adoptions(op.log_dir, epoch=2) if warm else {}
        if keep := os.environ.get("BERTH_BENCH_LOG_DIR"):  # the operator's log, for a trace
            kept = Path(keep) / ns
            kept.mkdir(parents=True, exist_ok=True)
            for log in op.log_dir.glob("operator-*.log"):
                shutil.copy(log, kept / log.name)
            (kept / "kubectl-drain.log").write_text(res.stderr)
            for name in names:  # and the resumed pods' own logs (the session process)
                pod = status(dc, ns, name).get("podName")
                if pod:
                    out = dc.kubectl("-n", ns, "logs", pod, check=False).stdout
                    (kept / f"{name}-{pod}.log").write_text(out)
        last_resume: datetime | None = None
        first_passivation: datetime | None = None
        timeline: dict[str, dict[str, float | None]] = {}  # per session, kept with the logs
        for name in names:
            p = status(dc, ns, name).get("passivation") or {}
            req, done, back = (
                _t(p.get("requestedAt")),
                _t(p.get("passivatedAt")),
                _t(p.get("resumedAt")),
            )
            if req and done:
                pas.append((done - req).total_seconds())
                first_passivation = min(first_passivation or req, req)
            if done and back:
                res_l.append((back - done).total_seconds())
                last_resume = max(last_resume or back, back)
                prompt = docs[name]["spec"]["prompt"]
                asked = first_request(srv, prompt, after=done.timestamp())
                if asked is not None:
                    to_request.append(asked - done.timestamp())
                    if req is not None:
                        downtime.append(asked - req.timestamp())
                    to_seen.append(back.timestamp() - asked)
                timeline[name] = {"ended": done.timestamp(), "asked": asked}
                if name in adopted_at:
                    timeline[name]["adopted"] = adopted_at[name]
                    to_adopted.append(adopted_at[name] - done.timestamp())
                    if asked is not None:
                        adopted_to_request.append(asked - adopted_at[name])
        if keep:
            (Path(keep) / ns / "timeline.json").write_text(json.dumps(timeline, indent=1))
        all_back = (
            (last_resume - first_passivation).total_seconds()
            if last_resume and first_passivation
            else float("nan")
        )
        dc.kubectl("uncordon", nodes.a)
        adopted = sum(
            1
            for name in names
            if any(
                r.get("podName", "").startswith("pool-w-")
                for r in status(dc, ns, name).get("runs") or []
            )
        )
        return {
            "adopted": adopted,
            "drain_seconds": drain_seconds,
            "passivation": pas,
            "resume": res_l,
            "resume_to_request": to_request,
            "downtime": downtime,
            "request_to_seen": to_seen,
            "ended_to_adopted": to_adopted,
            "adopted_to_request": adopted_to_request,
            "retries": res.stderr.count("will retry"),
            "retried": Counter(re.findall(r'evicting pods/"([^"]+)".*will retry', res.stderr)),
            "first_request_to_last_resume": all_back,
            "phases": _phase_count(dc, ns),
            "held": _held(pods, nodes.a, drain_started),
            "last_requests": _last_requests(res.stderr),
            "refills": sorted(
                steps["seen"] - drain_started
                for pod, steps in pods.at.items()
                if pod.startswith("pool-w-") and steps["seen"] > drain_started
            ),
            "cpu": cpu,
        }


def _last_requests(log: str, count: int = 5) -> list[str]:
    """The last ``count`` API requests of a ``kubectl -v=6`` log, as ``+S.SS VERB URL-path
    STATUS``, seconds from its first request: what the drain did last before it returned."""
    answer = (
        r'^I\d{4} (\d\d):(\d\d):(\d\d\.\d+).*?"Response" verb="(\w+)" '
        r'url="https?://[^/]+([^"?]+)[^"]*" status="([^"]*)"'
    )
    lines = re.findall(answer, log, re.M)
    if not lines:
        return []
    t = [int(h) * 3600 + int(m) * 60 + float(s) for h, m, s, *_ in lines]
    return [
        f"+{t[i] - t[0]:.2f} {verb} {path.rsplit('/namespaces/', 1)[-1]} {status}"
        for i, (_, _, _, verb, path, status) in enumerate(lines)
    ][-count:]


def _held(pods: PodSteps, node: str, t0: float) -> list[tuple[float, float, str]]:
    """What the drain of ``node`` (started at ``t0``) waited for: per pod that was on it, seconds
    from ``t0`` until it was seen being deleted and seen gone (nan: not seen), latest gone first,
    with its name. ``kubectl drain`` returns once the last of them is gone."""
    nan = float("nan")
    on = [(name, steps) for name, steps in pods.at.items() if pods.node.get(name) == node]
    held = [
        (steps.get("deleting", nan) - t0, steps.get("gone", nan) - t0, name) for name, steps in on
    ]
    return sorted(held, key=lambda h: -h[1] if h[1] == h[1] else float("-inf"))


def plain_drain(dc: DevCluster, nodes: PrivateNodes) -> float:
    """A Deployment of N pods on A that exit on SIGTERM (no Berth, no PDB), drain A; seconds."""
    with dc.namespace("bench-plain") as ns:
        deployment = {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {"name": "plain"},
            "spec": {
                "replicas": N,
                "selector": {"matchLabels": {"app": "plain"}},
                "template": {
                    "metadata": {"labels": {"app": "plain"}},
                    "spec": {
                        **nodes.placement(),
                        "containers": [
                            {
                                "name": "c",
                                "image": IMAGE or dc.image,
                                "imagePullPolicy": "Never",
                                # Exits on SIGTERM like a well-behaved server would (a bare
                                # ``sleep`` as PID 1 ignores it and waits out the grace period).
                                "command": ["sh", "-c", "trap 'exit 0' TERM; sleep 3600 & wait"],
                            }
                        ],
                    },
                },
            },
        }
        dc.kubectl("cordon", nodes.b)
        try:
            apply(dc, ns, [deployment])
            wait(
                f"{N} plain pods Running",
                lambda: (
                    json.loads(dc.kubectl("-n", ns, "get", "deploy", "plain", "-o", "json").stdout)[
                        "status"
                    ].get("readyReplicas", 0)
                    == N
                ),
                cap=600,
                every=1,
            )
        finally:
            dc.kubectl("uncordon", nodes.b)
        res, seconds = drain(dc, nodes.a, timeout=600)
        if res.returncode != 0:
            raise RuntimeError(f"plain drain failed: {res.stderr}")
        dc.kubectl("uncordon", nodes.a)
        return seconds


def report(title: str, berth: dict[str, Any]) -> None:
    pas, res = berth["passivation"], berth["resume"]
    print(title)
    print(f"  sessions passivated: {len(pas)}/{N}; resumed: {len(res)}; phases: {berth['phases']}")
    if berth.get("adopted"):
        print(f"  sessions resumed on an adopted warm pod: {berth['adopted']}/{N}")
    print(
        f"  passivation (request -> pod ended): p50 {pct(pas, 50):.2f}s  p99 {pct(pas, 99):.2f}s"
        f"  mean {statistics.fmean(pas) if pas else float('nan'):.2f}s"
    )
    print(f"  resume (pod ended -> run started): p50 {pct(res, 50):.2f}s", end="")
    print(f"  p99 {pct(res, 99):.2f}s")
    asked, seen = berth.get("resume_to_request") or [], berth.get("request_to_seen") or []
    print(
        f"    pod ended -> resumed run's first model request: p50 {pct(asked, 50):.2f}s"
        f"  p99 {pct(asked, 99):.2f}s; that request -> resume recorded: p50 {pct(seen, 50):.2f}s"
        f"  p99 {pct(seen, 99):.2f}s"
    )
    adopt, started = berth.get("ended_to_adopted") or [], berth.get("adopted_to_request") or []
    if adopt:
        print(
            f"    pod ended -> warm pod adopted (operator log): p50 {pct(adopt, 50):.2f}s"
            f"  p99 {pct(adopt, 99):.2f}s; adopted -> first model request: p50"
            f" {pct(started, 50):.2f}s  p99 {pct(started, 99):.2f}s"
        )
        print(
            "    the slowest five of each: "
            + ", ".join(f"{x:.2f}" for x in sorted(adopt)[-5:])
            + "; "
            + ", ".join(f"{x:.2f}" for x in sorted(started)[-5:])
        )
    down = berth.get("downtime") or []
    print(
        f"  passivation requested -> resumed run's first model request: p50 {pct(down, 50):.2f}s"
        f"  p99 {pct(down, 99):.2f}s"
    )
    back = berth["first_request_to_last_resume"]
    print(f"  first request -> last session running again: {back:.1f}s")
    retries = berth["retries"]
    print(f"  kubectl drain with Berth: {berth['drain_seconds']:.1f}s ({retries} eviction retries)")
    print(f"    drain started -> every session running again: {berth.get('cpu')}")
    if refills := berth.get("refills"):
        print(
            f"    warm pods created after the drain started: {len(refills)}, the first at "
            f"+{refills[0]:.1f} s, the last at +{refills[-1]:.1f} s"
        )
    if berth.get("last_requests"):
        print("    kubectl's last requests: " + "; ".join(berth["last_requests"]))
    twice = sorted(pod for pod, n in (berth.get("retried") or {}).items() if n > 1)
    if twice:
        print(f"    evictions refused more than once: {', '.join(twice)}")
    held = berth.get("held") or []
    print(
        "    pods gone last (deletion seen / gone, s after the drain started): "
        + ", ".join(f"{name} {d:.1f}/{g:.1f}" for d, g, name in held[:4])
    )


def compare(dc: DevCluster, image: str | None, source: Path | None, rounds: int) -> int:
    """``rounds`` drains with a pool per side, alternating: this checkout with its image, and
    ``image`` (default: the same) with ``source``'s operator (default: this one's); resume
    figures side by side."""
    mine = IMAGE or dc.image
    sides = [("now", mine, None), ("base", image or mine, source)]
    runs: dict[str, list[dict[str, Any]]] = {tag: [] for tag, _, _ in sides}
    with private_nodes(dc) as nodes:
        try:
            for k in range(rounds):
                for tag, img, src in sides:
                    what = f"{img}, operator of {src or ROOT}"
                    print(f"round {k + 1}: {tag} ({what})", file=sys.stderr, flush=True)
                    runs[tag].append(berth_drain(dc, nodes, warm=True, image=img, source=src))
                    # the next round starts on quiet nodes: the last one's pods gone
                    wait("the round's namespace gone", lambda: not _bench_namespaces(dc), 600, 2)
        finally:
            delete_webhook_configurations(dc, "berth-eviction-bench-")
    for tag, img, src in sides:
        for k, r in enumerate(runs[tag]):
            what = f"{img}, operator of {src or ROOT}"
            report(f"{tag} ({what}), round {k + 1}, SessionWarmPool of {N} on the other node", r)
    med = {
        tag: (
            statistics.median(pct(r["resume"], 50) for r in runs[tag]),
            statistics.median(pct(r["resume"], 99) for r in runs[tag]),
        )
        for tag, _, _ in sides
    }
    for tag, (p50, p99) in med.items():
        print(f"{tag}: resume p50 median {p50:.2f}s, p99 median {p99:.2f}s")
    for tag, _, _ in sides:
        down = [(pct(r["downtime"], 50), pct(r["downtime"], 99)) for r in runs[tag]]
        print(
            f"{tag}: passivation requested -> resumed run's first model request, p50 median "
            f"{statistics.median(d[0] for d in down):.2f}s, p99 median "
            f"{statistics.median(d[1] for d in down):.2f}s"
        )
    print(
        f"now/base: resume p50 {med['now'][0] / med['base'][0]:.2f}x, "
        f"p99 {med['now'][1] / med['base'][1]:.2f}x"
    )
    return 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--warm", action="store_true", help="also drain with a SessionWarmPool on B")
    ap.add_argument("--baseline-image", help="compare pool drains against this session image")
    ap.add_argument("--baseline-src", type=Path, help="... or against this checkout's operator")
    ap.add_argument("--rounds", type=int, default=2, help="pool drains per side when comparing")
    args = ap.parse_args()
    dc = DevCluster.ensure()
    if args.baseline_image or args.baseline_src:
        return compare(dc, args.baseline_image, args.baseline_src, args.rounds)
    warm = args.warm
    with private_nodes(dc) as nodes:
        try:
            cold = berth_drain(dc, nodes)
            pooled = berth_drain(dc, nodes, warm=True) if warm else None
            plain = plain_drain(dc, nodes)
        finally:
            delete_webhook_configurations(dc, "berth-eviction-bench-")
    head = f"drain of a node with N={N} sessions ({ROUNDS}-round scripted runs), real nodes"
    report(f"{head}, no pool (pods created)", cold)
    if pooled is not None:
        report(f"{head}, SessionWarmPool of {N} on the other node", pooled)
        ratio = pct(pooled["resume"], 99) / pct(cold["resume"], 99)
        print(f"  resume p99 with a pool / without: {ratio:.3f}x")
    print(f"  kubectl drain with {N} plain pods (Deployment, no PDB): {plain:.1f}s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
