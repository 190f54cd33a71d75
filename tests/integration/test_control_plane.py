"""The dev control plane is real: CRD validation with CEL, scheduling onto kwok nodes, kopf.

Foundation issue, checks (a), (b) and (e). Check (c) and (d), pods that really run on process
nodes, live in test_process_node.py beside the node agent's own tests.
"""

from __future__ import annotations

import json
import subprocess
import time
import uuid
from typing import Any

import pytest

from tests.cluster import DevCluster

pytestmark = pytest.mark.integration

GROUP = f"cp{uuid.uuid4().hex[:6]}.test.berth.dev"

WIDGET_CRD: dict[str, Any] = {
    "apiVersion": "apiextensions.k8s.io/v1",
    "kind": "CustomResourceDefinition",
    "metadata": {"name": f"widgets.{GROUP}"},
    "spec": {
        "group": GROUP,
        "scope": "Namespaced",
        "names": {"plural": "widgets", "singular": "widget", "kind": "Widget"},
        "versions": [
            {
                "name": "v1",
                "served": True,
                "storage": True,
                "schema": {
                    "openAPIV3Schema": {
                        "type": "object",
                        "properties": {
                            "spec": {
                                "type": "object",
                                "required": ["minReplicas", "maxReplicas"],
                                "properties": {
                                    "minReplicas": {"type": "integer", "minimum": 0},
                                    "maxReplicas": {"type": "integer", "minimum": 1},
                                },
                                "x-kubernetes-validations": [
                                    {
                                        "rule": "self.minReplicas <= self.maxReplicas",
                                        "message": "minReplicas must not exceed maxReplicas",
                                    }
                                ],
                            }
                        },
                    }
                },
            }
        ],
    },
}


def widget(name: str, lo: int, hi: int) -> dict[str, Any]:
    return {
        "apiVersion": f"{GROUP}/v1",
        "kind": "Widget",
        "metadata": {"name": name},
        "spec": {"minReplicas": lo, "maxReplicas": hi},
    }


def test_crd_cel_rule_rejects_bad_object(dev_cluster: DevCluster) -> None:
    dev_cluster.apply(WIDGET_CRD)
    try:
        dev_cluster.kubectl(
            "wait", "--for=condition=Established", f"crd/widgets.{GROUP}", "--timeout=60s"
        )
        with dev_cluster.namespace("crd") as ns:
            good = widget("good", 1, 3)
            good["metadata"]["namespace"] = ns
            dev_cluster.apply(good)
            bad = widget("bad", 5, 2)
            bad["metadata"]["namespace"] = ns
            with pytest.raises(subprocess.CalledProcessError) as err:
                dev_cluster.apply(bad)
            assert "minReplicas must not exceed maxReplicas" in err.value.stderr
            negative = widget("neg", -1, 2)
            negative["metadata"]["namespace"] = ns
            with pytest.raises(subprocess.CalledProcessError) as err:
                dev_cluster.apply(negative)
            assert "spec.minReplicas" in err.value.stderr
    finally:
        dev_cluster.kubectl("delete", "crd", f"widgets.{GROUP}", "--wait=false", check=False)


def test_deployment_pods_run_on_kwok_nodes(dev_cluster: DevCluster) -> None:
    with dev_cluster.namespace("kwok") as ns:
        dev_cluster.apply(
            {
                "apiVersion": "apps/v1",
                "kind": "Deployment",
                "metadata": {"name": "fake", "namespace": ns},
                "spec": {
                    "replicas": 3,
                    "selector": {"matchLabels": {"app": "fake"}},
                    "template": {
                        "metadata": {"labels": {"app": "fake"}},
                        "spec": {
                            "nodeSelector": {"type": "kwok"},
                            "tolerations": [{"key": "kwok.x-k8s.io/node", "operator": "Exists"}],
                            "containers": [{"name": "c", "image": "example.invalid/fake:1"}],
                        },
                    },
                },
            }
        )

        def running() -> list[dict[str, Any]] | None:
            out = dev_cluster.kubectl("get", "pods", "-n", ns, "-o", "json").stdout
            pods = json.loads(out)["items"]
            ok = [p for p in pods if p["status"].get("phase") == "Running"]
            return ok if len(ok) == 3 else None

        pods = dev_cluster.wait_for("3 Running pods of the Deployment", running, timeout=120)
        nodes = {p["spec"]["nodeName"] for p in pods}
        assert nodes and all(n.startswith("kwok-node-") for n in nodes)


def test_kopf_operator_sees_an_event(dev_cluster: DevCluster, monkeypatch: Any) -> None:
    kopf = pytest.importorskip("kopf")  # a hard dependency of berth: never actually skipped
    from kopf.testing import KopfRunner

    monkeypatch.setenv("KUBECONFIG", dev_cluster.kubeconfig)
    seen: list[str] = []
    registry = kopf.OperatorRegistry()
    marker = f"kopf-{uuid.uuid4().hex[:6]}"

    @kopf.on.login(registry=registry)
    def login(**kwargs: Any) -> Any:
        return kopf.login_with_kubeconfig(**kwargs)

    @kopf.on.create("v1", "configmaps", registry=registry, labels={"berth.dev/test": marker})
    def cm_created(name: str, **_: Any) -> None:
        seen.append(name)

    with dev_cluster.namespace("kopf") as ns:
        args = ["run", "--standalone", "--namespace", ns, "--verbose"]
        with KopfRunner(args, registry=registry, timeout=60) as runner:
            time.sleep(2)  # let the watch start; the check below polls, it does not time this
            dev_cluster.apply(
                {
                    "apiVersion": "v1",
                    "kind": "ConfigMap",
                    "metadata": {
                        "name": "hello",
                        "namespace": ns,
                        "labels": {"berth.dev/test": marker},
                    },
                    "data": {"k": "v"},
                }
            )
            deadline = time.monotonic() + 60
            while not seen and time.monotonic() < deadline:
                time.sleep(0.2)
        assert runner.exception is None
        assert seen == ["hello"]
