"""Test-only Prometheus service discovery for the dev cluster (docs/architecture.md §9).

Debian's ``prometheus`` package is built without the Kubernetes service discovery, so this small
loop stands in for it, the way Prometheus's own does: it lists the cluster's pods once, then
follows a watch from that list's resourceVersion (and lists again when the watch ends or its
resourceVersion is too old). At most every ``--interval`` seconds, when the set changed, it
writes the pods annotated ``prometheus.io/scrape: "true"`` that are Running with a pod IP as a
``file_sd_configs`` target file (atomically: temp file + rename), with the labels ``namespace``,
``pod`` and ``component`` (from ``app.kubernetes.io/component``). The target address is
``<podIP>:<prometheus.io/port>``; ``prometheus.io/path`` sets ``__metrics_path__``.

Pods are read as plain JSON (``_preload_content=False``), not as the client's model objects: a
full listing every two seconds, deserialized into models, cost this helper and the apiserver
most of a core while benchmarks placed a thousand pods.
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import threading
import time
from typing import Any

import kubernetes

Target = dict[str, Any]


def target_of(pod: dict[str, Any]) -> Target | None:
    """The file_sd target group of one pod (a Pod object as JSON), or None when it is not to be
    scraped (not annotated, not Running, no pod IP)."""
    meta = pod.get("metadata") or {}
    status = pod.get("status") or {}
    ann = meta.get("annotations") or {}
    if ann.get("prometheus.io/scrape") != "true" or not ann.get("prometheus.io/port"):
        return None
    if status.get("phase") != "Running" or not status.get("podIP"):
        return None
    labels = {
        "namespace": meta.get("namespace", ""),
        "pod": meta.get("name", ""),
        "component": (meta.get("labels") or {}).get("app.kubernetes.io/component", ""),
    }
    if ann.get("prometheus.io/path"):
        labels["__metrics_path__"] = ann["prometheus.io/path"]
    return {"targets": [f"{status['podIP']}:{ann['prometheus.io/port']}"], "labels": labels}


def write_atomic(path: str, data: str) -> None:
    """Write ``data`` to ``path`` so readers never see a partial file."""
    fd, tmp = tempfile.mkstemp(dir=os.path.dirname(path), prefix=".targets-")
    with os.fdopen(fd, "w") as f:
        f.write(data)
    os.replace(tmp, path)


class Targets:
    """The current targets by pod uid, shared between the watch thread and the writer."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._by_uid: dict[str, Target] = {}
        self.listed = threading.Event()
        """Set once the first listing is in."""

    def replace(self, pods: list[dict[str, Any]]) -> None:
        """A fresh listing: every target from ``pods``, nothing else."""
        fresh = {}
        for pod in pods:
            target = target_of(pod)
            if target is not None:
                fresh[pod["metadata"]["uid"]] = target
        with self._lock:
            self._by_uid = fresh
        self.listed.set()

    def apply(self, kind: str, pod: dict[str, Any]) -> None:
        """One watch event (ADDED, MODIFIED, DELETED) of ``pod``."""
        uid = (pod.get("metadata") or {}).get("uid")
        if not uid:
            return
        target = None if kind == "DELETED" else target_of(pod)
        with self._lock:
            if target is None:
                self._by_uid.pop(uid, None)
            else:
                self._by_uid[uid] = target

    def render(self) -> str:
        """The target file's JSON, in a stable order (namespace, pod)."""
        with self._lock:
            groups = list(self._by_uid.values())
        groups.sort(key=lambda g: (g["labels"]["namespace"], g["labels"]["pod"]))
        return json.dumps(groups, indent=1)


def lines(response: Any) -> Any:
    """The non-empty lines of a streamed HTTP response (one watch event each), whatever the
    chunk boundaries."""
    pending = b""
    for chunk in response.stream(amt=None, decode_content=True):
        pending += chunk
        *complete, pending = pending.split(b"\n")
        for line in complete:
            if line.strip():
                yield line
    if pending.strip():
        yield pending


def follow(api: Any, targets: Targets) -> None:
    """List the pods, then follow the watch from the listing's resourceVersion; return when the
    watch ends (its timeout, a 410 Gone, a dropped connection) so the caller lists again."""
    listing = json.loads(api.list_pod_for_all_namespaces(_preload_content=False).data)
    targets.replace(listing.get("items") or [])
    rv = listing["metadata"]["resourceVersion"]
    stream = api.list_pod_for_all_namespaces(
        watch=True,
        resource_version=rv,
        allow_watch_bookmarks=True,
        timeout_seconds=300,
        _preload_content=False,
    )
    try:
        for line in lines(stream):
            event = json.loads(line)
            kind = event.get("type")
            if kind == "ERROR":  # e.g. 410 Gone: list again
                return
            if kind in ("ADDED", "MODIFIED", "DELETED"):
                targets.apply(kind, event.get("object") or {})
    finally:
        stream.release_conn()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--kubeconfig", required=True)
    parser.add_argument("--out", required=True, help="file_sd JSON file to write")
    parser.add_argument("--interval", type=float, default=2.0, help="seconds between writes")
    args = parser.parse_args()
    kubernetes.config.load_kube_config(config_file=args.kubeconfig)
    api = kubernetes.client.CoreV1Api()
    targets = Targets()

    def watch_forever() -> None:
        while True:
            try:
                follow(api, targets)
            except Exception as exc:  # keep discovering through apiserver hiccups
                print(f"prom_targets: {exc}", flush=True)
                time.sleep(args.interval)

    threading.Thread(target=watch_forever, name="pod-watch", daemon=True).start()
    targets.listed.wait()
    last = None
    while True:
        data = targets.render()
        if data != last:
            write_atomic(args.out, data)
            last = data
        time.sleep(args.interval)


if __name__ == "__main__":
    main()
