"""A pod watch for the benchmarks: per pod (or per what a key function names it by), the
wall-clock time it was first seen, bound to a node, seen with a container running, seen Ready,
seen being deleted, and seen gone. ``scaling.py`` watches a LaneWorker's new worker pods with
it, ``cold.py`` the session pods of a burst, ``drain.py`` what a drain waits for."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

from kubernetes import client, watch

STEPS = ("seen", "bound", "started", "ready")
ENDS = ("deleting", "gone")
"""Steps at a pod's end: ``metadata.deletionTimestamp`` first seen, the DELETED event."""


def by_name(pod: Any) -> str | None:
    """The default key: the pod's own name."""
    return str(pod.metadata.name)


class PodSteps(threading.Thread):
    """Watches the pods of ``namespace`` (those matching ``selector``, when given) until
    ``stop`` is set; ``at[key(pod)]`` maps each step of :data:`STEPS` and :data:`ENDS` to the
    wall-clock time (``time.time()``) it was first seen, and ``node[key(pod)]`` is the node it
    was last seen bound to. Pods the key names None are skipped. A dropped watch is watched
    again; the last error is kept in ``error``."""

    def __init__(
        self,
        api: Any,
        namespace: str,
        selector: str | None = None,
        key: Callable[[Any], str | None] = by_name,
    ) -> None:
        super().__init__(daemon=True)
        self.core = client.CoreV1Api(api)
        self.namespace = namespace
        self.selector = selector
        self.key = key
        self.at: dict[str, dict[str, float]] = {}
        self.node: dict[str, str] = {}
        self.stop = threading.Event()
        self.error: Exception | None = None

    def run(self) -> None:
        options: dict[str, Any] = {"timeout_seconds": 2}
        if self.selector:
            options["label_selector"] = self.selector
        version: str | None = None  # each watch goes on where the last one ended: no event lost
        while not self.stop.is_set():
            w = watch.Watch()
            try:
                more = {"resource_version": version} if version else {}
                stream = w.stream(self.core.list_namespaced_pod, self.namespace, **options, **more)
                for ev in stream:
                    self.record(ev["object"], time.time(), ev["type"])
                    if self.stop.is_set():
                        return
                version = w.resource_version
            except Exception as exc:  # a dropped watch (or its version expired): watch again
                self.error = exc
                version = None
                time.sleep(0.1)

    def record(self, pod: Any, now: float, event: str = "MODIFIED") -> None:
        """Notes the steps ``pod`` shows at ``now`` (seconds since the epoch); ``event``: the
        watch event's type (ADDED, MODIFIED, DELETED)."""
        name = self.key(pod)
        if name is None:
            return
        steps = self.at.setdefault(name, {"seen": now})
        if pod.spec.node_name:
            steps.setdefault("bound", now)
            self.node[name] = pod.spec.node_name
        if pod.metadata.deletion_timestamp is not None:
            steps.setdefault("deleting", now)
        if event == "DELETED":
            steps.setdefault("gone", now)
        if any(c.state and c.state.running for c in pod.status.container_statuses or []):
            steps.setdefault("started", now)
        if any(c.type == "Ready" and c.status == "True" for c in pod.status.conditions or []):
            steps.setdefault("ready", now)
