"""Test-only Prometheus service discovery for the dev cluster (ARCHITECTURE §9).

Debian's ``prometheus`` package is built without the Kubernetes service discovery, so this small
loop stands in for it: every ``--interval`` seconds it lists the pods annotated
``prometheus.io/scrape: "true"`` that are Running with a pod IP, and writes them as a
``file_sd_configs`` target file (atomically: temp file + rename), with the labels ``namespace``,
``pod`` and ``component`` (from ``app.kubernetes.io/component``). The target address is
``<podIP>:<prometheus.io/port>``; ``prometheus.io/path`` sets ``__metrics_path__``.
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from typing import Any

import kubernetes


def targets_for(pods: list[Any]) -> list[dict[str, Any]]:
    """Map pod objects (kubernetes client models) to file_sd target groups, one per pod."""
    groups: list[dict[str, Any]] = []
    for pod in pods:
        ann = pod.metadata.annotations or {}
        if ann.get("prometheus.io/scrape") != "true" or not ann.get("prometheus.io/port"):
            continue
        if pod.status.phase != "Running" or not pod.status.pod_ip:
            continue
        labels = {
            "namespace": pod.metadata.namespace,
            "pod": pod.metadata.name,
            "component": (pod.metadata.labels or {}).get("app.kubernetes.io/component", ""),
        }
        if ann.get("prometheus.io/path"):
            labels["__metrics_path__"] = ann["prometheus.io/path"]
        groups.append(
            {"targets": [f"{pod.status.pod_ip}:{ann['prometheus.io/port']}"], "labels": labels}
        )
    return groups


def write_atomic(path: str, data: str) -> None:
    """Write ``data`` to ``path`` so readers never see a partial file."""
    fd, tmp = tempfile.mkstemp(dir=os.path.dirname(path), prefix=".targets-")
    with os.fdopen(fd, "w") as f:
        f.write(data)
    os.replace(tmp, path)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--kubeconfig", required=True)
    parser.add_argument("--out", required=True, help="file_sd JSON file to write")
    parser.add_argument("--interval", type=float, default=2.0, help="seconds between listings")
    args = parser.parse_args()
    kubernetes.config.load_kube_config(config_file=args.kubeconfig)
    api = kubernetes.client.CoreV1Api()
    last = None
    while True:
        try:
            data = json.dumps(targets_for(api.list_pod_for_all_namespaces().items), indent=1)
            if data != last:
                write_atomic(args.out, data)
                last = data
        except Exception as exc:  # keep discovering through apiserver hiccups
            print(f"prom_targets: {exc}", flush=True)
        time.sleep(args.interval)


if __name__ == "__main__":
    main()
