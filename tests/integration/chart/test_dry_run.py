"""The chart's renderings are accepted by the real apiserver (server-side dry-run).

Default values and all-features values (ServiceMonitor, PodMonitors, PrometheusRule, shared PVC,
bundled Redis, per-namespace RBAC) are rendered with ``helm template`` and applied with
``kubectl apply --dry-run=server``, which runs defaulting, schema validation of every object
(the monitoring ones against the real prometheus-operator CRDs) and admission, and persists
nothing. A deliberately broken rendering is rejected the same way, so the check can fail.
"""

from __future__ import annotations

import uuid
from typing import Any

import pytest
import yaml

from tests.cluster import ROOT, DevCluster
from tests.integration.chart.support import helm, install_monitoring_crds
from tests.unit.chart.helm import ALL_FEATURES, CHART, KUBE_VERSION, documents

pytestmark = pytest.mark.integration


def rendering(dc: DevCluster, namespace: str, values: dict[str, Any] | None) -> str:
    args = [
        "template",
        "berth",
        str(CHART),
        "--namespace",
        namespace,
        "--kube-version",
        KUBE_VERSION,
        # The helm-test hooks reference their own ServiceAccount, which a dry run never
        # creates; they are exercised for real by the helm-install test.
        "--skip-tests",
    ]
    if values:
        args += ["--values", "-"]
    return helm(dc, *args, input=yaml.safe_dump(values) if values else None).stdout


def dry_run(dc: DevCluster, text: str) -> tuple[int, str]:
    proc = dc.kubectl("apply", "--dry-run=server", "-f", "-", input=text, check=False)
    return proc.returncode, proc.stdout + proc.stderr


def assert_all_accepted(text: str, out: str) -> None:
    docs = documents(text)
    for doc in docs:
        kind = doc["kind"].lower()
        name = doc["metadata"]["name"]
        assert (
            f"{name} created (server dry run)" in out
            or f"{name} configured (server dry run)" in out
            or f"{name} unchanged (server dry run)" in out
        ), f"{kind}/{name} missing in:\n{out}"


@pytest.fixture(scope="module")
def crds_installed(dev_cluster: DevCluster) -> None:
    dev_cluster.kubectl("apply", "-f", str(ROOT / "charts" / "berth" / "crds"))
    for crd in ("agentsessions.berth.dev", "laneworkers.berth.dev"):
        dev_cluster.kubectl("wait", "--for=condition=Established", f"crd/{crd}", "--timeout=60s")


def test_default_values_dry_run(dev_cluster: DevCluster, crds_installed: None) -> None:
    with dev_cluster.namespace("chart") as ns:
        text = rendering(dev_cluster, ns, None)
        rc, out = dry_run(dev_cluster, text)
        assert rc == 0, out
        assert_all_accepted(text, out)


def test_all_features_dry_run(dev_cluster: DevCluster, crds_installed: None) -> None:
    install_monitoring_crds(dev_cluster)
    with dev_cluster.namespace("chart") as ns, dev_cluster.namespace("team") as team:
        values = {
            **ALL_FEATURES,
            "operator": {**ALL_FEATURES["operator"], "watchNamespaces": [team]},
        }
        text = rendering(dev_cluster, ns, values)
        kinds = {d["kind"] for d in documents(text)}
        assert {"ServiceMonitor", "PodMonitor", "PrometheusRule", "PersistentVolumeClaim"} <= kinds
        rc, out = dry_run(dev_cluster, text)
        assert rc == 0, out
        assert_all_accepted(text, out)


def test_a_broken_rendering_is_rejected(dev_cluster: DevCluster, crds_installed: None) -> None:
    """The dry-run validates: a PrometheusRule with a wrong field type and a Deployment with a
    negative replica count are refused by the apiserver."""
    install_monitoring_crds(dev_cluster)
    with dev_cluster.namespace("chart") as ns:
        docs = documents(rendering(dev_cluster, ns, {"prometheusRule": {"enabled": True}}))
        for doc in docs:
            if doc["kind"] == "PrometheusRule":
                doc["spec"]["groups"][0]["rules"][0]["for"] = 180  # must be a duration string
            if doc["kind"] == "Deployment":
                doc["spec"]["replicas"] = -1
        rc, out = dry_run(dev_cluster, yaml.safe_dump_all(docs))
        assert rc != 0
        assert "spec.groups[0].rules[0].for" in out, out
        assert "spec.replicas" in out, out


def test_notes_render_against_the_cluster(dev_cluster: DevCluster, crds_installed: None) -> None:
    with dev_cluster.namespace("chart") as ns:
        release = f"n{uuid.uuid4().hex[:6]}"
        out = helm(
            dev_cluster, "install", release, str(CHART), "--namespace", ns, "--dry-run=server"
        ).stdout
        assert f"Deployment {release}-berth-operator" in out
        assert "kubectl berth status hello" in out
        assert "Watching: all namespaces." in out
