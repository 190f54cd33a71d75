"""Benchmark: time from create to Running for N AgentSessions vs N equivalent bare pods.

Both run on kwok (fake) nodes of the dev cluster (``--kwok-nodes`` of them; missing ones are
added, tainted like the cluster's own), so the figures are the control plane plus the operator,
not process start-up. The bare pods are the very pods the operator would build
(``build_session_pod``), without owner references. For each object the client-side create time,
the time a pod watch first sees the pod and the time it first sees phase Running are recorded
(monotonic clock).

For each N (a fresh operator each time) it prints: total time until every pod is Running and
p50/p99 create→Running for both, the sessions' create→pod-seen (the operator's own share), the
ratios, sessions that had two live pods at once, pods per session, the operator's reconcile
errors by kind, its peak RSS (VmHWM), the operator's API requests per session by verb and
resource (``berth_operator_api_requests_total``) and the apiserver's writes (POST/PUT/PATCH/DELETE,
from its ``apiserver_request_total``) per object for both — every component's writes, kopf's,
the scheduler's and kwok's included; and the CPU seconds each control-plane process (and the
operator) spent until every pod was Running. Figures only; nothing is asserted.

    .venv/bin/python bench/placement.py --n 100,300,1000 --kwok-nodes 100 [--json F]
    .venv/bin/python bench/placement.py --warm     # adoption from a SessionWarmPool, N=20
    .venv/bin/python bench/placement.py --n 100 --kwok-nodes 100 --memory /tmp/opmem
                                                   # where the operator's memory goes (traced)

``--cpu-profile DIR`` keeps Go CPU profiles of the apiserver, controller-manager and scheduler
over each burst (``bench/apiprofile.py``) and prints where their CPU went; ``--keep-logs DIR``
keeps the operators' logs; ``--baseline-src DIR`` also runs another
checkout's operator in the same run.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import signal
import statistics
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "operator")]

from berth_operator.api.agentsession import AgentSessionSpec  # noqa: E402
from berth_operator.builders.names import SessionRef  # noqa: E402
from berth_operator.builders.session_pod import build_session_pod  # noqa: E402
from berth_operator.settings import OperatorSettings  # noqa: E402
from kubernetes import client, config, watch  # noqa: E402

from bench.apiprofile import (  # noqa: E402
    CpuProfile,
    apiserver_fetch,
    secure_port_fetch,
    secure_port_of,
    top,
)
from tests.cluster import DevCluster  # noqa: E402
from tests.integration.operator.harness import (  # noqa: E402
    OperatorProcess,
    install_crds,
    operator_kubeconfig,
)

WORKERS = 16
SESSION_LABEL = "berth.dev/session"
WRITE_VERBS = ("POST", "PUT", "PATCH", "DELETE")
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
    """Records the monotonic time a pod of each session (``berth.dev/session`` label; the bare
    pods carry it too) is first seen, and first seen Running: whichever epoch it is, since a
    session's first pod may be replaced (a kwok node that misses its heartbeats is NodeLost)."""

    def __init__(self, api: Any, namespace: str) -> None:
        super().__init__(daemon=True)
        self.api = api
        self.namespace = namespace
        self.running: dict[str, float] = {}
        self.added: dict[str, float] = {}
        self.live: dict[str, set[str]] = {}
        """Pods of each object neither ended nor being deleted, as last seen."""
        self.most_live: dict[str, int] = {}
        """The most pods of each object seen live at once (2 or more: a duplicate pod)."""
        self.pods: dict[str, set[str]] = {}
        """Every pod name seen for each object."""
        self.stop = threading.Event()

    def run(self) -> None:
        while not self.stop.is_set():
            try:
                for ev in watch.Watch().stream(
                    self.api.list_namespaced_pod, self.namespace, timeout_seconds=5
                ):
                    pod = ev["object"]
                    key = (pod.metadata.labels or {}).get(SESSION_LABEL, pod.metadata.name)
                    self.added.setdefault(key, time.monotonic())
                    self.count_live(key, ev["type"], pod)
                    # A pod first seen Succeeded ran too (kwok completes a Job's pods soon
                    # after Running; the watch, listed again every 5 s, can miss the Running
                    # in between): counted when seen, later than it ran, which only counts
                    # against that kind.
                    ran = pod.status.phase in ("Running", "Succeeded")
                    if ran and key not in self.running:
                        self.running[key] = time.monotonic()
                    if self.stop.is_set():
                        return
            except Exception:
                time.sleep(0.1)

    def count_live(self, key: str, kind: str, pod: Any) -> None:
        """Track ``pod`` (a watch event of type ``kind``) among object ``key``'s live pods."""
        name = pod.metadata.name
        self.pods.setdefault(key, set()).add(name)
        live = self.live.setdefault(key, set())
        ended = pod.status.phase in ("Succeeded", "Failed") or pod.metadata.deletion_timestamp
        if kind == "DELETED" or ended:
            live.discard(name)
        else:
            live.add(name)
        self.most_live[key] = max(self.most_live.get(key, 0), len(live))

    def duplicates(self) -> int:
        """Objects that had two or more live pods at once."""
        return sum(1 for most in self.most_live.values() if most >= 2)

    def pods_per_object(self) -> float:
        """Distinct pods seen per object (1.00: no object needed a second pod)."""
        return sum(map(len, self.pods.values())) / max(1, len(self.pods))


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


class NeverRunning(Exception):
    """Objects whose pod was never seen Running within the bench's bound."""

    def __init__(self, missing: list[str]) -> None:
        super().__init__(f"{len(missing)} pods never Running, e.g. {missing[:5]}")
        self.missing = missing


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
        raise NeverRunning([n for n in names if pod_of(n) not in watcher.running])
    lat = [watcher.running[pod_of(n)] - created[n] for n in names]
    seen = [watcher.added[pod_of(n)] - created[n] for n in names]
    total = max(watcher.running[pod_of(n)] for n in names) - start
    return {
        "total": total,
        "p50": statistics.median(lat),
        "p99": pct(lat, 0.99),
        "seen_p50": statistics.median(seen),
        "seen_p99": pct(seen, 0.99),
    }


def status_mib(pid: int, field: str) -> float:
    """A size field of ``/proc/<pid>/status`` (``VmHWM``: peak RSS, ``VmRSS``: RSS now) in MiB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(f"{field}:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def peak_rss_mib(pid: int) -> float:
    return status_mib(pid, "VmHWM")


class SocketPeak(threading.Thread):
    """Samples how many sockets process ``pid`` has open (its fds that are sockets: apiserver
    connections, watch streams, Redis, listeners) every 0.2 s; ``peak`` is the most seen."""

    def __init__(self, pid: int) -> None:
        super().__init__(daemon=True)
        self.pid = pid
        self.peak = 0
        self.stop = threading.Event()

    def count(self) -> int:
        fds = Path(f"/proc/{self.pid}/fd")
        n = 0
        for fd in fds.iterdir():
            try:
                n += os.readlink(fd).startswith("socket:")
            except OSError:
                continue
        return n

    def run(self) -> None:
        while not self.stop.wait(0.2):
            try:
                self.peak = max(self.peak, self.count())
            except OSError:
                return


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of process ``pid`` so far, in seconds (``/proc/<pid>/stat``)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


CONTROL_PLANE = ("kube-apiserver", "etcd", "kube-controller-manager", "kube-scheduler", "kwok")


def control_plane_pids() -> dict[str, int]:
    """The dev cluster's control-plane processes by name (their binary's base name)."""
    found: dict[str, int] = {}
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            argv0 = (proc / "cmdline").read_bytes().split(b"\0", 1)[0].decode()
        except OSError:
            continue
        base = argv0.rsplit("/", 1)[-1]
        for name in CONTROL_PLANE:
            if base == name or (name == "kwok" and base == "kwok-controller"):
                found[name] = int(proc.name)
    return found


class CpuMeter:
    """CPU seconds spent by the control plane (and the operator, when given its pid) between
    construction and :meth:`read`; printed per process to show where a burst's CPU went."""

    def __init__(self, operator_pid: int | None = None) -> None:
        self.pids = control_plane_pids()
        if operator_pid is not None:
            self.pids["operator"] = operator_pid
        self.start = {k: cpu_seconds(p) for k, p in self.pids.items()}

    def read(self) -> dict[str, float]:
        return {k: cpu_seconds(p) - self.start[k] for k, p in self.pids.items()}


def cpu_line(used: dict[str, float]) -> str:
    return ", ".join(f"{k} {v:.1f}" for k, v in sorted(used.items(), key=lambda kv: -kv[1]))


def ensure_kwok_nodes(dc: DevCluster, count: int) -> None:
    """Make ``kwok-node-0`` … ``kwok-node-<count-1>`` exist (as hack/cluster-up.sh makes them)."""
    docs = [
        {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {
                "name": f"kwok-node-{i}",
                "annotations": {"node.alpha.kubernetes.io/ttl": "0", "kwok.x-k8s.io/node": "fake"},
                "labels": {
                    "kubernetes.io/hostname": f"kwok-node-{i}",
                    "kubernetes.io/os": "linux",
                    "type": "kwok",
                },
            },
            "spec": {
                "taints": [{"key": "kwok.x-k8s.io/node", "value": "fake", "effect": "NoSchedule"}]
            },
            "status": {
                "allocatable": {"cpu": "32", "memory": "256Gi", "pods": "1000"},
                "capacity": {"cpu": "32", "memory": "256Gi", "pods": "1000"},
            },
        }
        for i in range(count)
    ]
    dc.kubectl("apply", "-f", "-", input=yaml.safe_dump_all(docs), timeout=300)


_REQUEST = re.compile(r"^apiserver_request_total\{([^}]*)\} ([0-9.e+]+)$")


def apiserver_writes(dc: DevCluster) -> Counter[str]:
    """Cumulative mutating requests served by the apiserver, by resource[/subresource]."""
    out: Counter[str] = Counter()
    for line in dc.kubectl("get", "--raw", "/metrics", timeout=60).stdout.splitlines():
        m = _REQUEST.match(line)
        if not m:
            continue
        labels = dict(kv.split("=", 1) for kv in m.group(1).split(","))
        labels = {k: v.strip('"') for k, v in labels.items()}
        if labels.get("verb") not in WRITE_VERBS:
            continue
        sub = labels.get("subresource", "")
        out[labels.get("resource", "?") + (f"/{sub}" if sub else "")] += int(float(m.group(2)))
    return out


def operator_requests(metrics_text: str) -> dict[str, float]:
    """``berth_operator_api_requests_total`` as {"verb resource": count}."""
    out: dict[str, float] = {}
    for line in metrics_text.splitlines():
        if line.startswith("berth_operator_api_requests_total{"):
            labels, value = line.split("} ")
            kv = dict(p.split("=", 1) for p in labels.split("{", 1)[1].split(","))
            out[f"{kv['verb'].strip(chr(34))} {kv['resource'].strip(chr(34))}"] = float(value)
    return out


def reconcile_errors(metrics_text: str) -> dict[str, float]:
    """``berth_operator_reconcile_errors_total`` as {kind: count}, only kinds above zero."""
    out: dict[str, float] = {}
    for line in metrics_text.splitlines():
        found = re.match(r'berth_operator_reconcile_errors_total\{kind="([^"]*)"\} (\S+)', line)
        if found and float(found.group(2)) > 0:
            out[found.group(1)] = float(found.group(2))
    return out


def shared_claim(core: Any, namespace: str, cap: float = 120.0) -> None:
    """Create the namespace's shared claim as the operator would (``build_shared_claim``, class
    berth-shared) and wait until it is Bound: the session pod mounts it, so a pod of its
    template (a bare pod, a Job's, a Sandbox's) is not scheduled without it. Raises
    RuntimeError after ``cap`` seconds."""
    from berth_operator.builders.claim import build_shared_claim

    settings = OperatorSettings()
    name = settings.claims.default_name
    body = build_shared_claim(namespace, name, settings)
    body["spec"]["storageClassName"] = "berth-shared"
    core.create_namespaced_persistent_volume_claim(namespace, body)
    deadline = time.monotonic() + cap
    while core.read_namespaced_persistent_volume_claim(name, namespace).status.phase != "Bound":
        if time.monotonic() > deadline:
            raise RuntimeError(f"claim {namespace}/{name} not Bound after {cap:.0f} s")
        time.sleep(0.5)


def bench_bare(
    dc: DevCluster, core: Any, n: int, profile: Path | None = None
) -> tuple[dict[str, float], Counter[str]]:
    settings = OperatorSettings()
    spec = AgentSessionSpec.model_validate(SPEC)
    with dc.namespace("bench-pods") as ns_pods:
        shared_claim(core, ns_pods)
        watcher = RunningWatch(core, ns_pods)
        watcher.start()

        def create_pod(name: str) -> None:
            ref = SessionRef(ns_pods, name, f"bench-{name}")
            pod = build_session_pod(
                ref, spec, settings, epoch=1, resume_run_id=None, reason="Initial"
            )
            pod["metadata"].pop("ownerReferences")
            core.create_namespaced_pod(ns_pods, pod)

        before = apiserver_writes(dc)
        cpu = CpuMeter()
        prof = start_profile(dc, core, profile, f"n{n}-bare")
        names = [f"b{i:04d}" for i in range(n)]
        bare = run_batch(names, create_pod, lambda name: name, watcher)
        print(f"CPU seconds until all Running (bare pods): {cpu_line(cpu.read())}", flush=True)
        finish_profile(prof)
        time.sleep(2.0)  # let status updates of the last pods land
        writes = apiserver_writes(dc) - before
        watcher.stop.set()
        dc.kubectl("-n", ns_pods, "delete", "pods", "--all", "--wait=false", check=False)
    return bare, writes


def memory_report(proc: Any, out: Path, tag: str) -> str:
    """Ask the traced operator (``bench/traced_operator.py``) for its report (SIGUSR1), keep it
    as ``out/<tag>-memory.txt`` and return it (a note instead when none came within 120 s)."""
    before = set(out.glob("snapshot-*.txt"))
    proc.send_signal(signal.SIGUSR1)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        new = set(out.glob("snapshot-*.txt")) - before
        if new:
            time.sleep(1.0)  # written in one call, but let it finish
            path = new.pop()
            kept = out / f"{tag}-memory.txt"
            shutil.move(path, kept)
            return f"operator memory (tracemalloc, {kept}):\n{kept.read_text()}"
        time.sleep(0.5)
    return "operator memory: no tracemalloc report within 120 s"


def bench_sessions(
    dc: DevCluster,
    core: Any,
    custom: Any,
    n: int,
    source: str | None = None,
    keep_logs: Path | None = None,
    memory: Path | None = None,
    profile: Path | None = None,
) -> tuple[dict[str, float], Counter[str], float, dict[str, float]]:
    """N sessions with a fresh operator: this checkout's, or the one in ``source`` (another
    checkout of this repository, e.g. a ``git worktree`` of an older commit). With
    ``keep_logs`` the operator's log files are copied into that directory when it stops. With
    ``memory`` (this checkout only) the operator runs under tracemalloc
    (``bench/traced_operator.py``) and its report once every pod is Running is written into that
    directory and printed. With ``profile`` the CPU profiles of the apiserver, controller-manager
    and scheduler over the burst are kept in that directory and their top functions printed
    (``bench/apiprofile.py``)."""
    with (
        dc.namespace("bench-ags") as ns_ags,
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
        if source is not None:
            src = Path(source).resolve()
            # that checkout's RBAC (a rule this one dropped may be needed); the next
            # operator_kubeconfig() applies this checkout's again
            dc.kubectl("apply", "-k", str(src / "config" / "rbac"))
            op.use_checkout(src)
        elif memory is not None:
            op.command = [sys.executable, str(ROOT / "bench" / "traced_operator.py"), str(memory)]
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
        sockets = SocketPeak(proc.pid)
        sockets.start()

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

        # One session first, untimed: it makes the namespace's shared claim and its one-time
        # volume set-up (a Job on a real node), which the other kinds get before their burst
        # (``shared_claim``), so the burst measures placement and not the namespace's set-up.
        run_batch(["warmup"], create_session, lambda name: name, watcher)
        before = apiserver_writes(dc)
        cpu = CpuMeter(proc.pid)
        prof = start_profile(dc, core, profile, f"n{n}-{'baseline' if source else 'sessions'}")
        names = [f"s{i:04d}" for i in range(n)]
        try:
            sessions = run_batch(names, create_session, lambda name: name, watcher)
            print(
                f"CPU seconds until all Running ({'baseline' if source else 'this checkout'}): "
                f"{cpu_line(cpu.read())}",
                flush=True,
            )
            finish_profile(prof)
        except NeverRunning as exc:
            for name in exc.missing[:3]:  # what the stuck sessions and their pods say
                print(dc.kubectl("-n", ns_ags, "get", "ags", name, "-o", "yaml").stdout)
                print(
                    dc.kubectl(
                        "-n",
                        ns_ags,
                        "get",
                        "pods",
                        "-l",
                        f"berth.dev/session={name}",
                        "-o",
                        "wide",
                        check=False,
                    ).stdout
                )
            text = "\n".join(
                f.read_text(errors="replace") for f in Path(tmp).glob("operator-*.log")
            )
            log = "\n".join(
                line for line in text.splitlines() if any(m in line for m in exc.missing)
            )
            print(f"operator log lines about them:\n{log[-4000:]}")
            raise SystemExit(str(exc)) from None
        time.sleep(2.0)
        writes = apiserver_writes(dc) - before
        watcher.stop.set()
        sockets.stop.set()
        rss = peak_rss_mib(proc.pid)
        print(
            f"operator ({'baseline' if source else 'this checkout'}): peak open sockets "
            f"{sockets.peak}; RSS peak {rss:.1f} MiB, once all Running "
            f"{status_mib(proc.pid, 'VmRSS'):.1f} MiB",
            flush=True,
        )
        metrics = op.metrics()
        requests = operator_requests(metrics)
        errors = reconcile_errors(metrics)
        print(
            f"sessions with two live pods at once: {watcher.duplicates()}; pods per session "
            f"{watcher.pods_per_object():.2f}; reconcile errors: "
            + (", ".join(f"{k} {v:.0f}" for k, v in sorted(errors.items())) or "none"),
            flush=True,
        )
        if memory is not None and source is None:
            print(memory_report(proc, memory, f"n{n}"), flush=True)
        # Delete the sessions while the operator runs (some trees put a finalizer on each).
        dc.kubectl(
            "-n",
            ns_ags,
            "delete",
            "agentsessions",
            "--all",
            "--wait=true",
            "--timeout=600s",
            check=False,
            timeout=630,
        )
        op.stop_all()
        if keep_logs is not None:
            keep_logs.mkdir(parents=True, exist_ok=True)
            tag = f"n{n}-{'baseline' if source else 'now'}"
            for log_file in Path(tmp).glob("operator-*.log"):
                shutil.copy(log_file, keep_logs / f"{tag}-{log_file.name}")
    return sessions, writes, rss, requests


PROFILED = ("kube-controller-manager", "kube-scheduler")


def start_profile(dc: DevCluster, core: Any, out: Path | None, tag: str) -> list[CpuProfile]:
    """Start profiling the apiserver, the controller-manager and the scheduler into ``out``
    (none when ``out`` is None); the last two are read on their secure ports with the
    kubeconfig's client certificate."""
    if out is None:
        return []
    profiles = [CpuProfile(apiserver_fetch(core.api_client), out, f"{tag}-apiserver")]
    user = yaml.safe_load(Path(dc.kubeconfig).read_text())["users"][0]["user"]
    pids = control_plane_pids()
    for name in PROFILED:
        if name not in pids:
            continue
        argv = Path(f"/proc/{pids[name]}/cmdline").read_bytes().decode().split("\0")
        port = secure_port_of(argv)
        if port is not None and "client-certificate" in user:
            fetch = secure_port_fetch(
                port, Path(user["client-certificate"]), Path(user["client-key"])
            )
            profiles.append(CpuProfile(fetch, out, f"{tag}-{name}"))
    for prof in profiles:
        prof.start()
    return profiles


def finish_profile(profiles: list[CpuProfile]) -> None:
    """Stop ``profiles`` and print the top of each one's merged slices."""
    for prof in profiles:
        paths = prof.finish()
        print(prof.error or f"CPU profile ({prof.tag}, {len(paths)} slices):", flush=True)
        print(top(paths), flush=True)


def per_object(writes: Counter[str], n: int) -> str:
    most = ", ".join(f"{k} {v / n:.2f}" for k, v in writes.most_common(8))
    return f"{sum(writes.values()) / n:.2f} ({most})"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--n", default="500", help="comma-separated object counts (default 500)")
    parser.add_argument("--kwok-nodes", type=int, default=3, help="kwok nodes to spread over")
    parser.add_argument("--json", help="also write the figures here (bench/curves.py draws them)")
    parser.add_argument(
        "--baseline-src",
        help="also run the sessions with the operator of this checkout (e.g. a git worktree of "
        "an older commit), in the same run",
    )
    parser.add_argument(
        "--keep-logs", type=Path, help="copy the operators' logs into this directory"
    )
    parser.add_argument(
        "--memory",
        type=Path,
        help="run this checkout's operator under tracemalloc and write where its memory goes "
        "(once every pod is Running) into this directory; slows the operator: no timing then",
    )
    parser.add_argument(
        "--cpu-profile",
        type=Path,
        help="keep the CPU profiles of the apiserver, controller-manager and scheduler over "
        "each burst in this directory and print their top functions (`go tool pprof`)",
    )
    args = parser.parse_args()
    counts = [int(x) for x in args.n.split(",")]
    dc = DevCluster.ensure()
    install_crds(dc)
    ensure_kwok_nodes(dc, args.kwok_nodes)
    api_client = config.new_client_from_config(config_file=dc.kubeconfig)
    api_client.configuration.connection_pool_maxsize = WORKERS * 2
    core = client.CoreV1Api(api_client)
    custom = client.CustomObjectsApi(api_client)
    rows = []
    for n in counts:
        print(f"== N={n} on {args.kwok_nodes} kwok nodes", flush=True)
        bare, bare_writes = bench_bare(dc, core, n, args.cpu_profile)
        sessions, session_writes, rss, requests = bench_sessions(
            dc,
            core,
            custom,
            n,
            keep_logs=args.keep_logs,
            memory=args.memory,
            profile=args.cpu_profile,
        )
        print(
            f"bare pods    : all Running after {bare['total']:.2f}s; create→Running "
            f"p50 {bare['p50'] * 1000:.0f} ms, p99 {bare['p99'] * 1000:.0f} ms"
        )
        print(
            f"AgentSessions: all Running after {sessions['total']:.2f}s; create→Running "
            f"p50 {sessions['p50'] * 1000:.0f} ms, p99 {sessions['p99'] * 1000:.0f} ms; "
            f"create→pod seen p50 {sessions['seen_p50'] * 1000:.0f} ms, "
            f"p99 {sessions['seen_p99'] * 1000:.0f} ms"
        )
        print(
            f"ratio (sessions / bare pods): total {sessions['total'] / bare['total']:.2f}x, "
            f"p50 {sessions['p50'] / bare['p50']:.2f}x, p99 {sessions['p99'] / bare['p99']:.2f}x"
        )
        print(f"operator peak RSS: {rss:.1f} MiB")
        print(
            "operator API requests per session: "
            + ", ".join(f"{k} {v / n:.2f}" for k, v in sorted(requests.items()) if v >= n / 10)
        )
        print(f"apiserver writes per bare pod: {per_object(bare_writes, n)}")
        print(f"apiserver writes per session : {per_object(session_writes, n)}", flush=True)
        if args.baseline_src:
            base, base_writes, base_rss, base_requests = bench_sessions(
                dc,
                core,
                custom,
                n,
                args.baseline_src,
                args.keep_logs,
                profile=args.cpu_profile,
            )
            print(
                f"baseline operator ({args.baseline_src}): all Running after "
                f"{base['total']:.2f}s ({base['total'] / bare['total']:.2f}x bare); p50 "
                f"{base['p50'] * 1000:.0f} ms, p99 {base['p99'] * 1000:.0f} ms "
                f"({base['p99'] / bare['p99']:.2f}x); create→pod seen p50 "
                f"{base['seen_p50'] * 1000:.0f} ms; RSS {base_rss:.1f} MiB"
            )
            print(
                "baseline API requests per session: "
                + ", ".join(
                    f"{k} {v / n:.2f}" for k, v in sorted(base_requests.items()) if v >= n / 10
                )
            )
            print(
                f"baseline apiserver writes per session: {per_object(base_writes, n)}", flush=True
            )
        rows.append((n, bare, sessions, rss))
        if args.json:
            Path(args.json).write_text(
                json.dumps(
                    {
                        "kwok_nodes": args.kwok_nodes,
                        "rows": [
                            {"n": n_, "bare": b, "sessions": s_, "rss_mib": r}
                            for n_, b, s_, r in rows
                        ],
                    },
                    indent=1,
                )
            )
    print("\n|N|bare total|sessions total|ratio|bare p99|sessions p99|ratio|operator RSS|")
    print("|---:|---:|---:|---:|---:|---:|---:|---:|")
    for n, bare, sessions, rss in rows:
        print(
            f"|{n}|{bare['total']:.2f} s|{sessions['total']:.2f} s|"
            f"{sessions['total'] / bare['total']:.2f}x|{bare['p99']:.2f} s|"
            f"{sessions['p99']:.2f} s|{sessions['p99'] / bare['p99']:.2f}x|{rss:.0f} MiB|"
        )
    return 0


if __name__ == "__main__":
    if (
        "--warm" in sys.argv[1:]
    ):  # cold vs warm-pool adoption on real nodes (bench/warm_placement.py)
        from bench.warm_placement import main as warm_main

        raise SystemExit(warm_main())
    raise SystemExit(main())
