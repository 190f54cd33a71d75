"""`helm install` of the chart into the dev cluster runs Berth end to end, then `helm uninstall`
removes every operator object.

One flow (it is one installation), in steps:

1. The chart as a release publishes it: ``hack/release.sh`` packages it (``helm package``, version
   and appVersion the project's) and ``helm install`` installs that package, not the source
   folder, with ``hack/dev-values.sh`` values plus ``operator.watchNamespaces=[ns]`` (other tests
   run their own operators for their own namespaces). Both operator replicas run as process
   pods on process nodes under the chart's ServiceAccount and RBAC (the apiserver enforces it);
   one holds the Lease.
2. A LaneWorker pool and an AgentSession whose execute lane is external to it. The scripted model
   asks for a bash call that blocks until a file appears, so the task stays in flight.
3. While it blocks: ``promtool check metrics`` on the real ``/metrics`` of the operator, the
   session pod and the worker pod; every metric the dashboard and the alert rules name is in those
   scrapes; the dev Prometheus (annotation-based pod discovery) has scraped all three, and a PromQL
   query returns the pool's lane backlog (pressure: backlog + in flight).
4. The block is released and the session reconciles to ``Succeeded``; ``kubectl berth status``
   shows it from the real API.
5. ``helm uninstall``: no object of the release is left (namespaced or cluster-scoped), the
   operator's Lease is gone (post-delete hook) and the hook cleaned up after itself.

Waits are bounded only so a hang fails; nothing asserts on time.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import subprocess
import sys
import tarfile
import tempfile
import uuid
from pathlib import Path
from typing import Any

import pytest
import yaml
from berth_operator import __version__ as VERSION
from berth_operator.api.agentsession import AgentSessionStatus

from tests.cluster import ROOT, DevCluster
from tests.integration.chart.support import fetch, helm, promql, promtool_check_metrics
from tests.integration.operator.harness import (
    SECRET,
    blocking_bash,
    kget,
    klist,
    scripted_model,
    session_manifest,
    wait,
)
from tests.unit.chart.helm import CHART, KUBE_VERSION
from tests.unit.chart.metricnames import dashboard_exprs, exposition_names, referenced_metrics

pytestmark = [pytest.mark.integration, pytest.mark.e2e, pytest.mark.timeout(1200)]

OPERATOR_PORT = 8081
SESSION_PORT = 8080
WORKER_PORT = 9090
NAMESPACED_KINDS = (
    "deployments,replicasets,pods,services,serviceaccounts,configmaps,secrets,"
    "roles,rolebindings,poddisruptionbudgets,jobs,persistentvolumeclaims,leases"
)


def dev_values(dc: DevCluster, directory: Path) -> Path:
    out = directory / "values.yaml"
    env_file = Path(dc.kubeconfig).parent / "env"
    subprocess.run(
        ["bash", str(ROOT / "hack" / "dev-values.sh"), str(out)],
        env={**dc.proc_env, "BERTH_DEV_ENV": str(env_file)},
        check=True,
        capture_output=True,
    )
    return out


PACKAGED = ("berth/Chart.yaml", "berth/values.yaml")


def packaged_chart(directory: Path) -> Path:
    """The chart package of a release built from this checkout into ``directory`` (the image is
    the dev cluster's, already loaded: the release's own is built by ``make release``)."""
    subprocess.run(
        ["bash", str(ROOT / "hack" / "release.sh"), VERSION, str(directory)],
        env={**os.environ, "RELEASE_SKIP_IMAGE": "1"},
        check=True,
        capture_output=True,
        timeout=600,
    )
    (package,) = directory.glob("berth-*.tgz")
    assert package.name == f"berth-{VERSION}.tgz"
    sums = dict(
        reversed(line.split("  ", 1))
        for line in (directory / "SHA256SUMS").read_text().splitlines()
    )
    assert set(sums) == {
        package.name,
        f"berth_operator-{VERSION}-py3-none-any.whl",
        f"berth_operator-{VERSION}.tar.gz",
        f"kubectl_berth-{VERSION}-py3-none-any.whl",
        f"kubectl_berth-{VERSION}.tar.gz",
    }
    for name, digest in sums.items():
        assert hashlib.sha256((directory / name).read_bytes()).hexdigest() == digest, name
    with tarfile.open(package) as tgz:  # the package's own defaults: the release's image
        chart, values = (yaml.safe_load(tgz.extractfile(m) or b"") for m in PACKAGED)
    image = values["image"]
    assert (chart["version"], chart["appVersion"]) == (VERSION, VERSION)
    assert (image["repository"], image["tag"]) == ("berth", VERSION)
    return package


def running_pods(dc: DevCluster, ns: str, selector: str) -> list[dict[str, Any]]:
    return [
        p
        for p in klist(dc, ns, "pods", selector)
        if p["status"].get("phase") == "Running" and p["status"].get("podIP")
    ]


def all_names(dashboard: dict[str, Any], rules: dict[str, Any]) -> set[str]:
    names: set[str] = set()
    for _, expr in dashboard_exprs(dashboard):
        names |= referenced_metrics(expr)
    for group in rules["groups"]:
        for rule in group["rules"]:
            names |= referenced_metrics(rule["expr"])
    return names - {"up"}


def leftovers(dc: DevCluster, ns: str, release: str) -> list[str]:
    selector = f"app.kubernetes.io/instance={release}"
    out = dc.kubectl("-n", ns, "get", NAMESPACED_KINDS, "-l", selector, "-o", "name").stdout.split()
    out += dc.kubectl(
        "get", "clusterroles,clusterrolebindings", "-l", selector, "-o", "name"
    ).stdout.split()
    lease = dc.kubectl("-n", ns, "get", "lease", f"{release}-berth-operator", check=False)
    if lease.returncode == 0:
        out.append(f"lease/{release}-berth-operator")
    return out


def test_helm_install_runs_a_session_to_succeeded_and_uninstall_is_clean(
    dev_cluster: DevCluster,
) -> None:
    dc = dev_cluster
    release = f"b{uuid.uuid4().hex[:6]}"
    op_selector = f"app.kubernetes.io/instance={release},app.kubernetes.io/component=operator"
    prom = dc.env.get("PROMETHEUS_URL", "")
    assert prom or dc.external, "the dev cluster has no PROMETHEUS_URL (hack/cluster-up.sh)"
    script = {
        "turns": [
            {"tool_calls": [blocking_bash("started.txt")]},
            {"text": "the lane worker ran it"},
        ]
    }
    with (
        dc.namespace("helm") as ns,
        scripted_model(script) as llm,
        tempfile.TemporaryDirectory(prefix="berth-helm-") as tmp,
    ):
        values = dev_values(dc, Path(tmp))
        package = packaged_chart(Path(tmp) / "release")
        installed = False
        try:
            # --- 1. install -----------------------------------------------------------------
            helm(
                dc,
                "install",
                release,
                str(package),
                "--namespace",
                ns,
                "-f",
                str(values),
                "--set",
                f"operator.watchNamespaces={{{ns}}}",
            )
            installed = True
            pods = wait(
                "both operator replicas running on the real nodes",
                lambda: (p := running_pods(dc, ns, op_selector)) and len(p) == 2 and p,
            )
            for pod in pods:
                assert pod["spec"]["nodeName"] in dc.nodes
                assert pod["spec"]["serviceAccountName"] == f"{release}-berth-operator"
            holder = wait(
                "an operator replica to hold the Lease",
                lambda: (
                    (kget(dc, ns, "lease", f"{release}-berth-operator") or {})
                    .get("spec", {})
                    .get("holderIdentity")
                ),
            )
            assert holder in {p["metadata"]["name"] for p in pods}
            # Only the Lease holder carries berth.dev/leader=true (the webhook Service's
            # selector), so eviction requests never reach the standby.
            leaders = wait(
                "the leader to label its own pod",
                lambda: (
                    [
                        p["metadata"]["name"]
                        for p in running_pods(dc, ns, op_selector)
                        if (p["metadata"].get("labels") or {}).get("berth.dev/leader") == "true"
                    ]
                    or None
                ),
            )
            assert leaders == [holder]

            # --- 1b. the built-in roles cover Berth's resources (ClusterRole aggregation) ------
            for user, role in (("alice", "edit"), ("bob", "view")):
                dc.kubectl(
                    "-n", ns, "create", "rolebinding", f"{user}-{role}",
                    f"--clusterrole={role}", f"--user={user}",
                )  # fmt: skip

            def can(user: str, verb: str, resource: str, *extra: str) -> str:
                res = dc.kubectl(
                    "auth", "can-i", verb, resource, "-n", ns, "--as", user, *extra, check=False
                )
                return res.stdout.strip()

            wait(
                "the aggregation controller to add AgentSessions to edit",
                lambda: can("alice", "create", "agentsessions.berth.dev") == "yes" or None,
            )
            assert can("alice", "patch", "laneworkers.berth.dev", "--subresource=scale") == "yes"
            assert can("bob", "list", "agentsessions.berth.dev") == "yes"
            assert can("bob", "create", "agentsessions.berth.dev") == "no"
            assert can("bob", "get", "secrets") == "no"

            # --- 2. a LaneWorker pool and a session using it ----------------------------------
            pool = {
                "apiVersion": "berth.dev/v1alpha1",
                "kind": "LaneWorker",
                "metadata": {"name": "pool"},
                "spec": {
                    "lane": "execute",
                    "concurrency": 2,
                    "minReplicas": 1,
                    "maxReplicas": 2,
                    "taskTimeoutSeconds": 300,
                    # Pressure is read (and exported) only for pools that scale on it.
                    "scaling": {
                        "source": "broker",
                        "targetTasksPerReplica": 2,
                        "pollingIntervalSeconds": 1,
                    },
                    "template": {"nodeSelector": {"berth.dev/dev-node": "real"}},
                },
            }
            session = session_manifest(
                "via-chart",
                llm.base_url,
                "run the blocking command on a lane worker",
                lanes={
                    "execute": {
                        "mode": "external",
                        "laneWorkerRef": {"name": "pool"},
                        "timeoutSeconds": 900,
                    }
                },
                limits={"toolTimeoutSeconds": 900},
            )
            dc.kubectl(
                "-n", ns, "apply", "-f", "-", input=yaml.safe_dump_all([SECRET, pool, session])
            )
            worker = wait(
                "a worker pod of the pool",
                lambda: (w := running_pods(dc, ns, "berth.dev/laneworker=pool")) and w[0],
            )
            workspace = dc.claim_dir(ns) / "workspaces" / ns / "via-chart"
            wait(
                "the blocking tool to start on the worker",
                lambda: (workspace / "started.txt").exists(),
            )
            pod_ip = wait(
                "the session pod's IP in status",
                lambda: (
                    AgentSessionStatus.model_validate(
                        (kget(dc, ns, "agentsession", "via-chart") or {}).get("status") or {}
                    ).pod_ip
                ),
            )
            leader = next(p for p in pods if p["metadata"]["name"] == holder)

            # --- 3. metrics: promtool on the real endpoints, names, Prometheus -----------------
            endpoints = {
                "operator": f"http://{leader['status']['podIP']}:{OPERATOR_PORT}/metrics",
                "session": f"http://{pod_ip}:{SESSION_PORT}/metrics",
                "worker": f"http://{worker['status']['podIP']}:{WORKER_PORT}/metrics",
            }
            pressure_line = wait(
                "the operator to report the in-flight task as lane pressure",
                lambda: next(
                    (
                        line
                        for line in fetch(endpoints["operator"]).splitlines()
                        if line.startswith("berth_operator_lane_pressure{")
                        and 'laneworker="pool"' in line
                        and float(line.rsplit(" ", 1)[1]) >= 1
                    ),
                    None,
                ),
            )
            scraped: set[str] = set()
            for name, url in endpoints.items():
                text = fetch(url)
                check = promtool_check_metrics(text)
                assert check.returncode == 0, f"{name}: {check.stdout}{check.stderr}"
                scraped |= exposition_names(text)
            dashboard = json.loads((CHART / "files" / "dashboards" / "berth.json").read_text())
            rules_doc = helm(
                dc,
                "template",
                release,
                str(CHART),
                "--namespace",
                ns,
                "--kube-version",
                KUBE_VERSION,
                "--set",
                "prometheusRule.enabled=true",
                "--show-only",
                "templates/prometheusrule.yaml",
            ).stdout
            wanted = all_names(dashboard, yaml.safe_load(rules_doc)["spec"])
            assert wanted <= scraped, (
                f"not exported by the running programs: {sorted(wanted - scraped)}"
            )
            print(f"operator: {pressure_line}", file=sys.stderr)

            if prom:
                for query in (
                    f'berth_operator_leader{{pod="{holder}"}}',
                    f'berth_session_state{{namespace="{ns}"}}',
                    f'berth_worker_capacity{{namespace="{ns}"}}',
                ):
                    wait(f"Prometheus to return {query}", functools.partial(promql, prom, query))
                # The operator's own `namespace` label (the pool's) meets the scrape target's
                # (the operator pod's): without honor_labels Prometheus keeps the target's and
                # renames the metric's to exported_namespace. Both are this test's namespace.
                backlog_query = (
                    f'max by (laneworker) (berth_operator_lane_pressure{{laneworker="pool", '
                    f'exported_namespace="{ns}"}}) >= 1'
                )
                backlog = wait(
                    "Prometheus to return the pool's lane backlog",
                    lambda: promql(prom, backlog_query),
                )
                assert float(backlog[0]["value"][1]) >= 1

            # --- 4. let it finish: Succeeded, and the plugin shows it ------------------------
            (workspace / "go").touch()
            obj = wait(
                "the session to finish",
                lambda: (
                    (o := kget(dc, ns, "agentsession", "via-chart"))
                    and o.get("status", {}).get("phase") in ("Succeeded", "Failed")
                    and o
                ),
            )
            assert obj["status"]["phase"] == "Succeeded", json.dumps(obj["status"], indent=1)
            plugin = subprocess.run(
                [
                    str(Path(sys.executable).parent / "kubectl-berth"),
                    "status",
                    "via-chart",
                    "-n",
                    ns,
                ],
                env={**dc.proc_env, "COLUMNS": "200"},
                capture_output=True,
                text=True,
                timeout=60,
                check=False,
            )
            assert plugin.returncode == 0, plugin.stderr
            assert "Succeeded" in plugin.stdout and "Completed" in plugin.stdout, plugin.stdout

            # --- 4b. helm test: a tiny session against the test pod's scripted model ---------
            tested = helm(dc, "test", release, "--namespace", ns, "--timeout", "240s")
            assert "Succeeded" in tested.stdout, tested.stdout
            wait(  # the test deleted its session (and, through the finalizer, its store)
                "the helm test's session to be gone",
                lambda: kget(dc, ns, "agentsession", f"{release}-berth-test") is None,
            )

            # --- 5. uninstall -----------------------------------------------------------------
            dc.kubectl("-n", ns, "delete", "agentsession", "via-chart", "--timeout=120s")
            dc.kubectl("-n", ns, "delete", "laneworker", "pool", "--timeout=120s")
            helm(dc, "uninstall", release, "--namespace", ns, "--wait", "--timeout", "5m")
            installed = False
            wait("no object of the release left", lambda: not leftovers(dc, ns, release) or None)
            hook_jobs = [  # the operator's Jobs (the helm test's store cleanup, the claim's
                # volume set-up) go by their own TTL, and the documented uninstall deletes them
                j
                for j in klist(dc, ns, "jobs")
                if (j["metadata"].get("labels") or {}).get("app.kubernetes.io/component")
                not in ("store-cleanup", "volume-setup")
            ]
            assert not hook_jobs, "the cleanup hook Job was not removed"
        except BaseException:
            for pod in klist(dc, ns, "pods"):
                print(
                    f"pod {pod['metadata']['name']}: {json.dumps(pod['status'])[:2000]}",
                    file=sys.stderr,
                )
            raise
        finally:
            if installed:
                # Let the operator drop its finalizers first, else the namespace never goes.
                for kind in ("agentsessions", "laneworkers"):
                    dc.kubectl("-n", ns, "delete", kind, "--all", "--timeout=60s", check=False)
                    for obj in dc.kubectl(
                        "-n", ns, "get", kind, "-o", "name", check=False
                    ).stdout.split():
                        dc.kubectl(
                            "-n",
                            ns,
                            "patch",
                            obj,
                            "--type=merge",
                            "-p",
                            '{"metadata":{"finalizers":null}}',
                            check=False,
                        )
                helm(dc, "uninstall", release, "--namespace", ns, "--no-hooks", check=False)
