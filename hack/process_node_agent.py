#!/usr/bin/env python3
"""Process node agent: a tiny kubelet that runs the pods of "process" nodes as local processes.

TEST-ONLY infrastructure for the dev cluster (hack/cluster-up.sh starts it; nothing in Berth's
shipped packages imports it). There is no container runtime on the dev machines, so this agent
plays kubelet for a few Node objects so that Berth's real programs (session runtime, lane
workers, the operator installed by Helm) really run against the real kube-apiserver:

- registers each ``--node`` with Ready status, renews its Lease in ``kube-node-lease`` (~10 s) and
  the Ready heartbeat (~30 s) so the node lifecycle controller keeps it Ready;
- runs each pod scheduled to those nodes as a process (init containers in order, then command +
  args of the first container; the image is ignored), in its own session/process group, with the
  container's environment (values, ConfigMap/Secret refs, downward API, envFrom, ``$(VAR)``
  expansion), a distinct pod IP (see below), PVCs mapped to one host directory per claim
  (``<state>/pvc/<ns>/<claim>``), ConfigMap/Secret/projected/emptyDir volumes in a per-pod
  directory, and every absolute container path (mountPaths, terminationMessagePath, workingDir)
  substituted in env values, command and args;
- gives each pod a kubeconfig with a token of its ServiceAccount (TokenRequest API, bound to the
  pod) in ``$KUBECONFIG``, so the real apiserver enforces RBAC for pods that call it;
- reports Running/Ready (readiness probes: httpGet, tcpSocket, exec), kills and restarts on failed
  liveness probes, restarts per restartPolicy with exponential back-off, and Succeeded/Failed with
  the exit code and termination message;
- on pod deletion sends SIGTERM to the process group, waits the deletion grace period, SIGKILLs,
  then deletes the pod (grace 0, uid precondition);
- simulates node loss: a Node annotated ``berth.dev/simulate-node-loss: "true"`` has its processes
  SIGKILLed at once, stops heartbeating and is set Ready=Unknown (NodeStatusUnknown); removing the
  annotation brings it back Ready and its pods are restarted per restartPolicy.

Pod IPs: ``--pod-ip-prefix 127.0.`` gives 127.0.<n>.<m> (all of 127/8 routes on lo); a
non-loopback prefix such as ``198.18.`` is added to lo as /32 aliases, which Endpoints and
EndpointSlices accept (the apiserver refuses 127/8 there), so Services select process pods.

Logs: ``<state>/pods/<ns>_<pod>/log`` (stdout+stderr, appended across restarts and recreations),
also served to ``kubectl logs`` through a kubelet-style HTTPS endpoint (``--kubelet-port``).

On SIGTERM/SIGINT it terminates every pod process (SIGTERM, short grace, SIGKILL) and exits. Pod
processes get PR_SET_PDEATHSIG (they die if the agent is SIGKILLed) and carry
``BERTH_NODE_AGENT_STATE=<state dir>`` in their environment, so whatever escaped (grandchildren of
a SIGKILLed agent, daemonised children) is SIGKILLed at the next start and after shutdown.
Pods that were running under an earlier agent instance count as containers killed with 137 and are
restarted (or failed) per restartPolicy, as after a node reboot.

Usage:
  .venv/bin/python hack/process_node_agent.py --kubeconfig KUBECONFIG --node proc-a --node proc-b \\
      --state-dir .berth/dev/nodes --path-prepend .venv/bin [--pod-ip-prefix 127.0.] \\
      [--register-with-taints key=value:NoSchedule] [--kubelet-port 10250]
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import ctypes
import datetime as dt
import http.client
import http.server
import json
import logging
import os
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import threading
import time
import urllib.parse
import warnings
from collections.abc import Callable, Mapping
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Any

import urllib3
import yaml
from kubernetes import client, config, watch
from kubernetes.client.exceptions import ApiException
from nodeagent import env as envmod
from nodeagent import paths, status, volumes
from nodeagent.ipam import IpAllocator
from nodeagent.logs import select_log

log = logging.getLogger("nodeagent")

NODE_LOSS_ANNOTATION = "berth.dev/simulate-node-loss"
LEASE_NAMESPACE = "kube-node-lease"
LEASE_SECONDS = 40
LEASE_RENEW_SECONDS = 10.0
STATUS_HEARTBEAT_SECONDS = 30.0
NODE_POLL_SECONDS = 1.0
POD_TICK_SECONDS = 0.25
GONE_GRACE_SECONDS = 2.0
SHUTDOWN_GRACE_SECONDS = 3.0
VOLUME_REFRESH_SECONDS = 15.0
TOKEN_SECONDS = 24 * 3600
HOST_IP = "127.0.0.1"
MERGE_PATCH = "application/merge-patch+json"
FALLBACK_LOG_BYTES = 2048
# Every API call has a timeout: a connection that dies silently must not wedge a node's heartbeat
# or a pod's worker forever (the client has none by default).
API_TIMEOUT = (10.0, 30.0)
WATCH_SECONDS = 240
STRAY_MARKER = "BERTH_NODE_AGENT_STATE"

_PR_SET_PDEATHSIG = 1
try:
    _libc: ctypes.CDLL | None = ctypes.CDLL(None, use_errno=True)
except OSError:  # pragma: no cover - non-glibc hosts
    _libc = None


def _die_with_parent() -> None:
    """preexec_fn: the pod process gets SIGKILL when the spawner thread (the agent) dies."""
    if _libc is not None:
        _libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)


def now_text() -> str:
    return status.rfc3339(dt.datetime.now(dt.UTC))


def is_status(exc: BaseException, *codes: int) -> bool:
    return isinstance(exc, ApiException) and exc.status in codes


# --- process spawning -------------------------------------------------------------------------


class Spawner:
    """Starts every pod process from one long-lived thread (PR_SET_PDEATHSIG fires when the
    thread that forked the child exits) and keeps a registry of live processes for shutdown."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._cond = threading.Condition(self._lock)
        self._queue: list[tuple[Callable[[], subprocess.Popen[bytes]], Future[Any]]] = []
        self._live: dict[int, subprocess.Popen[bytes]] = {}
        self._closed = False
        self._thread = threading.Thread(target=self._run, name="spawner", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._queue and not self._closed:
                    self._cond.wait()
                if not self._queue:
                    return
                make, fut = self._queue.pop(0)
            try:
                proc = make()
            except BaseException as exc:
                fut.set_exception(exc)
                continue
            with self._lock:
                self._live[proc.pid] = proc
                closed = self._closed
            if closed:
                _killpg(proc.pid, signal.SIGKILL)
            fut.set_result(proc)

    def spawn(
        self, argv: list[str], env: dict[str, str], cwd: str, out: int
    ) -> subprocess.Popen[bytes]:
        def make() -> subprocess.Popen[bytes]:
            return subprocess.Popen(
                argv,
                env=env,
                cwd=cwd,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                close_fds=True,
                preexec_fn=_die_with_parent,
            )

        fut: Future[subprocess.Popen[bytes]] = Future()
        with self._cond:
            if self._closed:
                raise RuntimeError("agent is shutting down")
            self._queue.append((make, fut))
            self._cond.notify()
        return fut.result()

    def forget(self, pid: int) -> None:
        with self._lock:
            self._live.pop(pid, None)

    def shutdown(self, grace: float) -> None:
        """SIGTERM every live process group, wait up to ``grace``, SIGKILL what is left."""
        with self._cond:
            self._closed = True
            self._cond.notify()
            procs = list(self._live.values())
        for p in procs:
            _killpg(p.pid, signal.SIGTERM)
        deadline = time.monotonic() + grace
        for p in procs:
            with contextlib.suppress(subprocess.TimeoutExpired):
                p.wait(timeout=max(0.0, deadline - time.monotonic()))
        for p in procs:
            _killpg(p.pid, signal.SIGKILL)
            with contextlib.suppress(subprocess.TimeoutExpired):
                p.wait(timeout=1)


def kill_strays(state_dir: str) -> int:
    """SIGKILL every process still carrying this agent's marker in its environment.

    Pod processes inherit ``STRAY_MARKER=<state dir>``; whatever escaped its process group
    (daemonised children) or outlived an agent that was SIGKILLed is found here, at start-up and
    after shutdown. Returns the number of processes killed."""
    needle = f"{STRAY_MARKER}={state_dir}".encode()
    killed = 0
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        try:
            with open(f"/proc/{entry}/environ", "rb") as fh:
                environ = fh.read().split(b"\0")
        except OSError:
            continue
        if needle in environ:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(int(entry), signal.SIGKILL)
                killed += 1
    return killed


def _killpg(pgid: int, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)


# --- the agent ----------------------------------------------------------------------------------


class Agent:
    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.state_dir = os.path.abspath(args.state_dir)
        self.pvc_root = os.path.join(self.state_dir, "pvc")
        self.path_prepend = [os.path.abspath(p) for p in args.path_prepend]
        cfg = client.Configuration()
        config.load_kube_config(  # type: ignore[no-untyped-call]
            config_file=args.kubeconfig, client_configuration=cfg
        )
        cfg.connection_pool_maxsize = 64
        self.api_client = client.ApiClient(cfg)
        self.core = client.CoreV1Api(self.api_client)
        self.coord = client.CoordinationV1Api(self.api_client)
        self.cluster = _cluster_of(args.kubeconfig)
        self.ipam = IpAllocator(args.pod_ip_prefix)
        # Loopback pod IPs route on lo already; any other prefix is added to lo as /32 aliases
        # (needs CAP_NET_ADMIN). Unlike 127/8, such IPs are valid in Endpoints/EndpointSlices.
        self.alias_ips = not self.ipam.prefix.startswith("127.")
        self.aliases: set[str] = set()
        self.spawner = Spawner()
        self.stop = threading.Event()
        self.lock = threading.Lock()
        self.workers: dict[str, PodWorker] = {}
        self.finished: dict[str, float] = {}  # uid -> monotonic time the worker finished
        self.lost: set[str] = set()
        self.nodes = list(dict.fromkeys(args.node))
        self.taints = [status.parse_taint(t) for t in args.register_with_taints.split(",") if t]
        self.logs = LogServer(self, args.kubelet_port)

    # -- API helpers --
    def raw(self, fn: Callable[..., Any], *a: Any, **kw: Any) -> Any:
        kw.setdefault("_request_timeout", API_TIMEOUT)
        resp = fn(*a, _preload_content=False, **kw)
        return json.loads(resp.data)

    def get_data(self, kind: str, ns: str, name: str) -> dict[str, bytes] | None:
        """Decoded data of a ConfigMap or Secret, None when it does not exist."""
        try:
            if kind == "configmap":
                obj = self.raw(self.core.read_namespaced_config_map, name, ns)
                data = {k: v.encode() for k, v in (obj.get("data") or {}).items()}
                for k, v in (obj.get("binaryData") or {}).items():
                    data[k] = base64.b64decode(v)
                return data
            obj = self.raw(self.core.read_namespaced_secret, name, ns)
            out = {k: base64.b64decode(v) for k, v in (obj.get("data") or {}).items()}
            for k, v in (obj.get("stringData") or {}).items():
                out[k] = v.encode()
            return out
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise

    def token_for(
        self, pod: Mapping[str, Any], audiences: list[str] | None, seconds: int
    ) -> tuple[str, float]:
        """A ServiceAccount token bound to the pod; returns (token, seconds until expiry)."""
        meta = pod["metadata"]
        sa = pod["spec"].get("serviceAccountName") or "default"
        spec: dict[str, Any] = {
            "expirationSeconds": seconds,
            "boundObjectRef": {
                "apiVersion": "v1",
                "kind": "Pod",
                "name": meta["name"],
                "uid": meta["uid"],
            },
        }
        if audiences:
            spec["audiences"] = audiences
        body = {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": spec}
        obj = self.raw(
            self.core.create_namespaced_service_account_token, sa, meta["namespace"], body
        )
        exp = obj.get("status", {}).get("expirationTimestamp")
        remaining = float(seconds)
        if exp:
            at = dt.datetime.strptime(exp, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=dt.UTC)
            remaining = (at - dt.datetime.now(dt.UTC)).total_seconds()
        return obj["status"]["token"], remaining

    # -- pod bookkeeping --
    def on_pod(self, pod: dict[str, Any]) -> None:
        uid = pod["metadata"]["uid"]
        if pod.get("spec", {}).get("nodeName") not in self.nodes:
            return
        with self.lock:
            worker = self.workers.get(uid)
            if worker is None:
                if uid in self.finished or self.stop.is_set():
                    return
                worker = PodWorker(self, pod)
                self.workers[uid] = worker
                worker.start()
                return
        worker.update(pod)

    def find_worker(self, ns: str, name: str) -> PodWorker | None:
        with self.lock:
            return next((w for w in self.workers.values() if (w.ns, w.name) == (ns, name)), None)

    def on_pod_gone(self, uid: str) -> None:
        with self.lock:
            worker = self.workers.get(uid)
        if worker is not None:
            worker.mark_gone()

    def sync_node(self, node: str, present: set[str]) -> None:
        """After a relist: workers of ``node`` whose pod no longer exists are told it is gone."""
        with self.lock:
            stale = [w for u, w in self.workers.items() if w.node == node and u not in present]
        for w in stale:
            w.mark_gone()

    def worker_done(self, uid: str) -> None:
        with self.lock:
            self.workers.pop(uid, None)
            self.finished[uid] = time.monotonic()
            cutoff = time.monotonic() - 3600
            for u, t in list(self.finished.items()):
                if t < cutoff:
                    del self.finished[u]

    def node_lost(self, node: str) -> bool:
        return node in self.lost

    def set_node_lost(self, node: str, lost: bool) -> None:
        with self.lock:
            if lost:
                self.lost.add(node)
            else:
                self.lost.discard(node)
            workers = [w for w in self.workers.values() if w.node == node]
        for w in workers:
            if lost:
                w.kill_now()
            w.wake.set()

    # -- threads --
    def reserve_existing_ips(self) -> None:
        """Hold the IPs of pods already on our nodes before any new pod gets one."""
        while not self.stop.is_set():
            try:
                for node in self.nodes:
                    lst = self.raw(
                        self.core.list_pod_for_all_namespaces,
                        field_selector=f"spec.nodeName={node}",
                    )
                    for pod in lst.get("items") or []:
                        ip = (pod.get("status") or {}).get("podIP")
                        if ip and self.ipam.owns(ip):
                            self.ipam.reserve(_pod_key(pod), ip)
                return
            except Exception as exc:
                log.warning("listing pods failed: %s; retrying", _short(exc))
                self.stop.wait(2.0)

    def run(self) -> None:
        os.makedirs(self.state_dir, exist_ok=True)
        strays = kill_strays(self.state_dir)
        if strays:
            log.info("killed %d processes left behind by an earlier agent", strays)
        self.reserve_existing_ips()
        if self.args.kubelet_port >= 0:
            self.logs.start()
        threads = []
        for node in self.nodes:
            threads.append(threading.Thread(target=NodeKeeper(self, node).run, name=f"node-{node}"))
            threads.append(
                threading.Thread(target=self.watch_pods, args=(node,), name=f"watch-{node}")
            )
        for t in threads:
            t.daemon = True
            t.start()
        log.info(
            "process node agent up: nodes=%s state=%s ip-prefix=%s",
            ",".join(self.nodes),
            self.state_dir,
            self.ipam.prefix,
        )
        while not self.stop.wait(1.0):
            pass
        self.shutdown()

    def ensure_ip(self, ip: str) -> None:
        """Make ``ip`` a local address (an alias on lo) unless it is a loopback address."""
        if not self.alias_ips or ip == HOST_IP:
            return
        with self.lock:
            if ip in self.aliases:
                return
        res = subprocess.run(
            ["ip", "addr", "add", f"{ip}/32", "dev", "lo"],
            capture_output=True,
            text=True,
            check=False,
        )
        if res.returncode != 0 and "File exists" not in res.stderr:
            raise StartFailure(f"cannot add pod IP {ip} to lo: {res.stderr.strip()}")
        with self.lock:
            self.aliases.add(ip)

    def drop_ip(self, ip: str) -> None:
        if not self.alias_ips or not ip:
            return
        with self.lock:
            if ip not in self.aliases:
                return
            self.aliases.discard(ip)
        subprocess.run(
            ["ip", "addr", "del", f"{ip}/32", "dev", "lo"], capture_output=True, check=False
        )

    def shutdown(self) -> None:
        log.info("shutting down: terminating pod processes")
        self.spawner.shutdown(SHUTDOWN_GRACE_SECONDS)
        strays = kill_strays(self.state_dir)
        for ip in list(self.aliases):
            self.drop_ip(ip)
        log.info("all pod processes ended (%d strays killed); bye", strays)

    def watch_pods(self, node: str) -> None:
        selector = f"spec.nodeName={node}"
        while not self.stop.is_set():
            try:
                lst = self.raw(self.core.list_pod_for_all_namespaces, field_selector=selector)
                rv = lst["metadata"]["resourceVersion"]
                present: set[str] = set()
                items = lst.get("items") or []
                # Reserve IPs of existing pods first so new pods never take a live pod's IP.
                for pod in items:
                    ip = pod.get("status", {}).get("podIP")
                    if ip and self.ipam.owns(ip):
                        self.ipam.reserve(_pod_key(pod), ip)
                for pod in items:
                    present.add(pod["metadata"]["uid"])
                    self._safe_on_pod(pod)
                self.sync_node(node, present)
                while not self.stop.is_set():
                    w = watch.Watch()  # type: ignore[no-untyped-call]
                    for ev in w.stream(  # type: ignore[no-untyped-call]
                        self.core.list_pod_for_all_namespaces,
                        field_selector=selector,
                        resource_version=rv,
                        allow_watch_bookmarks=True,
                        timeout_seconds=WATCH_SECONDS,
                        _request_timeout=(10.0, WATCH_SECONDS + 30.0),
                    ):
                        obj = ev["raw_object"]
                        rv = obj.get("metadata", {}).get("resourceVersion", rv)
                        if ev["type"] in ("ADDED", "MODIFIED"):
                            self._safe_on_pod(obj)
                        elif ev["type"] == "DELETED":
                            self.on_pod_gone(obj["metadata"]["uid"])
                        if self.stop.is_set():
                            w.stop()  # type: ignore[no-untyped-call]
            except ApiException as exc:
                if exc.status == 410:
                    log.info("pod watch of %s expired (410 Gone); relisting", node)
                    continue
                log.warning("pod watch of %s failed: %s; retrying", node, exc)
                self.stop.wait(2.0)
            except Exception:
                log.exception("pod watch of %s failed; retrying", node)
                self.stop.wait(2.0)

    def _safe_on_pod(self, pod: dict[str, Any]) -> None:
        try:
            self.on_pod(pod)
        except Exception:
            log.exception("handling pod %s failed", _pod_key(pod))


def _pod_key(pod: Mapping[str, Any]) -> str:
    m = pod["metadata"]
    return f"{m.get('namespace')}/{m.get('name')}/{m.get('uid')}"


def _cluster_of(kubeconfig: str) -> dict[str, Any]:
    """server / CA of the admin kubeconfig's current context, for the pods' kubeconfigs."""
    with open(kubeconfig) as fh:
        kc = yaml.safe_load(fh)
    ctx_name = kc.get("current-context")
    contexts = {c["name"]: c["context"] for c in kc.get("contexts") or []}
    clusters = {c["name"]: c["cluster"] for c in kc.get("clusters") or []}
    ctx: dict[str, Any] = contexts.get(ctx_name) or next(iter(contexts.values()), {})
    cluster = dict(clusters.get(ctx.get("cluster"), next(iter(clusters.values()), {})))
    ca_file = cluster.pop("certificate-authority", None)
    if ca_file and "certificate-authority-data" not in cluster:
        if not os.path.isabs(ca_file):
            ca_file = os.path.join(os.path.dirname(os.path.abspath(kubeconfig)), ca_file)
        with open(ca_file, "rb") as fh:
            cluster["certificate-authority-data"] = base64.b64encode(fh.read()).decode()
    return cluster


# --- kubectl logs ---------------------------------------------------------------------------------


class LogServer:
    """A kubelet-style HTTPS endpoint serving ``/containerLogs/<ns>/<pod>/<container>``, so the
    apiserver's ``pods/log`` proxy (``kubectl logs [-f] [--previous] [--tail]``) works for process
    pods. Self-signed certificate (the apiserver does not verify kubelet certificates unless told
    to); no authentication: test-only. One server serves every node of this agent."""

    def __init__(self, agent: Agent, port: int) -> None:
        self.agent = agent
        self.wanted_port = port
        self.port = 0

    def start(self) -> None:
        tls = os.path.join(self.agent.state_dir, "kubelet-tls")
        cert, key = os.path.join(tls, "tls.crt"), os.path.join(tls, "tls.key")
        try:
            if not (os.path.exists(cert) and os.path.exists(key)):
                os.makedirs(tls, exist_ok=True)
                argv = ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "3650"]
                argv += ["-keyout", key, "-out", cert, "-subj", "/CN=berth-process-node"]
                argv += ["-addext", "subjectAltName=IP:127.0.0.1"]
                subprocess.run(
                    argv,
                    check=True,
                    capture_output=True,
                )
            ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            ctx.load_cert_chain(cert, key)
            handler = self._handler()
            try:
                server = http.server.ThreadingHTTPServer(("127.0.0.1", self.wanted_port), handler)
            except OSError:
                server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
            server.daemon_threads = True
            server.socket = ctx.wrap_socket(server.socket, server_side=True)
        except (OSError, subprocess.CalledProcessError, ssl.SSLError) as exc:
            log.warning("kubectl logs endpoint not started: %s", exc)
            return
        self.port = int(server.server_address[1])
        threading.Thread(target=server.serve_forever, name="logs", daemon=True).start()
        log.info("kubelet logs endpoint on https://127.0.0.1:%d", self.port)

    def _handler(self) -> type[http.server.BaseHTTPRequestHandler]:
        agent = self.agent

        class Handler(http.server.BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: Any) -> None:
                log.debug("logs endpoint: " + format, *args)

            def do_GET(self) -> None:
                url = urllib.parse.urlsplit(self.path)
                parts = [urllib.parse.unquote(p) for p in url.path.split("/") if p]
                if parts == ["healthz"]:
                    self._send(200, "ok")
                    return
                if len(parts) != 4 or parts[0] != "containerLogs":
                    self._send(404, "not found")
                    return
                _, ns, name, container = parts
                worker = agent.find_worker(ns, name)
                if worker is None:
                    self._send(404, f"pod {ns}/{name} is not running on this process node agent")
                    return
                q = urllib.parse.parse_qs(url.query)

                def num(key: str) -> int | None:
                    v = q.get(key, [""])[0]
                    return int(v) if v.isdigit() else None

                try:
                    with open(worker.log_path, encoding="utf-8", errors="replace") as fh:
                        text = fh.read()
                except OSError:
                    text = ""
                body = select_log(
                    text,
                    worker.uid,
                    container,
                    previous=q.get("previous", [""])[0] == "true",
                    tail_lines=num("tailLines"),
                    limit_bytes=num("limitBytes"),
                )
                if q.get("follow", [""])[0] != "true":
                    self._send(200, body)
                    return
                self.send_response(200)
                self.send_header("Content-Type", "text/plain; charset=utf-8")
                self.end_headers()
                try:
                    self.wfile.write(body.encode())
                    self.wfile.flush()
                    self._follow(worker, len(text.encode()))
                except (BrokenPipeError, ConnectionResetError, ssl.SSLError):
                    pass

            def _follow(self, worker: PodWorker, offset: int) -> None:
                """Stream lines appended to the log until the run ends or the pod goes."""
                pending = b""
                while not agent.stop.is_set():
                    with open(worker.log_path, "rb") as fh:
                        fh.seek(offset)
                        chunk = fh.read()
                    offset += len(chunk)
                    pending += chunk
                    *lines, pending = pending.split(b"\n")
                    for line in lines:
                        if line.startswith(b"=== "):
                            return  # a new run (or another container) begins
                        self.wfile.write(line + b"\n")
                    self.wfile.flush()
                    if agent.find_worker(worker.ns, worker.name) is not worker or (
                        worker.proc is None and not chunk
                    ):
                        return
                    time.sleep(0.5)

            def _send(self, code: int, text: str) -> None:
                data = text.encode()
                self.send_response(code)
                self.send_header("Content-Type", "text/plain; charset=utf-8")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        return Handler


# --- nodes ----------------------------------------------------------------------------------------


class NodeKeeper:
    """Registers one Node and keeps it Ready (Lease + status heartbeat), or lost on request."""

    def __init__(self, agent: Agent, name: str) -> None:
        self.agent = agent
        self.name = name
        self.lost: bool | None = None
        self.next_lease = 0.0
        self.next_status = 0.0

    def run(self) -> None:
        while not self.agent.stop.is_set():
            try:
                self.tick()
            except Exception as exc:
                log.warning("node %s: %s; retrying", self.name, _short(exc))
                self.next_status = 0.0
            self.agent.stop.wait(NODE_POLL_SECONDS)

    def tick(self) -> None:
        core = self.agent.core
        try:
            node = self.agent.raw(core.read_node, self.name)
        except ApiException as exc:
            if exc.status != 404:
                raise
            log.info("registering node %s", self.name)
            obj = status.node_object(self.name)
            if self.agent.taints:
                obj["spec"]["taints"] = self.agent.taints
            node = self.agent.raw(core.create_node, obj)
            self.next_status = 0.0
        labels = node["metadata"].get("labels") or {}
        want = status.node_labels(self.name)
        if any(labels.get(k) != v for k, v in want.items()):
            core.patch_node(
                self.name,
                {"metadata": {"labels": want}},
                _content_type=MERGE_PATCH,
                _request_timeout=API_TIMEOUT,
            )
        lost = (node["metadata"].get("annotations") or {}).get(NODE_LOSS_ANNOTATION) == "true"
        prev = (node.get("status") or {}).get("conditions") or []
        now_m = time.monotonic()
        if lost != self.lost:
            log.info("node %s: %s", self.name, "simulating node loss" if lost else "Ready")
            self.agent.set_node_lost(self.name, lost)
            self.lost = lost
            self.next_status = 0.0
            self.next_lease = 0.0
        if lost:
            if self.next_status == 0.0:
                self.write_status(False, prev)
                self.next_status = float("inf")
            return
        if now_m >= self.next_lease:
            self.renew_lease(node)
            self.next_lease = now_m + LEASE_RENEW_SECONDS
        ready_now = any(c.get("type") == "Ready" and c.get("status") == "True" for c in prev)
        if now_m >= self.next_status or not ready_now:
            self.write_status(True, prev)
            self.next_status = now_m + STATUS_HEARTBEAT_SECONDS

    def write_status(self, ready: bool, prev: list[dict[str, Any]]) -> None:
        port = self.agent.logs.port or 10250
        body = {"status": status.node_status(ready, prev, now_text(), kubelet_port=port)}
        self.agent.core.patch_node_status(
            self.name, body, _content_type=MERGE_PATCH, _request_timeout=API_TIMEOUT
        )

    def renew_lease(self, node: Mapping[str, Any]) -> None:
        coord = self.agent.coord
        renew = status.rfc3339_micro(dt.datetime.now(dt.UTC))
        try:
            coord.patch_namespaced_lease(
                self.name,
                LEASE_NAMESPACE,
                {"spec": {"holderIdentity": self.name, "renewTime": renew}},
                _content_type=MERGE_PATCH,
                _request_timeout=API_TIMEOUT,
            )
        except ApiException as exc:
            if exc.status != 404:
                raise
            body: dict[str, Any] = {
                "apiVersion": "coordination.k8s.io/v1",
                "kind": "Lease",
                "metadata": {
                    "name": self.name,
                    "namespace": LEASE_NAMESPACE,
                    "ownerReferences": [
                        {
                            "apiVersion": "v1",
                            "kind": "Node",
                            "name": self.name,
                            "uid": node["metadata"]["uid"],
                        }
                    ],
                },
                "spec": {
                    "holderIdentity": self.name,
                    "leaseDurationSeconds": LEASE_SECONDS,
                    "renewTime": renew,
                },
            }
            try:
                coord.create_namespaced_lease(
                    LEASE_NAMESPACE,
                    body,  # type: ignore[arg-type]
                    _request_timeout=API_TIMEOUT,
                )
            except ApiException as exc2:
                if exc2.status != 409:  # created meanwhile: the next renewal patches it
                    raise


def _short(exc: BaseException) -> str:
    if isinstance(exc, ApiException):
        return f"API {exc.status} {exc.reason}: {(exc.body or '')[:300]!s}"
    return f"{type(exc).__name__}: {exc}"


# --- pods -----------------------------------------------------------------------------------------


class StartFailure(Exception):
    """The container could not be started yet (kubelet's CreateContainerConfigError)."""


@dataclass
class Ctr:
    """What the agent knows about one container of the pod (init containers included)."""

    spec: dict[str, Any]
    init: bool
    state: dict[str, Any]
    last_state: dict[str, Any] | None = None
    restart_count: int = 0
    container_id: str | None = None
    ready: bool = False
    done: bool = False  # init containers: completed with exit code 0
    restart_due: bool = False  # exited and will be restarted: restartCount grows on the restart

    @property
    def name(self) -> str:
        return str(self.spec["name"])

    def load(self, prev: Mapping[str, Any]) -> None:
        """Take over what an earlier agent reported for this container."""
        self.restart_count = int(prev.get("restartCount") or 0)
        self.last_state = prev.get("lastState") or None
        self.container_id = prev.get("containerID")
        if prev.get("state"):
            self.state = dict(prev["state"])
        term = (prev.get("state") or {}).get("terminated") or {}
        self.done = self.init and term.get("exitCode") == 0

    def status(self) -> dict[str, Any]:
        return status.container_status(
            self.spec,
            state=self.state,
            last_state=self.last_state,
            ready=self.done if self.init else self.ready,
            restart_count=self.restart_count,
            container_id=self.container_id,
        )


class PodWorker:
    """Runs one pod: prepares its directories, starts and watches its process, writes status.

    Init containers run one after the other to completion, then the first container runs (other
    containers are not run on process nodes)."""

    def __init__(self, agent: Agent, pod: dict[str, Any]) -> None:
        self.agent = agent
        self.pod = pod
        meta = pod["metadata"]
        self.uid: str = meta["uid"]
        self.ns: str = meta["namespace"]
        self.name: str = meta["name"]
        self.node: str = pod["spec"]["nodeName"]
        self.key = _pod_key(pod)
        inits = pod["spec"].get("initContainers") or []
        first_state = "PodInitializing" if inits else "ContainerCreating"
        self.main = Ctr(pod["spec"]["containers"][0], False, status.waiting_state(first_state))
        self.inits = [Ctr(c, True, status.waiting_state("PodInitializing")) for c in inits]
        self.lock = threading.Lock()
        self.wake = threading.Event()
        self.gone = False
        self.pod_root = os.path.join(agent.state_dir, "pods", f"{self.ns}_{self.name}")
        self.pod_dir = os.path.join(self.pod_root, self.uid)
        self.log_path = os.path.join(self.pod_root, "log")
        self.kubeconfig = os.path.join(self.pod_dir, "kubeconfig")
        self.proc: subprocess.Popen[bytes] | None = None
        self.started_at = ""
        self.log_offset = 0
        self.killed_for_loss = False
        self.term_sent_at: float | None = None
        self.backoff_exp = 0
        self.next_start = 0.0
        self.phase = "Pending"
        self.start_time = (pod.get("status") or {}).get("startTime") or now_text()
        self.ip = ""
        self.written: dict[str, Any] | None = None
        self.written_at = 0.0
        self.probe_next = 0.0
        self.probe_ok = 0
        self.probe_fail = 0
        self.live_next = 0.0
        self.live_fail = 0
        self.kill_deadline: float | None = None
        self.proc_env: dict[str, str] = {}
        self.token_refresh_at = 0.0  # tokens are due at the first start
        self.volume_refresh_at = float("inf")
        self.path_map = paths.PathMap({})
        self.pending_exit: status.Exited | None = None
        self.thread = threading.Thread(target=self.run, name=f"pod-{self.ns}/{self.name}")
        self.thread.daemon = True
        self._adopt_previous_status(pod.get("status") or {})

    # -- inputs from other threads --
    def start(self) -> None:
        self.thread.start()

    def update(self, pod: dict[str, Any]) -> None:
        with self.lock:
            self.pod = pod
        self.wake.set()

    def mark_gone(self) -> None:
        self.gone = True
        self.wake.set()

    def kill_now(self) -> None:
        """Node loss: SIGKILL the process group without grace."""
        proc = self.proc
        if proc is not None:
            _killpg(proc.pid, signal.SIGKILL)
            self.killed_for_loss = True

    # -- main loop --
    @property
    def cur(self) -> Ctr:
        """The container to run now: the first unfinished init container, else the main one."""
        return next((c for c in self.inits if not c.done), self.main)

    def term_log(self, ctr: Ctr) -> str:
        suffix = f".init-{ctr.name}" if ctr.init else ""
        return os.path.join(self.pod_dir, f"termination-log{suffix}")

    def _adopt_previous_status(self, st: Mapping[str, Any]) -> None:
        prev_inits = {c["name"]: c for c in st.get("initContainerStatuses") or []}
        for ctr in self.inits:
            ctr.load(prev_inits.get(ctr.name, {}))
        prev_main = (st.get("containerStatuses") or [{}])[0]
        self.main.load(prev_main)
        main_state = prev_main.get("state") or {}
        if main_state.get("running") or main_state.get("terminated") or prev_main.get("lastState"):
            for ctr in self.inits:
                ctr.done = True
        phase = st.get("phase")
        if phase in ("Succeeded", "Failed"):
            self.phase = phase
            return
        cur = self.cur
        if cur.state.get("running") or (cur.state.get("terminated") and not cur.done):
            # Started by an earlier agent (its process died with that agent): count it as a
            # container that was killed, as after a node reboot.
            started = (cur.state.get("running") or {}).get("startedAt", self.start_time)
            self.pending_exit = status.Exited(137, "", started, now_text(), cur.container_id or "")

    def run(self) -> None:
        try:
            self._run()
        except Exception:
            log.exception("pod %s: worker crashed; killing its processes", self.key)
            self._kill_and_reap(0)
        finally:
            self.agent.worker_done(self.uid)

    def _run(self) -> None:
        pod = self.pod
        terminal_at_start = self.phase in ("Succeeded", "Failed")
        if len(pod["spec"]["containers"]) > 1:
            log.warning(
                "pod %s: only container %s runs on a process node; ignoring %s",
                self.key,
                self.main.name,
                [c["name"] for c in pod["spec"]["containers"][1:]],
            )
        if pod["spec"].get("hostNetwork"):
            self.ip = HOST_IP
        elif not terminal_at_start or pod["metadata"].get("deletionTimestamp"):
            ip = (pod.get("status") or {}).get("podIP")
            key = _pod_key(pod)
            if not (ip and self.agent.ipam.reserve(key, ip)):
                ip = self.agent.ipam.allocate(key)
            self.ip = ip
        else:
            self.ip = (pod.get("status") or {}).get("podIP") or ""
        try:
            while True:
                self.wake.wait(POD_TICK_SECONDS)
                self.wake.clear()
                if self.agent.stop.is_set():
                    return
                try:
                    if self._step(terminal_at_start):
                        return
                except Exception as exc:  # API outage, disk trouble: log, keep the pod running
                    log.warning("pod %s: %s; retrying", self.key, _short(exc))
                    self.agent.stop.wait(1.0)
        finally:
            self.agent.ipam.release(_pod_key(self.pod))
            if not self.agent.stop.is_set():
                self.agent.drop_ip(self.ip)
            if self.proc is None:
                shutil.rmtree(self.pod_dir, ignore_errors=True)

    def _step(self, terminal_at_start: bool) -> bool:
        """One pass of the pod's loop; True when the worker is done."""
        with self.lock:
            pod = self.pod
        if self.gone:
            self._kill_and_reap(GONE_GRACE_SECONDS)
            return True
        if self.agent.node_lost(self.node):
            # The "kubelet" is gone: kill the process, write nothing, handle nothing.
            if self.proc is not None:
                self.kill_now()
                self._reap()
            return False
        if self.killed_for_loss:
            self.killed_for_loss = False
        if pod["metadata"].get("deletionTimestamp"):
            return self._delete_step(pod)
        if self.pending_exit is not None:
            ex, self.pending_exit = self.pending_exit, None
            self._on_exit(ex)
        if self.phase in ("Succeeded", "Failed"):
            if not terminal_at_start:
                self._write_status(pod)  # no-op once written and observed
            return False
        self._run_step(pod)
        self._write_status(pod)
        return False

    def _run_step(self, pod: dict[str, Any]) -> None:
        now_m = time.monotonic()
        if self.proc is None:
            if now_m < self.next_start:
                return
            try:
                self._start(pod)
            except (StartFailure, envmod.ConfigError) as exc:
                log.warning("pod %s: cannot start container: %s", self.key, exc)
                self.cur.state = status.waiting_state("CreateContainerConfigError", str(exc))
                self.next_start = now_m + 2.0
            except ApiException as exc:
                log.warning("pod %s: API error while preparing: %s", self.key, _short(exc))
                self.next_start = now_m + 2.0
            return
        rc = self.proc.poll()
        if rc is not None and self.agent.node_lost(self.node):
            return  # killed for a simulated node loss: the main loop records it
        if rc is not None:
            self._on_exit(self._exited(rc))
            return
        if self.cur is not self.main:
            return
        if now_m >= self.probe_next:
            self._probe(now_m)
        self._liveness(now_m)
        if now_m >= self.token_refresh_at or now_m >= self.volume_refresh_at:
            try:
                self._refresh(pod, now_m, with_tokens=now_m >= self.token_refresh_at)
            except Exception as exc:
                log.warning("pod %s: refresh failed: %s", self.key, _short(exc))

    # -- start --
    def _start(self, pod: dict[str, Any]) -> None:
        # ServiceAccount tokens are issued once per pod and renewed when due, not per restart.
        with_tokens = time.monotonic() >= self.token_refresh_at
        if with_tokens:
            self.token_refresh_at = float("inf")
        try:
            self._start_container(pod, with_tokens)
        except BaseException:
            if with_tokens:
                self.token_refresh_at = 0.0
            raise

    def _start_container(self, pod: dict[str, Any], with_tokens: bool) -> None:
        self.agent.ensure_ip(self.ip)
        self.volume_refresh_at = time.monotonic() + VOLUME_REFRESH_SECONDS
        os.makedirs(self.pod_dir, exist_ok=True)
        for sub in ("tmp", "home"):
            os.makedirs(os.path.join(self.pod_dir, sub), exist_ok=True)
        vols = paths.volume_host_paths(pod, self.pod_dir, self.agent.pvc_root)
        for kind, host in vols.values():
            if kind == "hostPath":
                continue
            os.makedirs(host, exist_ok=True)
        self._write_volumes(pod, vols, with_tokens=with_tokens)
        ctr = self.cur
        spec = ctr.spec
        mounts = paths.container_mounts(spec, vols)
        for m in mounts:
            if vols[m.volume][0] in ("persistentVolumeClaim", "emptyDir") and not os.path.exists(
                m.host_path
            ):
                os.makedirs(m.host_path, exist_ok=True)
        self.path_map = paths.build_path_map(spec, mounts, self.term_log(ctr))
        env = envmod.resolve_env(
            pod,
            spec,
            pod_ip=self.ip,
            host_ip=HOST_IP,
            configmaps=self._text_lookup("configmap"),
            secrets=self._text_lookup("secret"),
        )
        argv = [self.path_map.substitute(a) for a in envmod.container_argv(spec, env)]
        if not argv:
            raise StartFailure("container has no command or args (images are ignored here)")
        proc_env = self._base_env(pod)
        if pod["spec"].get("automountServiceAccountToken") is not False:
            if with_tokens or not os.path.exists(self.kubeconfig):
                self._write_kubeconfig(pod)
            proc_env["KUBECONFIG"] = self.kubeconfig
        proc_env.update({k: self.path_map.substitute(v) for k, v in env.items()})
        self.proc_env = proc_env
        cwd = self._working_dir(spec)
        with open(self.term_log(ctr), "wb"):
            pass  # a fresh termination message file per container instance
        os.makedirs(self.pod_root, exist_ok=True)
        fd = os.open(self.log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        try:
            header = (
                f"=== {now_text()} pod {self.ns}/{self.name} uid {self.uid} "
                f"container {ctr.name} restart {ctr.restart_count + int(ctr.restart_due)} "
                f"ip {self.ip}: {argv!r}\n"
            )
            os.write(fd, header.encode())
            self.log_offset = os.fstat(fd).st_size
            self.started_at = now_text()
            try:
                self.proc = self.agent.spawner.spawn(argv, proc_env, cwd, fd)
            except OSError as exc:
                os.write(fd, f"=== start failed: {exc}\n".encode())
                self.proc = None
                self._on_exit(
                    status.Exited(
                        127 if isinstance(exc, FileNotFoundError) else 126,
                        f"failed to start {argv[0]!r}: {exc}",
                        self.started_at,
                        now_text(),
                        "",
                    )
                )
                return
        finally:
            os.close(fd)
        ctr.container_id = f"process://{self.proc.pid}"
        ctr.state = status.running_state(self.started_at)
        if ctr.restart_due:
            ctr.restart_due = False
            ctr.restart_count += 1
        if ctr is self.main:
            self.phase = "Running"
            probe = spec.get("readinessProbe")
            ctr.ready = probe is None
            self.probe_ok = self.probe_fail = 0
            now_m = time.monotonic()
            self.probe_next = now_m + float((probe or {}).get("initialDelaySeconds", 0))
            live = spec.get("livenessProbe") or {}
            self.live_next = now_m + float(live.get("initialDelaySeconds", 0))
            self.live_fail = 0
            self.kill_deadline = None
        log.info(
            "pod %s: started %s pid %d ip %s: %s", self.key, ctr.name, self.proc.pid, self.ip, argv
        )

    def _base_env(self, pod: Mapping[str, Any]) -> dict[str, str]:
        host_path = os.environ.get("PATH", "/usr/local/bin:/usr/bin:/bin")
        env = {
            "PATH": os.pathsep.join([*self.agent.path_prepend, host_path]),
            "HOSTNAME": pod["spec"].get("hostname") or self.name,
            "HOME": os.path.join(self.pod_dir, "home"),
            "TMPDIR": os.path.join(self.pod_dir, "tmp"),
            STRAY_MARKER: self.agent.state_dir,
        }
        for k in ("LANG", "LC_ALL", "TZ"):
            if k in os.environ:
                env[k] = os.environ[k]
        return env

    def _working_dir(self, spec: Mapping[str, Any]) -> str:
        wd = spec.get("workingDir")
        if not wd:
            return self.pod_dir
        mapped = self.path_map.map_path(wd)
        if mapped is None:
            mapped = (
                wd if os.path.isdir(wd) else os.path.join(self.pod_dir, "rootfs", wd.lstrip("/"))
            )
        os.makedirs(mapped, exist_ok=True)
        return mapped

    def _text_lookup(self, kind: str) -> envmod.DataLookup:
        def lookup(name: str) -> dict[str, str] | None:
            data = self.agent.get_data(kind, self.ns, name)
            if data is None:
                return None
            return {k: v.decode("utf-8", errors="replace") for k, v in data.items()}

        return lookup

    def _write_volumes(
        self,
        pod: Mapping[str, Any],
        vols: Mapping[str, tuple[str, str]],
        with_tokens: bool = True,
    ) -> None:
        for vol in pod["spec"].get("volumes") or []:
            if "projected" in vol and not with_tokens:
                continue
            host = vols[vol["name"]][1]
            files = self._volume_files(pod, vol)
            if files is not None:
                try:
                    volumes.write_files(host, files)
                except ValueError as exc:
                    raise StartFailure(f"volume {vol['name']}: {exc}") from exc

    def _volume_files(
        self, pod: Mapping[str, Any], vol: Mapping[str, Any]
    ) -> list[volumes.FileSpec] | None:
        if "configMap" in vol or "secret" in vol:
            kind = "configmap" if "configMap" in vol else "secret"
            src = vol.get("configMap") or vol.get("secret") or {}
            name = src.get("name") or src.get("secretName", "")
            return self._keyed(kind, name, src, src.get("defaultMode"))
        if "downwardAPI" in vol:
            src = vol["downwardAPI"]
            return volumes.downward_files(
                pod, src.get("items") or [], src.get("defaultMode"), self.ip, HOST_IP
            )
        if "projected" in vol:
            proj = vol["projected"]
            mode = proj.get("defaultMode")
            files: list[volumes.FileSpec] = []
            for source in proj.get("sources") or []:
                if "serviceAccountToken" in source:
                    sat = source["serviceAccountToken"]
                    aud = [sat["audience"]] if sat.get("audience") else None
                    token, remaining = self.agent.token_for(
                        pod, aud, int(sat.get("expirationSeconds", 3607))
                    )
                    self.token_refresh_at = min(
                        self.token_refresh_at, time.monotonic() + max(60.0, remaining / 2)
                    )
                    files.append((sat["path"], token.encode(), 0o600 if mode is None else mode))
                elif "configMap" in source or "secret" in source:
                    kind = "configmap" if "configMap" in source else "secret"
                    src = source.get("configMap") or source.get("secret") or {}
                    files += self._keyed(kind, src.get("name", ""), src, mode) or []
                elif "downwardAPI" in source:
                    files += volumes.downward_files(
                        pod, source["downwardAPI"].get("items") or [], mode, self.ip, HOST_IP
                    )
            return files
        return None

    def _keyed(
        self, kind: str, name: str, src: Mapping[str, Any], mode: int | None
    ) -> list[volumes.FileSpec] | None:
        data = self.agent.get_data(kind, self.ns, name)
        if data is None:
            if src.get("optional"):
                return []
            raise StartFailure(f'{kind} "{name}" not found')
        try:
            return volumes.keyed_files(data, src.get("items"), mode)
        except KeyError as exc:
            if src.get("optional"):
                return []
            raise StartFailure(f"{kind} {name} has no key {exc}") from exc

    def _write_kubeconfig(self, pod: Mapping[str, Any]) -> None:
        token, remaining = self.agent.token_for(pod, None, TOKEN_SECONDS)
        self.token_refresh_at = min(
            self.token_refresh_at, time.monotonic() + max(60.0, remaining / 2)
        )
        kc = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": "cluster", "cluster": self.agent.cluster}],
            "users": [{"name": "serviceaccount", "user": {"token": token}}],
            "contexts": [
                {
                    "name": "pod",
                    "context": {
                        "cluster": "cluster",
                        "user": "serviceaccount",
                        "namespace": self.ns,
                    },
                }
            ],
            "current-context": "pod",
        }
        volumes.write_files(
            self.pod_dir, [("kubeconfig", json.dumps(kc, indent=1).encode(), 0o600)]
        )

    def _refresh(self, pod: Mapping[str, Any], now_m: float, with_tokens: bool) -> None:
        """Re-issue tokens before they expire and refresh ConfigMap/Secret volume files."""
        self.volume_refresh_at = now_m + VOLUME_REFRESH_SECONDS
        if with_tokens:
            self.token_refresh_at = float("inf")
        try:
            if with_tokens and pod["spec"].get("automountServiceAccountToken") is not False:
                self._write_kubeconfig(pod)
            vols = paths.volume_host_paths(pod, self.pod_dir, self.agent.pvc_root)
            with contextlib.suppress(StartFailure):
                self._write_volumes(pod, vols, with_tokens=with_tokens)
        except BaseException:
            if with_tokens:
                self.token_refresh_at = now_m + 10.0  # retry soon
            raise

    # -- probes --
    def _probe(self, now_m: float) -> None:
        probe = self.main.spec.get("readinessProbe")
        if probe is None:
            self.main.ready = True
            self.probe_next = float("inf")
            return
        self.probe_next = now_m + float(probe.get("periodSeconds", 10))
        ok = self._run_probe(probe)
        if ok:
            self.probe_ok += 1
            self.probe_fail = 0
            if self.probe_ok >= int(probe.get("successThreshold", 1)):
                self.main.ready = True
        else:
            self.probe_fail += 1
            self.probe_ok = 0
            if self.probe_fail >= int(probe.get("failureThreshold", 3)) or not self.main.ready:
                self.main.ready = False

    def _liveness(self, now_m: float) -> None:
        """livenessProbe: after failureThreshold failures, SIGTERM, then SIGKILL after the grace
        period; the exit is then handled by restartPolicy like any other."""
        proc = self.proc
        if proc is None:
            return
        if self.kill_deadline is not None:
            if now_m >= self.kill_deadline:
                _killpg(proc.pid, signal.SIGKILL)
            return
        probe = self.main.spec.get("livenessProbe")
        if probe is None or now_m < self.live_next:
            return
        self.live_next = now_m + float(probe.get("periodSeconds", 10))
        if self._run_probe(probe):
            self.live_fail = 0
            return
        self.live_fail += 1
        if self.live_fail >= int(probe.get("failureThreshold", 3)):
            grace = probe.get("terminationGracePeriodSeconds")
            if grace is None:
                grace = self.pod["spec"].get("terminationGracePeriodSeconds", 30)
            log.info("pod %s: liveness probe failed: SIGTERM, grace %ss", self.key, grace)
            _killpg(proc.pid, signal.SIGTERM)
            self.kill_deadline = now_m + float(grace)

    def _port(self, port: Any) -> int:
        if isinstance(port, int) or (isinstance(port, str) and port.isdigit()):
            return int(port)
        for p in self.main.spec.get("ports") or []:
            if p.get("name") == port:
                return int(p["containerPort"])
        raise ValueError(f"unknown named port {port!r}")

    def _run_probe(self, probe: Mapping[str, Any]) -> bool:
        timeout = float(probe.get("timeoutSeconds", 1))
        try:
            if "httpGet" in probe:
                hg = probe["httpGet"]
                host = hg.get("host") or self.ip
                port = self._port(hg["port"])
                conn: http.client.HTTPConnection
                if hg.get("scheme", "HTTP").upper() == "HTTPS":
                    ctx = ssl._create_unverified_context()
                    conn = http.client.HTTPSConnection(host, port, timeout=timeout, context=ctx)
                else:
                    conn = http.client.HTTPConnection(host, port, timeout=timeout)
                try:
                    headers = {h["name"]: h["value"] for h in hg.get("httpHeaders") or []}
                    headers.setdefault("User-Agent", "kube-probe/1.34")
                    conn.request("GET", hg.get("path") or "/", headers=headers)
                    code = conn.getresponse().status
                finally:
                    conn.close()
                return 200 <= code < 400
            if "tcpSocket" in probe:
                ts = probe["tcpSocket"]
                with socket.create_connection(
                    (ts.get("host") or self.ip, self._port(ts["port"])), timeout=timeout
                ):
                    return True
            if "exec" in probe:
                cmd = [self.path_map.substitute(c) for c in probe["exec"].get("command") or []]
                res = subprocess.run(
                    cmd,
                    env=self.proc_env or self._base_env(self.pod),
                    cwd=self._working_dir(self.main.spec),
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.DEVNULL,
                    timeout=timeout,
                    check=False,
                )
                return res.returncode == 0
            return True  # grpc probes are not modelled: treat as passing
        except (OSError, ValueError, http.client.HTTPException, subprocess.TimeoutExpired):
            return False

    # -- exit / restart --
    def _reap(self) -> int | None:
        proc = self.proc
        if proc is None:
            return None
        try:
            rc = proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            _killpg(proc.pid, signal.SIGKILL)
            rc = proc.wait()
        _killpg(proc.pid, signal.SIGKILL)  # a container's leftovers die with it
        self.agent.spawner.forget(proc.pid)
        self.proc = None
        if self.killed_for_loss:
            self.pending_exit = status.Exited(
                status.exit_code_of(rc),
                "",
                self.started_at,
                now_text(),
                self.cur.container_id or "",
            )
        return rc

    def _exited(self, rc: int) -> status.Exited:
        proc = self.proc
        if proc is not None:
            _killpg(proc.pid, signal.SIGKILL)
            self.agent.spawner.forget(proc.pid)
        self.proc = None
        code = status.exit_code_of(rc)
        ctr = self.cur
        return status.Exited(
            code,
            self._termination_message(ctr, code),
            self.started_at,
            now_text(),
            ctr.container_id or "",
        )

    def _termination_message(self, ctr: Ctr, code: int) -> str:
        try:
            with open(self.term_log(ctr), "rb") as fh:
                raw = fh.read(status.MAX_TERMINATION_MESSAGE)
        except OSError:
            raw = b""
        policy = ctr.spec.get("terminationMessagePolicy", "File")
        if not raw and code != 0 and policy == "FallbackToLogsOnError":
            try:
                with open(self.log_path, "rb") as fh:
                    fh.seek(self.log_offset)
                    raw = fh.read()[-FALLBACK_LOG_BYTES:]
            except OSError:
                raw = b""
        return status.truncate_message(raw)

    def _on_exit(self, ex: status.Exited) -> None:
        ctr = self.cur
        log.info("pod %s: container %s exited with %d", self.key, ctr.name, ex.exit_code)
        ctr.ready = False
        self.kill_deadline = None
        policy = self.pod["spec"].get("restartPolicy", "Always")
        if ctr.init:
            if ex.exit_code == 0:
                ctr.state = status.terminated_state(ex)
                ctr.done = True
                self.next_start = 0.0
                if self.cur is self.main:
                    self.main.state = status.waiting_state("ContainerCreating")
                return
            if policy == "Never":
                ctr.state = status.terminated_state(ex)
                self.phase = "Failed"
                return
        else:
            terminal = status.phase_after_exit(policy, ex.exit_code)
            if terminal is not None:
                ctr.state = status.terminated_state(ex)
                self.phase = terminal
                return
        run_seconds = _seconds_between(ex.started_at, ex.finished_at)
        if run_seconds >= 60:
            self.backoff_exp = 0
        delay = status.restart_delay(
            self.backoff_exp, self.agent.args.restart_backoff, self.agent.args.restart_backoff_max
        )
        self.backoff_exp += 1
        ctr.last_state = status.terminated_state(ex)
        ctr.restart_due = True
        ctr.state = status.waiting_state(
            "CrashLoopBackOff", f"back-off {delay:g}s restarting failed container={ctr.name}"
        )
        self.phase = "Pending" if ctr.init else "Running"
        self.next_start = time.monotonic() + delay

    # -- deletion --
    def _delete_step(self, pod: Mapping[str, Any]) -> bool:
        """One step of graceful deletion; True once the pod object is deleted."""
        meta = pod["metadata"]
        proc = self.proc
        if proc is not None:
            grace = float(meta.get("deletionGracePeriodSeconds") or 0)
            if self.term_sent_at is None:
                log.info("pod %s: deleting: SIGTERM, grace %gs", self.key, grace)
                self.term_sent_at = time.monotonic()
                _killpg(proc.pid, signal.SIGTERM)
            if proc.poll() is None:
                if time.monotonic() - self.term_sent_at < grace:
                    return False
                log.info("pod %s: grace period over: SIGKILL", self.key)
                _killpg(proc.pid, signal.SIGKILL)
                proc.wait()
            rc = proc.poll()
            ctr = self.cur
            ex = self._exited(rc if rc is not None else -9)
            ctr.state = status.terminated_state(ex)
            self.phase = "Succeeded" if ex.exit_code == 0 and not ctr.init else "Failed"
            ctr.ready = False
            with contextlib.suppress(Exception):
                self._write_status(pod)
        try:
            self.agent.core.delete_namespaced_pod(
                self.name,
                self.ns,
                body=client.V1DeleteOptions(
                    grace_period_seconds=0, preconditions=client.V1Preconditions(uid=self.uid)
                ),
                _request_timeout=API_TIMEOUT,
            )
        except ApiException as exc:
            if exc.status not in (404, 409):
                log.warning("pod %s: delete failed: %s; retrying", self.key, _short(exc))
                return False
        log.info("pod %s: deleted", self.key)
        return True

    def _kill_and_reap(self, grace: float) -> None:
        proc = self.proc
        if proc is None:
            return
        _killpg(proc.pid, signal.SIGTERM)
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=grace)
        _killpg(proc.pid, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=5)
        self.agent.spawner.forget(proc.pid)
        self.proc = None

    # -- status --
    def _write_status(self, pod: Mapping[str, Any]) -> None:
        observed = pod.get("status") or {}
        desired = status.pod_status(
            phase=self.phase,
            pod_ip=self.ip,
            host_ip=HOST_IP,
            start_time=self.start_time,
            container_statuses=[self.main.status()],
            ready=self.main.ready and self.phase == "Running",
            container_name=self.main.name,
            prev_conditions=observed.get("conditions") or [],
            now=now_text(),
            init_container_statuses=[c.status() for c in self.inits],
            pending_init=[c.name for c in self.inits if not c.done],
        )
        observed_conds = {c["type"]: c["status"] for c in observed.get("conditions") or []}
        desired_conds = {c["type"]: c["status"] for c in desired["conditions"]}
        same_as_written = _stable(desired) == _stable(self.written or {})
        if same_as_written and (
            time.monotonic() - self.written_at < 2.0
            or (observed_conds == desired_conds and observed.get("phase") == desired["phase"])
        ):
            return
        try:
            self.agent.core.patch_namespaced_pod_status(
                self.name,
                self.ns,
                {"status": desired},
                _content_type=MERGE_PATCH,
                _request_timeout=API_TIMEOUT,
            )
            self.written = desired
            self.written_at = time.monotonic()
        except ApiException as exc:
            if exc.status == 404:
                self.gone = True
                return
            log.warning("pod %s: status write failed: %s", self.key, _short(exc))


def _stable(st: Mapping[str, Any]) -> Any:
    """Status without transition timestamps, for change detection."""
    conds = [(c["type"], c["status"], c.get("reason")) for c in st.get("conditions") or []]
    containers = [st.get("initContainerStatuses"), st.get("containerStatuses")]
    return (st.get("phase"), conds, json.dumps(containers, sort_keys=True))


def _seconds_between(a: str, b: str) -> float:
    try:
        fa = dt.datetime.strptime(a, "%Y-%m-%dT%H:%M:%SZ")
        fb = dt.datetime.strptime(b, "%Y-%m-%dT%H:%M:%SZ")
        return (fb - fa).total_seconds()
    except ValueError:
        return 0.0


# --- entry ------------------------------------------------------------------------------------


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--kubeconfig", required=True, help="admin kubeconfig of the cluster")
    p.add_argument("--node", action="append", required=True, help="process node name (repeat)")
    p.add_argument("--state-dir", required=True, help="pod dirs, claim dirs and logs go here")
    p.add_argument(
        "--pod-ip-prefix",
        default="127.0.",
        help="pod IPs: <prefix><n>.<m>. A non-loopback prefix (e.g. 198.18.) is added to lo as\n"
        "/32 aliases (needs CAP_NET_ADMIN); such IPs are accepted in Endpoints/EndpointSlices,\n"
        "which refuse 127/8",
    )
    p.add_argument(
        "--path-prepend",
        action="append",
        default=[],
        help="directory prepended to PATH of every pod process (repeat)",
    )
    p.add_argument(
        "--restart-backoff", type=float, default=1.0, help="first restart back-off, seconds"
    )
    p.add_argument(
        "--restart-backoff-max", type=float, default=30.0, help="restart back-off cap, seconds"
    )
    p.add_argument(
        "--register-with-taints",
        default="",
        help="taints for nodes this agent creates: key[=value]:Effect,... (as kubelet's flag)",
    )
    p.add_argument(
        "--kubelet-port",
        type=int,
        default=10250,
        help="port of the HTTPS endpoint serving kubectl logs (another free port if taken;\n"
        "-1 disables it)",
    )
    p.add_argument("--log-level", default="INFO")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    logging.basicConfig(
        level=args.log_level.upper(),
        format="%(asctime)s %(levelname)s %(threadName)s %(message)s",
    )
    # Dev kubeconfigs may skip TLS verification; one warning per request drowns the log.
    warnings.filterwarnings("ignore", category=urllib3.exceptions.InsecureRequestWarning)
    logging.getLogger("kubernetes").setLevel(logging.WARNING)
    logging.getLogger("urllib3").setLevel(logging.ERROR)
    try:
        agent = Agent(args)
    except ValueError as exc:  # bad --pod-ip-prefix or --register-with-taints
        log.error("%s", exc)
        return 2

    def on_signal(signum: int, _frame: object) -> None:
        log.info("received signal %d", signum)
        agent.stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    agent.run()
    return 0


if __name__ == "__main__":
    code = main()
    # Daemon threads (watches, pod workers, the logs endpoint) may still be inside the API client
    # or the logging module; interpreter finalization under them can abort. Every pod process is
    # gone by now, so leave without finalization.
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
