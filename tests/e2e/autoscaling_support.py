"""Support of the LaneWorker autoscaling e2e test and of ``bench/scaling.py``.

Two halves:

1. **Session simulator** (``python -m tests.e2e.autoscaling_support sim``), run as a pod of
   Berth's image on a real node, with this checkout's ``tests/`` mounted read-only (hostPath: the
   nodes are on this machine) since the image carries only the product. It plays the
   execute-lane side of a session pod: it publishes its tasks with the
   lanes engineer's :class:`session_runtime.transport.RedisTaskTransport` (exactly the code a
   session pod uses), reads the replies from its reply stream, and exports
   ``berth_session_external_tasks_pending{lane,laneworker}`` — tasks it published and has no reply
   for yet — on ``POD_IP:SIM_METRICS_PORT`` for Prometheus. That gauge exists while the pool has
   zero workers, which is what a ``prometheus`` scaling source needs for scale-from-zero (worker
   metrics vanish with the workers). ``session_runtime/metrics.py`` does not export such a gauge
   yet; the simulator shows the series we propose it adds.

   A simulator waits for the Redis key ``berth-test:{ns}:{lw}:{burst}:go``, publishes its burst at
   once, waits for every reply, and pushes one JSON summary to the list
   ``berth-test:{ns}:{lw}:{burst}:results``: counts of ``ok``, ``failed``, ``worker_lost``, the
   workers that answered and the go/done wall-clock times. It then keeps serving its (now zero)
   gauge until SIGTERM.

2. **Test side**: :class:`Harness` (LaneWorkers, simulator pods, go signal, results) and
   :class:`Sampler`, a thread that records the Deployment, the LaneWorker status and the worker
   pods every 0.2 s, from which the tests and the bench compute reaction times. Nothing here
   asserts on time; waits are bounded only so a hang fails.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import sys
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

SIM_METRIC = "berth_session_external_tasks_pending"
SIM_PORT = 9464
REAL_NODE_SELECTOR = {"berth.dev/dev-node": "real"}
TESTS_MOUNT = "/opt/berth-tests"
WAIT_CAP = 240.0


def go_key(ns: str, lw: str, burst: str) -> str:
    return f"berth-test:{ns}:{lw}:{burst}:go"


def results_key(ns: str, lw: str, burst: str) -> str:
    return f"berth-test:{ns}:{lw}:{burst}:results"


# =============================================================================== simulator


async def _simulate() -> None:  # pragma: no cover - runs inside a pod
    from prometheus_client import CollectorRegistry, Gauge, start_http_server
    from redis.asyncio import Redis

    from session_runtime.lanes.external import ExternalReply, ExternalTask
    from session_runtime.tools.base import ToolContext
    from session_runtime.transport import RedisTaskTransport

    env = os.environ
    ns, pod, lw, burst = (
        env["BERTH_NAMESPACE"],
        env["POD_NAME"],
        env["SIM_LANEWORKER"],
        env["SIM_BURST"],
    )
    tasks = int(env.get("SIM_TASKS", "40"))
    command = env.get("SIM_COMMAND", "sleep 1")
    shared = env["SIM_SHARED_ROOT"]
    workspace = os.path.join(shared, "workspaces", ns, pod)
    os.makedirs(workspace, exist_ok=True)

    registry = CollectorRegistry()
    pending = Gauge(
        SIM_METRIC,
        "Execute-lane tasks this session published and has no reply for yet.",
        ["lane", "laneworker"],
        registry=registry,
    )
    gauge = pending.labels(lane="execute", laneworker=lw)
    gauge.set(0)
    start_http_server(int(env.get("SIM_METRICS_PORT", str(SIM_PORT))), env["POD_IP"], registry)

    from berth_contract.taskauth import derive_session_key, read_key_file

    redis: Redis[Any] = Redis.from_url(env["BERTH_REDIS_URL"])
    uid = f"{pod}-{uuid.uuid4().hex[:6]}"
    # A session's key, derived from the namespace master the operator made (mounted here).
    master = read_key_file(env["SIM_TASK_MASTER_KEY_FILE"])
    transport = RedisTaskTransport(
        redis,
        namespace=ns,
        session_name=pod,
        session_uid=uid,
        epoch=1,
        lane_workers={"execute": lw},
        shared_root=workspace,
        task_key=derive_session_key(master, ns, pod),
    )
    replies: dict[str, ExternalReply] = {}
    done = asyncio.Event()
    published = 0

    async def sink(reply: ExternalReply) -> None:
        replies.setdefault(reply.task_id, reply)
        gauge.set(published - len(replies))
        if len(replies) >= tasks:
            done.set()

    await transport.start(sink)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    loop.add_signal_handler(signal.SIGTERM, stop.set)
    while not await redis.get(go_key(ns, lw, burst)):
        if stop.is_set():
            return
        await asyncio.sleep(0.02)
    t_go = time.time()
    ctx = ToolContext(session_id=f"{ns}/{pod}", workspace=workspace, run_id="run-1", turn=1)
    for i in range(tasks):
        task = ExternalTask(
            task_id=f"{uid}-t{i}",
            session_id=f"{ns}/{pod}",
            lane="execute",
            command_type="bash",
            payload={"command": command},
            timeout_ms=600_000,
            created_ms=int(time.time() * 1000),
            tool_call_id=f"call-{i}",
        )
        await transport.publish(task, ctx)
        published += 1
        gauge.set(published - len(replies))
    t_published = time.time()
    await done.wait()
    t_done = time.time()
    failures = [r for r in replies.values() if not r.success]
    summary = {
        "pod": pod,
        "published": published,
        "replies": len(replies),
        "ok": sum(1 for r in replies.values() if r.success),
        "failed": len(failures),
        "worker_lost": sum(1 for r in failures if "worker lost" in (r.error or "")),
        "errors": sorted({r.error or "" for r in failures})[:5],
        "workers": dict(Counter(r.worker or "" for r in replies.values())),
        "t_go": t_go,
        "t_published": t_published,
        "t_done": t_done,
    }
    await redis.rpush(results_key(ns, lw, burst), json.dumps(summary))
    await transport.delete_replies()
    await transport.close()
    await stop.wait()


def main(argv: Sequence[str]) -> int:  # pragma: no cover - runs inside a pod
    if list(argv[:1]) != ["sim"]:
        print("usage: python -m tests.e2e.autoscaling_support sim", file=sys.stderr)
        return 2
    asyncio.run(_simulate())
    return 0


# =============================================================================== test side


def laneworker_manifest(
    name: str,
    *,
    scaling: dict[str, Any] | None,
    concurrency: int = 8,
    max_replicas: int = 6,
    min_replicas: int = 0,
    task_timeout_seconds: int = 120,
    replicas: int | None = None,
) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "lane": "execute",
        "concurrency": concurrency,
        "minReplicas": min_replicas,
        "maxReplicas": max_replicas,
        "taskTimeoutSeconds": task_timeout_seconds,
        "template": {"nodeSelector": REAL_NODE_SELECTOR},
    }
    if scaling is not None:
        spec["scaling"] = scaling
    if replicas is not None:
        spec["replicas"] = replicas
    return {
        "apiVersion": "berth.dev/v1alpha1",
        "kind": "LaneWorker",
        "metadata": {"name": name},
        "spec": spec,
    }


def sim_pod(
    name: str,
    *,
    lw: str,
    burst: str,
    tasks: int,
    command: str,
    root: str,
    redis_url: str,
    image: str,
) -> dict[str, Any]:
    """A session-simulator pod of ``image`` with ``<root>/tests`` mounted (module docstring),
    and the host's directory of the CA file ``redis_url`` names (the dev Redis serves TLS)."""
    from berth_operator.builders.redis_ca import redis_ca_path  # test side only

    def field_ref(path: str) -> dict[str, Any]:
        return {"valueFrom": {"fieldRef": {"fieldPath": path}}}

    pod: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "labels": {"berth.dev/test": "session-sim", "berth.dev/sim-laneworker": lw},
            "annotations": {"prometheus.io/scrape": "true", "prometheus.io/port": str(SIM_PORT)},
        },
        "spec": {
            "nodeSelector": REAL_NODE_SELECTOR,
            "restartPolicy": "Never",
            "terminationGracePeriodSeconds": 5,
            "containers": [
                {
                    "name": "sim",
                    "image": image,
                    "imagePullPolicy": "IfNotPresent",
                    "command": ["python", "-m", "tests.e2e.autoscaling_support", "sim"],
                    "env": [
                        {"name": "PYTHONPATH", "value": TESTS_MOUNT},
                        {"name": "BERTH_REDIS_URL", "value": redis_url},
                        {"name": "BERTH_NAMESPACE", **field_ref("metadata.namespace")},
                        {"name": "POD_NAME", **field_ref("metadata.name")},
                        {"name": "POD_IP", **field_ref("status.podIP")},
                        {"name": "SIM_LANEWORKER", "value": lw},
                        {"name": "SIM_BURST", "value": burst},
                        {"name": "SIM_TASKS", "value": str(tasks)},
                        {"name": "SIM_COMMAND", "value": command},
                        {"name": "SIM_SHARED_ROOT", "value": "/var/lib/berth/shared"},
                        {"name": "SIM_METRICS_PORT", "value": str(SIM_PORT)},
                        {
                            "name": "SIM_TASK_MASTER_KEY_FILE",
                            "value": "/var/run/berth/task-key/master",
                        },
                    ],
                    "ports": [{"name": "metrics", "containerPort": SIM_PORT}],
                    "readinessProbe": {
                        "httpGet": {"path": "/metrics", "port": SIM_PORT},
                        "periodSeconds": 1,
                    },
                    "volumeMounts": [
                        {"name": "shared", "mountPath": "/var/lib/berth/shared"},
                        {"name": "tests", "mountPath": f"{TESTS_MOUNT}/tests", "readOnly": True},
                        {"name": "tmp", "mountPath": "/tmp"},
                        {
                            "name": "task-key",
                            "mountPath": "/var/run/berth/task-key",
                            "readOnly": True,
                        },
                    ],
                    "securityContext": {
                        "runAsNonRoot": True,
                        "readOnlyRootFilesystem": True,
                        "allowPrivilegeEscalation": False,
                        "capabilities": {"drop": ["ALL"]},
                    },
                }
            ],
            "volumes": [
                {"name": "shared", "persistentVolumeClaim": {"claimName": "berth-shared"}},
                {"name": "tests", "hostPath": {"path": f"{root}/tests", "type": "Directory"}},
                {"name": "tmp", "emptyDir": {}},
                {
                    "name": "task-key",
                    "secret": {"secretName": "berth-task-key", "defaultMode": 0o444},
                },
            ],
        },
    }
    ca = redis_ca_path(redis_url)
    if ca is not None:
        ca_dir = os.path.dirname(ca)
        pod["spec"]["volumes"].append({"name": "redis-ca", "hostPath": {"path": ca_dir}})
        pod["spec"]["containers"][0]["volumeMounts"].append(
            {"name": "redis-ca", "mountPath": ca_dir, "readOnly": True}
        )
    return pod


def wait(what: str, check: Callable[[], Any], cap: float = WAIT_CAP, every: float = 0.25) -> Any:
    """Poll ``check`` until truthy; AssertionError naming ``what`` at the cap (a hang)."""
    end = time.monotonic() + cap
    last: Any = None
    while time.monotonic() < end:
        last = check()
        if last:
            return last
        time.sleep(every)
    raise AssertionError(f"gave up waiting for {what}; last: {str(last)[:1500]}")


@dataclass
class Snapshot:
    """One sample of a pool: wall time, Deployment replicas, LaneWorker status, worker pods."""

    t: float
    spec_replicas: int
    ready_replicas: int
    desired: int | None
    pressure: dict[str, Any]
    pods: dict[str, dict[str, Any]]
    """name -> {"cost": deletion-cost annotation or None, "terminating": bool}"""


@dataclass
class Sampler:
    """Samples some LaneWorkers of a namespace every ``every`` seconds in a thread."""

    api: Any
    namespace: str
    laneworkers: Sequence[str]
    every: float = 0.2
    probes: Mapping[str, Callable[[], int | None]] = field(default_factory=dict)
    """Extra readings taken every ``probe_every`` seconds: name -> callable."""
    probe_every: float = 0.5
    samples: dict[str, list[Snapshot]] = field(default_factory=dict)
    probed: dict[str, list[tuple[float, int | None]]] = field(default_factory=dict)
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    _probe_thread: threading.Thread | None = None

    def __enter__(self) -> Sampler:
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()
        if self.probes:
            self._probe_thread = threading.Thread(target=self._run_probes, daemon=True)
            self._probe_thread.start()
        # The first samples describe the pools before the caller acts (e.g. sends the burst).
        wait(
            "the sampler's first readings",
            lambda: (
                all(self.samples.get(lw) for lw in self.laneworkers)
                and all(self.probed.get(name) for name in self.probes)
            ),
            cap=60,
            every=0.05,
        )
        return self

    def __exit__(self, *_: Any) -> None:
        self._stop.set()
        for thread in (self._thread, self._probe_thread):
            if thread is not None:
                thread.join(timeout=10)

    def _run_probes(self) -> None:
        while not self._stop.is_set():
            t = time.time()
            for name, probe in self.probes.items():
                value: int | None
                try:
                    value = probe()
                except Exception:
                    value = None
                self.probed.setdefault(name, []).append((t, value))
            self._stop.wait(self.probe_every)

    def _run(self) -> None:
        from kubernetes import client

        apps = client.AppsV1Api(self.api)
        core = client.CoreV1Api(self.api)
        custom = client.CustomObjectsApi(self.api)
        while not self._stop.is_set():
            for lw in self.laneworkers:
                with contextlib.suppress(Exception):
                    self.samples.setdefault(lw, []).append(self._sample(apps, core, custom, lw))
            self._stop.wait(self.every)

    def _sample(self, apps: Any, core: Any, custom: Any, lw: str) -> Snapshot:
        t = time.time()
        dep = apps.read_namespaced_deployment(f"{lw}-workers", self.namespace)
        obj = custom.get_namespaced_custom_object(
            "berth.dev", "v1alpha1", self.namespace, "laneworkers", lw
        )
        pods = core.list_namespaced_pod(
            self.namespace, label_selector=f"berth.dev/laneworker={lw}"
        ).items
        status = obj.get("status") or {}
        return Snapshot(
            t=t,
            spec_replicas=int(dep.spec.replicas or 0),
            ready_replicas=int(dep.status.ready_replicas or 0),
            desired=status.get("desiredReplicas"),
            pressure=status.get("pressure") or {},
            pods={
                p.metadata.name: {
                    "cost": (p.metadata.annotations or {}).get(
                        "controller.kubernetes.io/pod-deletion-cost"
                    ),
                    "terminating": p.metadata.deletion_timestamp is not None,
                }
                for p in pods
            },
        )

    def of(self, lw: str) -> list[Snapshot]:
        return list(self.samples.get(lw, []))


def first(
    samples: Sequence[Snapshot], pred: Callable[[Snapshot], bool], after: float = 0.0
) -> Snapshot | None:
    """The first sample at or after wall time ``after`` satisfying ``pred``."""
    return next((s for s in samples if s.t >= after and pred(s)), None)


def compress(values: Sequence[int]) -> list[int]:
    """``[0, 0, 4, 4, 2, 0]`` -> ``[0, 4, 2, 0]``."""
    out: list[int] = []
    for v in values:
        if not out or out[-1] != v:
            out.append(v)
    return out


@dataclass
class Harness:
    """Drives LaneWorkers and simulator pods in one namespace of the dev cluster."""

    cluster: Any  # tests.cluster.DevCluster
    namespace: str
    root: str
    redis: Any = None  # redis.Redis (sync)
    api: Any = None  # kubernetes ApiClient

    def __post_init__(self) -> None:
        import redis
        from kubernetes import config

        self.redis = redis.Redis.from_url(self.cluster.env["BERTH_REDIS_URL"])
        new_client: Callable[..., Any] = config.new_client_from_config
        self.api = new_client(config_file=self.cluster.kubeconfig)

    @property
    def redis_url(self) -> str:
        return str(self.cluster.env["BERTH_REDIS_URL"])

    @property
    def image(self) -> str:
        return str(self.cluster.image)

    def apply(self, manifest: dict[str, Any]) -> None:
        self.cluster.kubectl("-n", self.namespace, "apply", "-f", "-", input=json.dumps(manifest))

    def get(self, kind: str, name: str) -> dict[str, Any] | None:
        res = self.cluster.kubectl(
            "-n", self.namespace, "get", kind, name, "-o", "json", check=False
        )
        if res.returncode != 0:
            return None
        obj: dict[str, Any] = json.loads(res.stdout)
        return obj

    def condition(self, lw: str, type_: str) -> dict[str, Any] | None:
        obj = self.get("laneworker", lw) or {}
        for cond in (obj.get("status") or {}).get("conditions") or []:
            if cond.get("type") == type_:
                c: dict[str, Any] = cond
                return c
        return None

    def wait_pool_idle(self, lw: str) -> None:
        """The Deployment exists at 0 replicas and the scaler reported a pressure reading."""

        def check() -> bool:
            dep = self.get("deployment", f"{lw}-workers")
            cond = self.condition(lw, "ScalingActive")
            return bool(
                dep
                and (dep["spec"].get("replicas") or 0) == 0
                and not (dep.get("status") or {}).get("replicas")
                and cond
                and cond["status"] == "True"
            )

        wait(f"{lw}: Deployment at 0 replicas and ScalingActive", check)

    def start_sims(
        self, lw: str, burst: str, *, count: int = 4, tasks: int = 40, command: str = "sleep 1"
    ) -> list[str]:
        names = [f"sim-{lw}-{burst}-{i}" for i in range(count)]
        for name in names:
            self.apply(
                sim_pod(
                    name,
                    lw=lw,
                    burst=burst,
                    tasks=tasks,
                    command=command,
                    root=self.root,
                    redis_url=self.redis_url,
                    image=self.image,
                )
            )
        return names

    def wait_sims_ready(self, names: Sequence[str]) -> None:
        def ready(name: str) -> bool:
            pod = self.get("pod", name) or {}
            return any(
                c.get("type") == "Ready" and c.get("status") == "True"
                for c in (pod.get("status") or {}).get("conditions") or []
            )

        wait("simulator pods Ready", lambda: all(ready(n) for n in names))

    def go(self, lw: str, burst: str) -> float:
        t = time.time()
        self.redis.set(go_key(self.namespace, lw, burst), "1", ex=3600)
        return t

    def results(
        self, lw: str, burst: str, count: int, cap: float = WAIT_CAP
    ) -> list[dict[str, Any]]:
        key = results_key(self.namespace, lw, burst)
        wait(
            f"{count} simulator results of {lw}/{burst}",
            lambda: self.redis.llen(key) >= count,
            cap=cap,
            every=0.5,
        )
        return [json.loads(raw) for raw in self.redis.lrange(key, 0, -1)]

    def delete_sims(self, lw: str) -> None:
        self.cluster.kubectl(
            "-n",
            self.namespace,
            "delete",
            "pod",
            "-l",
            f"berth.dev/sim-laneworker={lw}",
            "--wait=false",
            check=False,
        )

    def wait_pool_zero(self, lw: str, cap: float = WAIT_CAP) -> None:
        def check() -> bool:
            dep = self.get("deployment", f"{lw}-workers") or {}
            return (dep.get("spec") or {}).get("replicas") == 0 and not (
                dep.get("status") or {}
            ).get("replicas")

        wait(f"{lw} back to zero workers", check, cap=cap, every=0.5)

    def prometheus_query(self, query: str) -> list[dict[str, Any]]:
        import urllib.parse
        import urllib.request

        url = (
            self.cluster.env["PROMETHEUS_URL"]
            + "/api/v1/query?"
            + urllib.parse.urlencode({"query": query})
        )
        with urllib.request.urlopen(url, timeout=5) as response:
            body = json.loads(response.read())
        result: list[dict[str, Any]] = body["data"]["result"]
        return result


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main(sys.argv[1:]))
