"""Helpers of the chart integration tests: helm against the dev cluster, the prometheus-operator
CRDs, and readers of /metrics and Prometheus.

The monitoring.coreos.com CRDs come from the prometheus-operator Go module (its
``example/prometheus-operator-crd/`` directory), fetched through the Go module proxy with
``go mod download`` at a pinned version: the real CRDs, not stubs.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from tests.cluster import DevCluster
from tests.unit.chart.helm import CHART, require_helm

PROMETHEUS_OPERATOR = "github.com/prometheus-operator/prometheus-operator"
PROMETHEUS_OPERATOR_VERSION = "v0.85.0"
MONITORING_CRDS = ("servicemonitors", "podmonitors", "prometheusrules")


def helm(
    dc: DevCluster, *args: str, input: str | None = None, check: bool = True
) -> subprocess.CompletedProcess[str]:
    """Run helm with the cluster's KUBECONFIG."""
    proc = subprocess.run(
        [require_helm(), *args],
        input=input,
        capture_output=True,
        text=True,
        env=dc.proc_env,
        timeout=300,
        check=False,
    )
    if check and proc.returncode != 0:
        raise AssertionError(f"helm {' '.join(args)} failed:\n{proc.stdout}\n{proc.stderr}")
    return proc


def prometheus_operator_crds() -> list[Path]:
    """Paths of the three monitoring CRDs from the pinned prometheus-operator module."""
    go = shutil.which("go")
    if go is None:
        pytest.skip("go is not installed (needed to fetch the prometheus-operator CRDs)")
    with tempfile.TemporaryDirectory() as tmp:
        proc = subprocess.run(
            [
                go,
                "mod",
                "download",
                "-json",
                f"{PROMETHEUS_OPERATOR}@{PROMETHEUS_OPERATOR_VERSION}",
            ],
            cwd=tmp,
            capture_output=True,
            text=True,
            timeout=600,
            check=False,
            env={**os.environ, "GOFLAGS": "-mod=mod"},
        )
    info = json.loads(proc.stdout or "{}")
    if proc.returncode != 0 or "Dir" not in info:
        raise AssertionError(f"go mod download failed: {proc.stdout}\n{proc.stderr}")
    base = Path(info["Dir"]) / "example" / "prometheus-operator-crd"
    paths = [base / f"monitoring.coreos.com_{name}.yaml" for name in MONITORING_CRDS]
    for path in paths:
        assert path.is_file(), path
    return paths


def install_monitoring_crds(dc: DevCluster) -> None:
    for path in prometheus_operator_crds():
        dc.kubectl("apply", "--server-side", "--force-conflicts", "-f", str(path))
    for name in MONITORING_CRDS:
        dc.kubectl(
            "wait",
            "--for=condition=Established",
            f"crd/{name}.monitoring.coreos.com",
            "--timeout=60s",
        )


def fetch(url: str, timeout: float = 10, token: str | None = None) -> str:
    """GET ``url``; with ``token``, as a session API client (``Authorization: Bearer``)."""
    req = urllib.request.Request(url)
    if token is not None:
        req.add_header("Authorization", f"Bearer {token}")
    with urllib.request.urlopen(req, timeout=timeout) as resp:
        return str(resp.read().decode())


def promql(base_url: str, query: str) -> list[dict[str, Any]]:
    """Instant query; returns the result vector (list of {metric, value})."""
    url = f"{base_url}/api/v1/query?" + urllib.parse.urlencode({"query": query})
    body = json.loads(fetch(url))
    assert body["status"] == "success", body
    result: list[dict[str, Any]] = body["data"]["result"]
    return result


def promtool_check_metrics(text: str) -> subprocess.CompletedProcess[str]:
    promtool = shutil.which("promtool")
    if promtool is None:
        pytest.skip("promtool is not installed")
    return subprocess.run(
        [promtool, "check", "metrics"],
        input=text,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


__all__ = ["CHART", "fetch", "helm", "install_monitoring_crds", "promql", "promtool_check_metrics"]
