"""The peers of ``bench/peers.py`` on the dev cluster: Kubernetes Jobs (with the
controller-manager's client rate limit at its defaults or raised) and kubernetes-sigs/agent-sandbox
Sandboxes (its controller run as a local process, as its own KWOK scalability test runs it).

Placement here is ``bench/placement.py``'s: N objects created at once by 16 threads, a pod watch
keyed by the ``berth.dev/session`` label (every kind's pod template carries it: it is the session
pod's own), create → first seen Running per object, the apiserver's writes before and after.
"""

from __future__ import annotations

import os
import signal
import ssl
import subprocess
import time
import urllib.request
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import yaml
from kubernetes import client

from bench.peer_figures import job_manifest, sandbox_manifest
from bench.placement import (
    SPEC,
    CpuMeter,
    RunningWatch,
    apiserver_writes,
    control_plane_pids,
    cpu_line,
    finish_profile,
    peak_rss_mib,
    run_batch,
    shared_claim,
    start_profile,
    status_mib,
)
from tests.cluster import DevCluster
from tests.integration.operator.harness import free_port

ROOT = Path(__file__).resolve().parent.parent
CACHE = Path(os.environ.get("BERTH_CACHE", Path.home() / ".cache" / "berth"))
RAISED_QPS = {"kube-api-qps": "1000", "kube-api-burst": "2000"}
"""The client budget agent-sandbox's own benchmark gives its controller, given here to the
controller-manager (whose defaults are 20 / 30)."""


def agent_sandbox_version() -> str:
    """``AGENT_SANDBOX_VERSION`` from ``hack/versions.env``."""
    for line in (ROOT / "hack" / "versions.env").read_text().splitlines():
        if line.startswith("AGENT_SANDBOX_VERSION="):
            return line.split("=", 1)[1].strip()
    raise RuntimeError("AGENT_SANDBOX_VERSION missing from hack/versions.env")


def agent_sandbox_dir() -> Path:
    """Where ``hack/build-binaries.sh agent-sandbox`` put the controller and its CRDs (built on
    the first call: about two minutes cold)."""
    out = CACHE / "bin" / f"agent-sandbox-{agent_sandbox_version()}"
    if not (out / ".done").exists():
        subprocess.run(
            ["bash", str(ROOT / "hack" / "build-binaries.sh"), "agent-sandbox"], check=True
        )
    return out


@contextmanager
def agent_sandbox_controller(dc: DevCluster, log: Path) -> Iterator[subprocess.Popen[bytes]]:
    """agent-sandbox's CRDs applied and its controller running against the dev cluster with the
    admin kubeconfig, started as its own KWOK scalability presubmit starts it
    (``dev/ci/presubmits/test-e2e-scalability-kwok``: ``--extensions=true``, 1000 QPS / 2000
    burst, 50 sandbox and 50 claim workers; leader election off); the process is yielded (its
    ``metrics_port`` attribute set) and stopped afterwards."""
    out = agent_sandbox_dir()
    dc.kubectl("apply", "--server-side", "--force-conflicts", "-f", str(out / "crds"), timeout=120)
    # Every CRD, the warm pool's too: the controller exits at start when its RESTMapper does
    # not know one of its kinds yet ("no matches for kind SandboxWarmPool").
    dc.kubectl("wait", "--for=condition=Established", "-f", str(out / "crds"), "--timeout=60s")
    metrics, probe = free_port(), free_port()
    proc = _start_asb(out, dc, log, metrics, probe)
    try:
        yield proc
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)


def _start_asb(
    out: Path, dc: DevCluster, log: Path, metrics: int, probe: int, tries: int = 3
) -> subprocess.Popen[bytes]:
    """Start the controller and wait for its readiness probe (60 s); a start that exits before
    it is ready (its discovery not caught up with the CRDs just applied) is tried again."""
    for attempt in range(1, tries + 1):
        with open(log, "ab") as sink:
            proc = subprocess.Popen(
                [
                    str(out / "agent-sandbox-controller"),
                    "--extensions=true",
                    "--leader-elect=false",
                    f"--kube-api-qps={RAISED_QPS['kube-api-qps']}",
                    f"--kube-api-burst={RAISED_QPS['kube-api-burst']}",
                    "--sandbox-concurrent-workers=50",
                    "--sandbox-claim-concurrent-workers=50",
                    f"--metrics-bind-address=127.0.0.1:{metrics}",
                    f"--health-probe-bind-address=127.0.0.1:{probe}",
                ],
                env={**os.environ, "KUBECONFIG": dc.kubeconfig},
                stdout=sink,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        proc.metrics_port = metrics  # type: ignore[attr-defined]
        deadline = time.monotonic() + 60
        while not _http_ok(f"http://127.0.0.1:{probe}/readyz"):
            if proc.poll() is not None or time.monotonic() > deadline:
                break
            time.sleep(0.3)
        else:
            return proc
        proc.kill()
        proc.wait(timeout=10)
        if attempt < tries:
            time.sleep(3)
    raise RuntimeError(f"agent-sandbox-controller did not start; see {log}")


def _http_ok(url: str, context: ssl.SSLContext | None = None) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2, context=context) as r:
            return bool(r.status == 200)
    except OSError:
        return False


def metrics_text(port: int) -> str:
    """A local process's Prometheus text on ``127.0.0.1:<port>/metrics``."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
        return str(r.read().decode())


def _kcm_pidfile(pid: int) -> Path | None:
    """kwokctl's pid file that names the controller-manager ``pid`` (it stops what it names)."""
    for path in (ROOT / ".berth" / "dev" / "kwok" / "clusters").glob("*/pids/*.pid"):
        if path.read_text().strip() == str(pid):
            return path
    return None


def _admin_tls(dc: DevCluster) -> ssl.SSLContext:
    user = yaml.safe_load(Path(dc.kubeconfig).read_text())["users"][0]["user"]
    ctx = ssl.create_default_context()
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE  # loopback, the component's self-signed certificate
    ctx.load_cert_chain(user["client-certificate"], user["client-key"])
    return ctx


def restart_controller_manager(dc: DevCluster, flags: dict[str, str]) -> list[str]:
    """Restart the dev cluster's kube-controller-manager (started by kwokctl) with its own argv,
    ``flags`` (``{"kube-api-qps": "1000"}``) replacing any it had; an empty ``flags`` drops the
    rate-limit flags again (the defaults). Its pid goes into kwokctl's pid file, so
    ``make cluster-down`` stops it as before. Returns the new argv; waits for ``/healthz``.
    Raises RuntimeError when it is not found or does not come up within 60 s."""
    pid = control_plane_pids().get("kube-controller-manager")
    if pid is None:
        raise RuntimeError("no kube-controller-manager process")
    argv = Path(f"/proc/{pid}/cmdline").read_bytes().decode().rstrip("\0").split("\0")
    dropped = tuple(f"--{k}" for k in ("kube-api-qps", "kube-api-burst"))
    if not flags and not any(a.split("=", 1)[0] in dropped for a in argv):
        return argv  # at the defaults already
    cwd = os.readlink(f"/proc/{pid}/cwd")
    pidfile = _kcm_pidfile(pid)
    new = [a for a in argv if a.split("=", 1)[0] not in dropped]
    new += [f"--{k}={v}" for k, v in flags.items()]
    os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + 30
    while Path(f"/proc/{pid}").exists() and time.monotonic() < deadline:
        time.sleep(0.1)
    log = (pidfile.parent.parent / "logs" / "kube-controller-manager.log") if pidfile else None
    with open(log or os.devnull, "ab") as sink:
        proc = subprocess.Popen(
            new, cwd=cwd, stdout=sink, stderr=subprocess.STDOUT, start_new_session=True
        )
    if pidfile is not None:
        pidfile.write_text(str(proc.pid))
    port = next((a.split("=", 1)[1] for a in new if a.startswith("--secure-port=")), "10257")
    tls = _admin_tls(dc)
    deadline = time.monotonic() + 60
    while not _http_ok(f"https://127.0.0.1:{port}/healthz", tls):
        if proc.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError(f"kube-controller-manager did not come back: {new}")
        time.sleep(0.3)
    time.sleep(2.0)  # its informers' first lists
    return new


def bench_peer_kind(
    dc: DevCluster,
    core: Any,
    kind: str,
    n: int,
    session_pod: Any,
    rss_pid: int | None = None,
    profile: Path | None = None,
    tag: str = "",
) -> dict[str, Any]:
    """N Jobs (``kind`` "jobs") or Sandboxes ("agent-sandbox") at once on the kwok nodes, each of
    the pod ``session_pod(namespace, name)`` returns; create → Running figures of
    ``placement.run_batch`` plus ``writes`` (the apiserver's writes per resource, in total),
    ``writes_per_object`` and, with ``rss_pid``, that controller's peak RSS in MiB. With
    ``profile``, the control plane's CPU profiles over the burst (``placement.start_profile``)."""
    api = core.api_client
    custom = client.CustomObjectsApi(api)
    batch = client.BatchV1Api(api)
    with dc.namespace(f"bench-{kind}") as ns:
        shared_claim(core, ns)
        watcher = RunningWatch(core, ns)
        watcher.start()

        def create(name: str) -> None:
            pod = session_pod(ns, name)
            if kind == "agent-sandbox":
                doc = sandbox_manifest(name, pod)
                custom.create_namespaced_custom_object(
                    "agents.x-k8s.io", "v1beta1", ns, "sandboxes", doc
                )
            else:
                batch.create_namespaced_job(ns, job_manifest(name, pod))

        before = apiserver_writes(dc)
        cpu = CpuMeter(rss_pid)
        prof = start_profile(dc, core, profile, f"n{n}-{tag or kind}")
        names = [f"{kind[0]}{i:04d}" for i in range(n)]
        stats: dict[str, Any] = run_batch(names, create, lambda name: name, watcher)
        print(f"CPU seconds until all Running ({kind}): {cpu_line(cpu.read())}", flush=True)
        finish_profile(prof)
        time.sleep(2.0)  # the last status updates
        writes: Counter[str] = apiserver_writes(dc) - before
        watcher.stop.set()
        stats["writes"] = dict(writes)
        stats["writes_per_object"] = sum(writes.values()) / n
        stats["pods_per_object"] = watcher.pods_per_object()
        if rss_pid is not None:
            stats["rss_mib"] = peak_rss_mib(rss_pid)
            stats["rss_now_mib"] = status_mib(rss_pid, "VmRSS")
        resource = "sandboxes" if kind == "agent-sandbox" else "jobs"
        dc.kubectl(
            "-n",
            ns,
            "delete",
            resource,
            "--all",
            "--wait=true",
            "--timeout=300s",
            "--cascade=background",
            check=False,
            timeout=330,
        )
    return stats


def wait_pods_gone(core: Any, cap: float = 600.0) -> float:
    """Wait until no pod with the ``berth.dev/session`` label is left in the cluster (the last
    kind's pods deleted, so they load no one else's figures); returns the seconds waited.
    Raises RuntimeError after ``cap`` seconds."""
    start = time.monotonic()
    while core.list_pod_for_all_namespaces(label_selector="berth.dev/session", limit=1).items:
        if time.monotonic() - start > cap:
            raise RuntimeError(f"session-labelled pods still there after {cap:.0f} s")
        time.sleep(1.0)
    return time.monotonic() - start


def kwok_session_pod(settings: Any) -> Any:
    """A function (namespace, name) → the session pod the operator would build for an
    AgentSession of ``placement.SPEC`` (kwok nodes), without owner references."""
    from berth_operator.api.agentsession import AgentSessionSpec
    from berth_operator.builders.names import SessionRef
    from berth_operator.builders.session_pod import build_session_pod

    spec = AgentSessionSpec.model_validate(SPEC)

    def pod(namespace: str, name: str) -> dict[str, Any]:
        built = build_session_pod(
            SessionRef(namespace, name, f"bench-{name}"),
            spec,
            settings,
            epoch=1,
            resume_run_id=None,
            reason="Initial",
        )
        built["metadata"].pop("ownerReferences")
        return built

    return pod
