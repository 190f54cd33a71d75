"""Prometheus metrics of SessionWarmPools (the operator's default registry, served on /metrics).

- ``berth_operator_warm_pool_pods{namespace,pool,state}``: warm pods by state: ``ready``
  (adoptable), ``total`` (existing or being created, of the current template), ``adopting``
  (claimed by an adoption in flight).
- ``berth_operator_warm_adoptions_total{outcome}``: adoption attempts: ``adopted``, ``no_pod``
  (no Ready eligible pod: the session's pod was created), ``template_mismatch``, ``no_pool``,
  ``failed`` (the pod refused — 409 when another adopter had it — or was unreachable, or the
  relabelling patch failed).
- ``berth_operator_warm_adoption_seconds``: from choosing a warm pod to the session's pod being
  in place (``POST /v1/adopt`` plus the relabelling patch), seconds.
"""

from __future__ import annotations

import contextlib

from prometheus_client import Counter, Gauge, Histogram

WARM_POOL_PODS = Gauge(
    "berth_operator_warm_pool_pods",
    "Warm pods of a SessionWarmPool by state (ready, total, adopting).",
    ["namespace", "pool", "state"],
)
WARM_ADOPTIONS = Counter(
    "berth_operator_warm_adoptions_total",
    "Adoption attempts of warm pods by outcome.",
    ["outcome"],
)
WARM_ADOPTION_SECONDS = Histogram(
    "berth_operator_warm_adoption_seconds",
    "Seconds from choosing a warm pod to it being the session's pod (adopt call + patch).",
    buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.2, 0.3, 0.5, 1, 2, 5),
)


def set_pool_pods(namespace: str, pool: str, ready: int, total: int, adopting: int) -> None:
    """Set the three ``berth_operator_warm_pool_pods`` series of one pool."""
    WARM_POOL_PODS.labels(namespace, pool, "ready").set(ready)
    WARM_POOL_PODS.labels(namespace, pool, "total").set(total)
    WARM_POOL_PODS.labels(namespace, pool, "adopting").set(adopting)


def forget_pool(namespace: str, pool: str) -> None:
    """Drop the series of a deleted pool."""
    for state in ("ready", "total", "adopting"):
        with contextlib.suppress(KeyError):
            WARM_POOL_PODS.remove(namespace, pool, state)
