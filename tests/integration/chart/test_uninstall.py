"""The documented uninstall (docs/install.md, "Uninstall") leaves nothing of Berth's behind.

A release of the chart runs with all four kinds in use in a namespace of its own sessions: a
LaneWorker pool, a BudgetPolicy, a SessionWarmPool and an AgentSession run to ``Succeeded``
through the pool, so that the operator made what it makes per namespace (the shared claim and its
volume set-up Job, NetworkPolicies, Secrets, the disruption budget, warm pods). Then the page's
two Uninstall blocks run with bash exactly as written, but for the release name and namespace
(``berth`` / ``berth-system`` on the page, this test's own here, so a user's install is never
touched). Asserted afterwards: no Berth CRD, no object of the four kinds (so no finalizer), no
object the operator or the chart made in either namespace, no claim and no volume, no cluster
object of the release, and the release namespace gone.

The page's ``--all -A`` and ``kubectl delete -f charts/berth/crds/`` act on the whole cluster:
the tests that run after this one apply the CRDs again when they start an operator
(``install_crds``), as this test does when it ends.
"""

from __future__ import annotations

import re
import subprocess
import tempfile
from pathlib import Path

import pytest
import yaml

from tests.cluster import ROOT, DevCluster
from tests.integration.chart.support import helm
from tests.integration.chart.test_helm_install import dev_values
from tests.integration.operator.harness import (
    SECRET,
    install_crds,
    kget,
    scripted_model,
    session_manifest,
    wait,
)
from tests.unit.chart.helm import CHART

pytestmark = [pytest.mark.integration, pytest.mark.e2e, pytest.mark.timeout(900)]

DOC = ROOT / "docs" / "install.md"
KINDS = "agentsessions,laneworkers,sessionwarmpools,budgetpolicies"
# What a namespace may hold that is not Berth's: the Secret the user made for the LLM key.
USER_OBJECTS = {f"secret/{SECRET['metadata']['name']}"}
NAMESPACED = (
    "pods,deployments,replicasets,jobs,services,configmaps,secrets,networkpolicies,"
    "poddisruptionbudgets,persistentvolumeclaims,leases,roles,rolebindings"
)
REAL_NODES = {"nodeSelector": {"berth.dev/dev-node": "real"}}


def uninstall_blocks() -> list[str]:
    """The ```sh blocks of the page's "## Uninstall" section, in order."""
    section = DOC.read_text().split("\n## Uninstall\n", 1)[1].split("\n## ", 1)[0]
    blocks = re.findall(r"```sh\n(.*?)```", section, re.S)
    assert blocks, f"no sh block under Uninstall in {DOC}"
    return list(blocks)


def as_this_test(block: str, release: str, ns: str) -> str:
    """The page's block with its release name and namespace replaced by the test's."""
    block = re.sub(r"\bhelm uninstall berth\b", f"helm uninstall {release}", block)
    return re.sub(r"\bberth-system\b", ns, block)


def objects(dc: DevCluster, ns: str) -> set[str]:
    """Every object of ``NAMESPACED`` kinds in ``ns`` that Kubernetes does not make itself."""
    out = dc.kubectl("-n", ns, "get", NAMESPACED, "-o", "name", check=False).stdout.split()
    names = {re.sub(r"^([a-z]+)[.a-z0-9-]*/", r"\1/", n) for n in out}
    return {n for n in names if n != "configmap/kube-root-ca.crt"} - USER_OBJECTS


def manifests(llm_url: str) -> list[dict[str, object]]:
    pool = {
        "apiVersion": "berth.dev/v1alpha1",
        "kind": "LaneWorker",
        "metadata": {"name": "pool"},
        "spec": {"lane": "execute", "minReplicas": 1, "maxReplicas": 1, "template": REAL_NODES},
    }
    budget = {
        "apiVersion": "berth.dev/v1alpha1",
        "kind": "BudgetPolicy",
        "metadata": {"name": "team"},
        "spec": {"selector": {"tenantId": "team-u"}, "limits": {"totalTokens": 1_000_000}},
    }
    warm = {
        "apiVersion": "berth.dev/v1alpha1",
        "kind": "SessionWarmPool",
        "metadata": {"name": "warm"},
        "spec": {"replicas": 1, "template": {"placement": REAL_NODES}},
    }
    session = session_manifest(
        "one",
        llm_url,
        "write a file on a lane worker",
        lanes={"execute": {"mode": "external", "laneWorkerRef": {"name": "pool"}}},
        placement=REAL_NODES,
    )
    return [SECRET, pool, budget, warm, session]


def test_documented_uninstall_leaves_nothing_of_berths(dev_cluster: DevCluster) -> None:
    dc = dev_cluster
    release = "berth-uninstall-test"
    script = {
        "turns": [
            {
                "tool_calls": [
                    {"name": "write", "arguments": {"file_path": "a.txt", "content": "x"}}
                ]
            },
            {"text": "done"},
        ]
    }
    with (
        dc.namespace("uninst") as ns,
        dc.namespace("uninst-s") as sessions,
        scripted_model(script) as llm,
        tempfile.TemporaryDirectory(prefix="berth-uninstall-") as tmp,
    ):
        try:
            helm(
                dc, "install", release, str(CHART), "--namespace", ns,
                "-f", str(dev_values(dc, Path(tmp))),
                "--set", f"operator.watchNamespaces={{{ns},{sessions}}}", "--wait",
            )  # fmt: skip
            dc.kubectl("-n", sessions, "apply", "-f", "-", input=yaml.safe_dump_all(manifests(
                llm.base_url)))  # fmt: skip
            done = wait(
                "the session to finish",
                lambda: (
                    (o := kget(dc, sessions, "agentsession", "one"))
                    and o.get("status", {}).get("phase") in ("Succeeded", "Failed")
                    and o
                ),
            )
            assert done["status"]["phase"] == "Succeeded", done["status"]
            made = objects(dc, sessions)
            for kind in ("persistentvolumeclaim/", "networkpolicy/", "secret/", "job/"):
                assert any(n.startswith(kind) for n in made), (kind, sorted(made))
            volume = kget(dc, sessions, "pvc", "berth-shared")["spec"]["volumeName"]

            for block in uninstall_blocks():
                run = subprocess.run(
                    ["bash", "-euo", "pipefail", "-c", as_this_test(block, release, ns)],
                    cwd=ROOT, env=dc.proc_env, capture_output=True, text=True, timeout=600,
                )  # fmt: skip
                assert run.returncode == 0, f"{block}\n{run.stdout}\n{run.stderr}"

            crds = dc.kubectl("get", "crd", "-o", "name").stdout.split()
            assert not [c for c in crds if c.endswith(".berth.dev")], crds
            wait("the session namespace to hold nothing of Berth's",
                 lambda: not objects(dc, sessions) or None, 180)  # fmt: skip
            wait("the release namespace to be gone",
                 lambda: dc.kubectl("get", "namespace", ns, check=False).returncode != 0 or None,
                 180)  # fmt: skip
            wait("the claim's volume to be deleted",
                 lambda: dc.kubectl("get", "pv", volume, check=False).returncode != 0 or None,
                 180)  # fmt: skip
            selector = f"app.kubernetes.io/instance={release}"
            cluster_wide = dc.kubectl(
                "get", "clusterroles,clusterrolebindings,validatingwebhookconfigurations,"
                "mutatingwebhookconfigurations", "-l", selector, "-o", "name",
            ).stdout.split()  # fmt: skip
            assert not cluster_wide, cluster_wide
        finally:
            helm(dc, "uninstall", release, "--namespace", ns, "--no-hooks", check=False)
            install_crds(dc)
