"""The pure parts of ``bench/peers.py``: percentiles, the ``PEER ...`` lines, and the manifests of
the peers (a Job, an agent-sandbox Sandbox, SandboxTemplate, SandboxWarmPool, SandboxClaim) built
from the very pod the operator would create for a session, so every kind runs the same template.

No cluster here; ``tests/unit/bench/test_peer_figures.py`` covers it.
"""

from __future__ import annotations

import copy
import math
from typing import Any

SANDBOX_API = "agents.x-k8s.io/v1beta1"
"""agent-sandbox's core group (``Sandbox``), v1.0.x."""
EXTENSIONS_API = "extensions.agents.x-k8s.io/v1beta1"
"""agent-sandbox's extensions group (``SandboxTemplate``, ``SandboxWarmPool``, ``SandboxClaim``)."""

PLACEMENT_PEERS = (
    ("bare", "sessions/bare"),
    ("jobs", "sessions/jobs"),
    ("jobs-default-qps", "sessions/jobs-default-qps"),
    ("agent-sandbox", "sessions/agent-sandbox"),
)
"""(result key of the peer kind, label of its ``PEER`` line); the sessions are ``sessions``."""


def pct(values: list[float], q: float) -> float:
    """Nearest-rank percentile of ``values`` (``q`` in 0..100: the smallest value with at least
    q % of the values at or below it); NaN for no values. p99 of 20 values is the largest."""
    if not values:
        return math.nan
    ordered = sorted(values)
    rank = max(1, min(len(ordered), math.ceil(q / 100 * len(ordered))))
    return ordered[rank - 1]


def ratio(ours: float | None, theirs: float | None) -> str:
    """``ours / theirs`` as ``1.23x``; ``n/a`` when either is missing, NaN or the peer's is 0."""
    if ours is None or theirs is None or math.isnan(ours) or math.isnan(theirs) or theirs <= 0:
        return "n/a"
    return f"{ours / theirs:.2f}x"


def _stat(kinds: dict[str, Any], kind: str, field: str) -> float | None:
    value = (kinds.get(kind) or {}).get(field)
    return None if value is None else float(value)


def placement_lines(placement: dict[str, Any] | None) -> list[str]:
    """The four placement ``PEER`` lines from ``{"kinds": {kind: {"total": s, "p99": s}}}``
    (the largest N's run), sessions over each peer; ``n/a`` for what was not measured."""
    kinds = (placement or {}).get("kinds") or {}
    lines = []
    for kind, label in PLACEMENT_PEERS:
        total = ratio(_stat(kinds, "sessions", "total"), _stat(kinds, kind, "total"))
        p99 = ratio(_stat(kinds, "sessions", "p99"), _stat(kinds, kind, "p99"))
        lines.append(f"PEER {label}: total {total}, p99 {p99}")
    return lines


def _lat(section: dict[str, Any] | None, key: str) -> list[float]:
    return [float(v) for v in ((section or {}).get(key) or [])]


def peer_lines(results: dict[str, Any]) -> list[str]:
    """Every ``PEER`` line the issue's comparison asks for, in its order, from the merged results
    of ``bench/peers.py`` (``placement``; ``adoption`` → ``burst``/``steady`` → ``berth`` and
    ``agent-sandbox`` latency lists in seconds; ``cold`` → ``session``/``bare-pod``; ``drain`` →
    ``warm``/``cold`` resume latencies). Ratio = Berth / peer."""
    lines = placement_lines(results.get("placement"))
    adoption = results.get("adoption") or {}
    for mode in ("burst", "steady"):
        ours = _lat(adoption.get(mode), "berth")
        theirs = _lat(adoption.get(mode), "agent-sandbox")
        lines.append(
            f"PEER adoption berth/agent-sandbox {mode}: p50 {ratio(pct(ours, 50), pct(theirs, 50))}"
            f", p99 {ratio(pct(ours, 99), pct(theirs, 99))}"
        )
    cold = results.get("cold")
    lines.append(
        "PEER cold-start session/bare-pod: p99 "
        + ratio(pct(_lat(cold, "session"), 99), pct(_lat(cold, "bare-pod"), 99))
    )
    drain = results.get("drain")
    lines.append(
        "PEER drain-resume warm/cold: p99 "
        + ratio(pct(_lat(drain, "warm"), 99), pct(_lat(drain, "cold"), 99))
    )
    return lines


def pod_template(pod: dict[str, Any]) -> dict[str, Any]:
    """A pod template (``metadata`` with the pod's labels and annotations, the pod's ``spec``)
    from a pod manifest such as ``build_session_pod``'s; a deep copy, the pod is left as it was."""
    meta = pod.get("metadata") or {}
    return {
        "metadata": {
            "labels": dict(meta.get("labels") or {}),
            "annotations": dict(meta.get("annotations") or {}),
        },
        "spec": copy.deepcopy(pod["spec"]),
    }


def job_manifest(name: str, pod: dict[str, Any]) -> dict[str, Any]:
    """A ``batch/v1`` Job of one pod (parallelism and completions 1, no retry) whose template is
    ``pod``'s (the session pod: its ``restartPolicy: Never`` is what a Job requires)."""
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name},
        "spec": {
            "parallelism": 1,
            "completions": 1,
            "backoffLimit": 0,
            "template": pod_template(pod),
        },
    }


def sandbox_manifest(name: str, pod: dict[str, Any]) -> dict[str, Any]:
    """An agent-sandbox ``Sandbox`` whose ``spec.podTemplate`` is ``pod``'s template."""
    return {
        "apiVersion": SANDBOX_API,
        "kind": "Sandbox",
        "metadata": {"name": name},
        "spec": {"podTemplate": pod_template(pod)},
    }


def sandbox_template_manifest(name: str, pod: dict[str, Any]) -> dict[str, Any]:
    """A ``SandboxTemplate`` of ``pod``'s template, with agent-sandbox's NetworkPolicy management
    off (Berth's warm pods get none either; the dev cluster enforces policies)."""
    return {
        "apiVersion": EXTENSIONS_API,
        "kind": "SandboxTemplate",
        "metadata": {"name": name},
        "spec": {"podTemplate": pod_template(pod), "networkPolicyManagement": "Unmanaged"},
    }


def sandbox_warm_pool_manifest(name: str, template: str, replicas: int) -> dict[str, Any]:
    """A ``SandboxWarmPool`` of ``replicas`` sandboxes of the SandboxTemplate ``template``."""
    return {
        "apiVersion": EXTENSIONS_API,
        "kind": "SandboxWarmPool",
        "metadata": {"name": name},
        "spec": {"replicas": replicas, "sandboxTemplateRef": {"name": template}},
    }


def sandbox_claim_manifest(name: str, pool: str) -> dict[str, Any]:
    """A ``SandboxClaim`` that takes a sandbox from the SandboxWarmPool ``pool``."""
    return {
        "apiVersion": EXTENSIONS_API,
        "kind": "SandboxClaim",
        "metadata": {"name": name},
        "spec": {"warmPoolRef": {"name": pool}},
    }


def poisson_offsets(rate: float, seconds: float, seed: int = 55) -> list[float]:
    """Arrival times (seconds from the start, ascending, all below ``seconds``) of a Poisson
    process of ``rate`` arrivals a second, from a seeded generator: the same run each time."""
    import random

    rng = random.Random(seed)
    out: list[float] = []
    at = rng.expovariate(rate)
    while at < seconds:
        out.append(at)
        at += rng.expovariate(rate)
    return out
