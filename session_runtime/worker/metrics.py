"""The ``berth_worker_*`` Prometheus metrics a worker keeps, in their own registry."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from session_runtime.lanes.config import LANES
from session_runtime.worker.tasks import OUTCOMES


class WorkerMetrics:
    """The ``berth_worker_*`` metrics, in their own registry. Labels: lane, outcome (fixed sets)."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry()
        self.tasks = Counter(
            "berth_worker_tasks",
            "Tasks finished by this worker, by lane and outcome.",
            ["lane", "outcome"],
            registry=self.registry,
        )
        self.duration = Histogram(
            "berth_worker_task_duration_seconds",
            "Time from a task's start on this worker to its reply, in seconds.",
            ["lane"],
            buckets=(0.01, 0.05, 0.1, 0.5, 1, 5, 15, 60, 300, 900, 3600),
            registry=self.registry,
        )
        self.rejected = Counter(
            "berth_worker_tasks_rejected",
            "Task entries dropped unrun and unanswered (forged, foreign, oversized, duplicate).",
            ["reason"],
            registry=self.registry,
        )
        self.undeliverable = Counter(
            "berth_worker_replies_undeliverable",
            "Replies that could not be written because the reply key is not a stream (kept on "
            "the dead-letter stream).",
            registry=self.registry,
        )
        self.busy = Gauge("berth_worker_busy", "Tasks running now.", registry=self.registry)
        self.capacity = Gauge(
            "berth_worker_capacity", "Tasks this worker runs at once.", registry=self.registry
        )

    def finished(self, lane: str, outcome: str, seconds: float | None = None) -> None:
        """Count one finished task; observe ``seconds`` (start to reply) when given.

        A lane not in ``LANES`` counts as ``unknown``, an outcome not in ``OUTCOMES`` as ``error``
        (label values stay a fixed set, as Prometheus label cardinality wants).
        """
        lane = lane if lane in LANES else "unknown"
        self.tasks.labels(lane=lane, outcome=outcome if outcome in OUTCOMES else "error").inc()
        if seconds is not None:
            self.duration.labels(lane=lane).observe(seconds)
