"""Start-up figures of ``bench/peers.py`` on the dev cluster's real nodes: warm adoption (Berth's
SessionWarmPool against agent-sandbox's SandboxWarmPool, a burst and Poisson arrivals) and cold
start (AgentSessions without a pool against bare pods of the same image).

Berth's adoption is AgentSession created → the session's first model request (the agent really
runs); agent-sandbox's is SandboxClaim created → the claim seen Ready by a watch (its Sandbox
Ready), beside the controller's own ``agent_sandbox_claim_controller_startup_latency_ms``. Cold
start is Kubernetes' pod start-up SLI for the bare pods (creation → all containers started, seen
by a watch) and, for the sessions, creation → first model request (also printed: → the session
pod's container started). All times are the bench's wall clock (the scripted model stamps its
requests with the same clock).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from kubernetes import client, config, watch

from bench.peer_figures import (
    pct,
    sandbox_claim_manifest,
    sandbox_template_manifest,
    sandbox_warm_pool_manifest,
)
from bench.peer_kinds import agent_sandbox_controller, metrics_text
from bench.podsteps import PodSteps
from bench.warm_placement import N as POOL
from bench.warm_placement import _ready_warm, first_request, pool_manifest
from tests.cluster import DevCluster
from tests.integration.operator.harness import (
    SECRET,
    apply_in,
    operator,
    session_manifest,
    wait,
)

PYTHON_SLEEP = ["python3", "-c", "import time; time.sleep(3600)"]
"""A trivial Python command in Berth's image (it stays up, so a watch sees it started)."""


def plain_pod(image: str, name: str) -> dict[str, Any]:
    """A pod of ``image`` running :data:`PYTHON_SLEEP` as the session pod's user, no volumes."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": {"app": "bench-plain"}},
        "spec": {
            "restartPolicy": "Never",
            "terminationGracePeriodSeconds": 1,
            "automountServiceAccountToken": False,
            "securityContext": {"runAsNonRoot": True, "runAsUser": 10001, "runAsGroup": 10001},
            "containers": [
                {
                    "name": "main",
                    "image": image,
                    "imagePullPolicy": "IfNotPresent",
                    "command": PYTHON_SLEEP,
                }
            ],
        },
    }


def arrivals(offsets: list[float], create: Callable[[str], None], prefix: str) -> list[str]:
    """Call ``create(name)`` at each offset (seconds from now; all 0: a burst), from a pool of
    threads so a slow create does not delay the next; returns the names in order."""
    names = [f"{prefix}{i:03d}" for i in range(len(offsets))]
    start = time.monotonic()
    with ThreadPoolExecutor(max_workers=min(32, len(names))) as pool:
        for name, at in zip(names, offsets, strict=True):
            time.sleep(max(0.0, start + at - time.monotonic()))
            pool.submit(create, name)
    return names


def berth_adoption(dc: DevCluster, llm: Any, offsets: list[float], tag: str) -> list[float]:
    """A SessionWarmPool of :data:`POOL` Ready pods, then one AgentSession naming it per offset;
    create → first model request for each (seconds)."""
    custom = client.CustomObjectsApi(config.new_client_from_config(config_file=dc.kubeconfig))
    with dc.namespace(f"bench-peer-warm-{tag}") as ns, operator(dc, ns) as op:
        apply_in(dc, ns, [SECRET, pool_manifest(llm.base_url)])
        wait(f"{POOL} Ready warm pods", lambda: _ready_warm(dc, ns) >= POOL, cap=600)
        created: dict[str, float] = {}

        def create(name: str) -> None:
            doc = session_manifest(
                name, llm.base_url, f"bench {ns} {name}", warmPoolRef={"name": "pool"}
            )
            created[name] = time.time()
            custom.create_namespaced_custom_object(
                "berth.dev", "v1alpha1", ns, "agentsessions", doc
            )

        names = arrivals(offsets, create, "s")
        prompts = {n: f"bench {ns} {n}" for n in names}
        wait(
            f"{len(names)} runs started",
            lambda: all(first_request(llm, p) is not None for p in prompts.values()),
            cap=900,
        )
        adopted = [
            line
            for line in op.metrics().splitlines()
            if line.startswith("berth_operator_warm_adoption_seconds_") and "_count" in line
        ]
        print(f"berth {tag}: adoptions counted by the operator: {adopted}", flush=True)
        return [(first_request(llm, prompts[n]) or float("nan")) - created[n] for n in names]


class ClaimReady(threading.Thread):
    """Watches the SandboxClaims of ``namespace``; ``ready[name]`` is the wall-clock time each
    was first seen with condition Ready=True."""

    def __init__(self, api: Any, namespace: str) -> None:
        super().__init__(daemon=True)
        self.custom = client.CustomObjectsApi(api)
        self.namespace = namespace
        self.ready: dict[str, float] = {}
        self.stop = threading.Event()

    def run(self) -> None:
        while not self.stop.is_set():
            try:
                for ev in watch.Watch().stream(
                    self.custom.list_namespaced_custom_object,
                    "extensions.agents.x-k8s.io",
                    "v1beta1",
                    self.namespace,
                    "sandboxclaims",
                    timeout_seconds=5,
                ):
                    obj = ev["object"]
                    conds = (obj.get("status") or {}).get("conditions") or []
                    if any(c.get("type") == "Ready" and c.get("status") == "True" for c in conds):
                        self.ready.setdefault(obj["metadata"]["name"], time.time())
                    if self.stop.is_set():
                        return
            except Exception:
                time.sleep(0.1)


def sandbox_adoption(dc: DevCluster, offsets: list[float], tag: str, log: Path) -> list[float]:
    """A SandboxWarmPool of :data:`POOL` Ready sandboxes (the image of Berth's pods running
    :data:`PYTHON_SLEEP`), then one SandboxClaim on it per offset; create → claim Ready each."""
    api = config.new_client_from_config(config_file=dc.kubeconfig)
    custom = client.CustomObjectsApi(api)
    group, version = "extensions.agents.x-k8s.io", "v1beta1"
    with dc.namespace(f"bench-peer-asb-{tag}") as ns, agent_sandbox_controller(dc, log) as proc:
        pod = plain_pod(dc.image, "template")
        docs = [
            sandbox_template_manifest("tpl", pod),
            sandbox_warm_pool_manifest("pool", "tpl", POOL),
        ]
        apply_in(dc, ns, docs)

        def ready_replicas() -> int:
            obj = custom.get_namespaced_custom_object(
                group, version, ns, "sandboxwarmpools", "pool"
            )
            return int((obj.get("status") or {}).get("readyReplicas") or 0)

        wait(f"{POOL} Ready warm sandboxes", lambda: ready_replicas() >= POOL, cap=600)
        watcher = ClaimReady(api, ns)
        watcher.start()
        time.sleep(1.0)
        created: dict[str, float] = {}

        def create(name: str) -> None:
            created[name] = time.time()
            custom.create_namespaced_custom_object(
                group, version, ns, "sandboxclaims", sandbox_claim_manifest(name, "pool")
            )

        names = arrivals(offsets, create, "c")
        wait(f"{len(names)} claims Ready", lambda: all(n in watcher.ready for n in names), cap=900)
        watcher.stop.set()
        own = [
            line
            for line in metrics_text(proc.metrics_port).splitlines()  # type: ignore[attr-defined]
            if line.startswith("agent_sandbox_claim_controller_startup_latency_ms_")
            and ("_sum" in line or "_count" in line)
        ]
        print(f"agent-sandbox {tag}: its own claim latency: {own}", flush=True)
        dc.kubectl(
            "-n",
            ns,
            "delete",
            "sandboxclaims,sandboxwarmpools,sandboxes",
            "--all",
            "--wait=true",
            "--timeout=180s",
            check=False,
            timeout=200,
        )
        return [watcher.ready[n] - created[n] for n in names]


def cold_start(dc: DevCluster, llm: Any, n: int) -> dict[str, list[float]]:
    """``n`` bare pods of Berth's image (:func:`plain_pod`) at once: creation → container started;
    then ``n`` AgentSessions without a pool at once: creation → first model request (``session``)
    and → the session pod's container started (``session-pod-started``). Seconds."""
    api = config.new_client_from_config(config_file=dc.kubeconfig)
    core = client.CoreV1Api(api)
    out: dict[str, list[float]] = {}
    with dc.namespace("bench-peer-bare") as ns:
        steps = PodSteps(api, ns)
        steps.start()
        time.sleep(1.0)
        created: dict[str, float] = {}

        def create_pod(name: str) -> None:
            created[name] = time.time()
            core.create_namespaced_pod(ns, plain_pod(dc.image, name))

        names = arrivals([0.0] * n, create_pod, "p")
        wait(
            f"{n} bare pods started",
            lambda: all("started" in steps.at.get(x, {}) for x in names),
            cap=600,
        )
        steps.stop.set()
        out["bare-pod"] = [steps.at[x]["started"] - created[x] for x in names]
        dc.kubectl("-n", ns, "delete", "pods", "--all", "--wait=false", check=False)
    custom = client.CustomObjectsApi(api)
    with dc.namespace("bench-peer-cold") as ns, operator(dc, ns):
        apply_in(dc, ns, [SECRET])
        time.sleep(2.0)  # operator leading, watches established
        steps = PodSteps(api, ns, key=lambda p: (p.metadata.labels or {}).get("berth.dev/session"))
        steps.start()
        created = {}

        def create_session(name: str) -> None:
            doc = session_manifest(name, llm.base_url, f"bench {ns} {name}")
            created[name] = time.time()
            custom.create_namespaced_custom_object(
                "berth.dev", "v1alpha1", ns, "agentsessions", doc
            )

        names = arrivals([0.0] * n, create_session, "s")
        wait(
            f"{n} runs started",
            lambda: all(first_request(llm, f"bench {ns} {x}") is not None for x in names),
            cap=600,
        )
        steps.stop.set()
        out["session"] = [
            (first_request(llm, f"bench {ns} {x}") or float("nan")) - created[x] for x in names
        ]
        out["session-pod-started"] = [
            steps.at.get(x, {}).get("started", float("nan")) - created[x] for x in names
        ]
    for key, values in out.items():
        print(f"cold {key}: p50 {pct(values, 50):.2f} s, p99 {pct(values, 99):.2f} s", flush=True)
    return out
