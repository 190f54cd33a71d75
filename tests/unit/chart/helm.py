"""Helpers shared by the chart tests: find helm/promtool, render the chart, split documents.

helm is the pinned build in ``~/.cache/berth/bin/helm-<HELM_VERSION>/`` (hack/build-binaries.sh)
or the one on PATH. Tests that need a tool skip, naming it, when the tool is not installed.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[3]
CHART = ROOT / "charts" / "berth"
KUBE_VERSION = "1.34.4"
"""Kubernetes version the chart is rendered for (hack/versions.env; helm's default is older)."""

ALL_FEATURES: dict[str, Any] = {
    "operator": {
        "watchNamespaces": ["team-a", "team-b"],
        "env": {"BERTH_BACKOFF_CAP_SECONDS": "60"},
    },
    "sessions": {
        "runtimeClassName": "gvisor",
        "llmAllowedBaseURLs": ["https://api.openai.com/v1", "http://litellm.gw:4000/v1"],
    },
    "laneWorkers": {"runtimeClassName": "kata"},
    "sharedVolume": {"create": True, "storageClassName": "nfs"},
    "redis": {"enabled": True},
    "networkPolicy": {"enabled": True, "apiServer": {"cidrs": ["172.18.0.0/16"]}},
    "metrics": {
        "serviceMonitor": {"enabled": True, "labels": {"release": "kube-prometheus-stack"}},
        "podMonitor": {"sessions": {"enabled": True}, "workers": {"enabled": True}},
    },
    "prometheusRule": {"enabled": True, "additionalAlertLabels": {"team": "platform"}},
    "grafanaDashboard": {"enabled": True},
    "webhook": {"enabled": True, "certSecretName": "berth-webhook-tls"},
    "observability": {"tracing": {"otlpEndpoint": "http://jaeger:4318", "samplerArg": "1"}},
}
"""Values that switch on every optional part of the chart."""


def _versions() -> dict[str, str]:
    out: dict[str, str] = {}
    for line in (ROOT / "hack" / "versions.env").read_text().splitlines():
        key, sep, value = line.partition("=")
        if sep and not line.startswith("#"):
            out[key.strip()] = value.strip()
    return out


def helm_binary() -> str | None:
    """Path of helm: the pinned dev build, else PATH; None when neither exists."""
    cache = Path(os.environ.get("BERTH_CACHE", Path.home() / ".cache" / "berth"))
    pinned = cache / "bin" / f"helm-{_versions().get('HELM_VERSION', '')}" / "helm"
    if pinned.is_file():
        return str(pinned)
    return shutil.which("helm")


def require_helm() -> str:
    helm = helm_binary()
    if helm is None:
        pytest.skip("helm is not installed (make binaries builds it)")
    return helm


def require_tool(name: str) -> str:
    path = shutil.which(name)
    if path is None:
        pytest.skip(f"{name} is not installed")
    return path


def run_helm(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(
        [require_helm(), *args], capture_output=True, text=True, timeout=120, check=False
    )
    if check and proc.returncode != 0:
        raise AssertionError(f"helm {' '.join(args)} failed:\n{proc.stdout}\n{proc.stderr}")
    return proc


def render(
    values: dict[str, Any] | None = None,
    *extra: str,
    release: str = "berth",
    tests: bool = False,
) -> str:
    """``helm template`` of the chart with ``values`` (a dict written to a temp file); the
    ``helm test`` hooks only with ``tests``."""
    args = [
        "template",
        release,
        str(CHART),
        "--kube-version",
        KUBE_VERSION,
        "--namespace",
        "berth-system",
    ]
    if not tests:
        args.append("--skip-tests")
    if values:
        args += ["--values", "-"]
        proc = subprocess.run(
            [require_helm(), *args, *extra],
            input=yaml.safe_dump(values),
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        if proc.returncode != 0:
            raise AssertionError(f"helm template failed:\n{proc.stderr}")
        return proc.stdout
    return run_helm(*args, *extra).stdout


def documents(text: str) -> list[dict[str, Any]]:
    """The non-empty YAML documents of a rendering."""
    return [d for d in yaml.safe_load_all(text) if d]


def by_kind(docs: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [d for d in docs if d.get("kind") == kind]


def one(docs: list[dict[str, Any]], kind: str, name_suffix: str = "") -> dict[str, Any]:
    found = [d for d in by_kind(docs, kind) if d["metadata"]["name"].endswith(name_suffix)]
    assert len(found) == 1, (
        f"expected one {kind} *{name_suffix}, got {[d['metadata']['name'] for d in found]}"
    )
    return found[0]
