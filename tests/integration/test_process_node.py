"""Pods on process nodes really run (hack/process_node_agent.py, the test-only node agent).

Foundation issue, checks (c) and (d), plus the agent's own behaviour: env (value, secretKeyRef,
configMapKeyRef, downward API), mounted ConfigMap, termination message and exit code, SIGTERM on
deletion and the grace period before SIGKILL, a PVC shared by two pods on two nodes, a readiness
probe, restartPolicy Always, the pod's ServiceAccount kubeconfig under real RBAC, node-loss
simulation and agent shutdown. The node-loss and shutdown tests run a second agent instance for
a throwaway node, so they never disturb pods of the shared process nodes.

Every wait is bounded (``DevCluster.wait_for``); nothing asserts on elapsed time.
"""

from __future__ import annotations

import ipaddress
import json
import os
import signal
import subprocess
import sys
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.cluster import ROOT, DevCluster

pytestmark = pytest.mark.integration

AGENT = ROOT / "hack" / "process_node_agent.py"
# The private agent's node is tainted so that nobody else's pods land on it.
OWN_TAINT = "berth.dev/test-agent"
OWN_TOLERATION = {"tolerations": [{"key": OWN_TAINT, "operator": "Exists"}]}
LOSS_ANNOTATION = "berth.dev/simulate-node-loss"


def pod(
    name: str,
    script: str,
    *,
    node: str,
    restart: str = "Never",
    env: list[dict[str, Any]] | None = None,
    volumes: list[dict[str, Any]] | None = None,
    mounts: list[dict[str, Any]] | None = None,
    grace: int | None = None,
    extra: dict[str, Any] | None = None,
    container_extra: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """A pod pinned to ``node`` (through the scheduler) running ``sh -c script``."""
    container: dict[str, Any] = {
        "name": "main",
        "image": "ignored.example/berth-test:1",
        "command": ["sh", "-c", script],
        "env": env or [],
        "volumeMounts": mounts or [],
        **(container_extra or {}),
    }
    spec: dict[str, Any] = {
        "restartPolicy": restart,
        "nodeSelector": {"kubernetes.io/hostname": node},
        "containers": [container],
        "volumes": volumes or [],
        # Tolerated everywhere, so the suite also runs against privately started, tainted agents.
        **OWN_TOLERATION,
        **(extra or {}),
    }
    if grace is not None:
        spec["terminationGracePeriodSeconds"] = grace
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name}, "spec": spec}


def field_env(name: str, path: str) -> dict[str, Any]:
    return {"name": name, "valueFrom": {"fieldRef": {"fieldPath": path}}}


SHARED = {"name": "shared", "persistentVolumeClaim": {"claimName": "berth-shared"}}


def host_dir(path: Path) -> dict[str, Any]:
    """A hostPath volume "shared" on a test's tmp dir: markers outlive the pod, no PVC to bind."""
    return {"name": "shared", "hostPath": {"path": str(path), "type": "Directory"}}


def create(dc: DevCluster, ns: str, manifest: dict[str, Any]) -> None:
    dc.kubectl("-n", ns, "apply", "-f", "-", input=json.dumps(manifest))


def get_pod(dc: DevCluster, ns: str, name: str) -> dict[str, Any] | None:
    res = dc.kubectl("-n", ns, "get", "pod", name, "-o", "json", check=False)
    if res.returncode != 0:
        if "NotFound" in res.stderr:
            return None
        raise subprocess.CalledProcessError(res.returncode, res.args, res.stdout, res.stderr)
    obj: dict[str, Any] = json.loads(res.stdout)
    return obj


def wait_pod(dc: DevCluster, ns: str, name: str, what: str, pred: Any, timeout: float = 90) -> Any:
    def check() -> Any:
        p = get_pod(dc, ns, name)
        return p if p is not None and pred(p) else None

    return dc.wait_for(f"pod {ns}/{name}: {what}", check, timeout=timeout)


def phase_in(*phases: str) -> Any:
    return lambda p: p.get("status", {}).get("phase") in phases


def container(p: dict[str, Any]) -> dict[str, Any]:
    statuses = p.get("status", {}).get("containerStatuses") or [{}]
    cs: dict[str, Any] = statuses[0]
    return cs


def condition(obj: dict[str, Any], ctype: str) -> dict[str, Any]:
    for c in obj.get("status", {}).get("conditions") or []:
        if c["type"] == ctype:
            found: dict[str, Any] = c
            return found
    return {}


def ready(p: dict[str, Any]) -> bool:
    return condition(p, "Ready").get("status") == "True"


def pid_of(p: dict[str, Any]) -> int:
    cid = container(p).get("containerID", "")
    assert cid.startswith("process://"), cid
    return int(cid.removeprefix("process://"))


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie is not alive either.
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().split(") ", 1)[1][0] != "Z"
    except OSError:
        return False


def nodes(dc: DevCluster) -> list[str]:
    if len(dc.process_nodes) < 2:
        pytest.skip("needs two process nodes (BERTH_PROCESS_NODES)")
    return dc.process_nodes


# --- (c) a pod really runs: env, ConfigMap volume, termination message, exit code -------------


@pytest.mark.parametrize(
    ("exit_code", "phase", "reason"), [(3, "Failed", "Error"), (0, "Succeeded", "Completed")]
)
def test_pod_runs_with_env_configmap_and_termination_message(
    dev_cluster: DevCluster, exit_code: int, phase: str, reason: str
) -> None:
    node = nodes(dev_cluster)[0]
    with dev_cluster.namespace("pn-run") as ns:
        dev_cluster.kubectl(
            "-n", ns, "create", "secret", "generic", "creds", "--from-literal=token=s3cr3t"
        )
        dev_cluster.kubectl(
            "-n",
            ns,
            "create",
            "configmap",
            "opts",
            "--from-literal=greeting=hello",
            '--from-literal=opts.json={"turns": 7}',
        )
        script = (
            'printf "%s|%s|%s|%s|%s|%s|%s|" "$PLAIN" "$SECRET" "$GREETING" "$POD_NAME" "$POD_IP" '
            '"$NODE_NAME" "${KUBERNETES_SERVICE_HOST:-unset}" > /dev/termination-log; '
            "cat /etc/berth/options.json >> /dev/termination-log; "
            f"echo done; exit {exit_code}"
        )
        manifest = pod(
            "runner",
            script,
            node=node,
            env=[
                {"name": "PLAIN", "value": "plain-$(GREETING_MISSING)"},
                {
                    "name": "SECRET",
                    "valueFrom": {"secretKeyRef": {"name": "creds", "key": "token"}},
                },
                {
                    "name": "GREETING",
                    "valueFrom": {"configMapKeyRef": {"name": "opts", "key": "greeting"}},
                },
                field_env("POD_NAME", "metadata.name"),
                field_env("POD_IP", "status.podIP"),
                field_env("NODE_NAME", "spec.nodeName"),
            ],
            volumes=[
                {
                    "name": "opts",
                    "configMap": {
                        "name": "opts",
                        "items": [{"key": "opts.json", "path": "options.json"}],
                    },
                }
            ],
            mounts=[{"name": "opts", "mountPath": "/etc/berth", "readOnly": True}],
        )
        create(dev_cluster, ns, manifest)
        p = wait_pod(dev_cluster, ns, "runner", f"phase {phase}", phase_in("Succeeded", "Failed"))
        term = container(p)["state"]["terminated"]
        ip = p["status"]["podIP"]
        assert p["status"]["phase"] == phase
        assert term["exitCode"] == exit_code
        assert term["reason"] == reason
        assert term["message"] == (
            f'plain-$(GREETING_MISSING)|s3cr3t|hello|runner|{ip}|{node}|unset|{{"turns": 7}}'
        )
        assert ipaddress.ip_address(ip).version == 4 and ip != "127.0.0.1"
        assert p["status"]["hostIP"] == "127.0.0.1"
        assert condition(p, "Ready")["status"] == "False"


def test_pod_ips_are_distinct(dev_cluster: DevCluster) -> None:
    a, b = nodes(dev_cluster)[:2]
    with dev_cluster.namespace("pn-ip") as ns:
        for i, node in enumerate([a, a, b]):
            create(dev_cluster, ns, pod(f"sleeper-{i}", "sleep 600", node=node, grace=1))
        ips = [
            wait_pod(
                dev_cluster,
                ns,
                f"sleeper-{i}",
                "Ready",
                lambda p: condition(p, "Ready").get("status") == "True",
            )["status"]["podIP"]
            for i in range(3)
        ]
        assert len(set(ips)) == 3, ips


# --- (d) deletion: SIGTERM, grace period, SIGKILL ---------------------------------------------


def test_delete_delivers_sigterm(dev_cluster: DevCluster, tmp_path: Path) -> None:
    node = nodes(dev_cluster)[0]
    with dev_cluster.namespace("pn-term") as ns:
        script = (
            "trap 'echo got-TERM > /data/term-marker; exit 0' TERM; "
            "echo started > /data/started; while true; do sleep 0.1; done"
        )
        manifest = pod(
            "trapper",
            script,
            node=node,
            grace=30,
            volumes=[host_dir(tmp_path)],
            mounts=[{"name": "shared", "mountPath": "/data"}],
        )
        create(dev_cluster, ns, manifest)
        claim = tmp_path
        dev_cluster.wait_for("process started", lambda: (claim / "started").exists())
        dev_cluster.kubectl("-n", ns, "delete", "pod", "trapper", "--wait=false")
        dev_cluster.wait_for("pod deleted", lambda: get_pod(dev_cluster, ns, "trapper") is None)
        assert (claim / "term-marker").read_text().strip() == "got-TERM"


def test_sigterm_ignored_is_sigkilled_only_after_grace(
    dev_cluster: DevCluster, tmp_path: Path
) -> None:
    node = nodes(dev_cluster)[0]
    with dev_cluster.namespace("pn-grace") as ns:
        # Ignores SIGTERM (records it), keeps ticking; only SIGKILL can end it, and an EXIT trap
        # would record a normal exit.
        script = (
            "echo $$$$ > /data/pid; "  # kubelet turns $$ into $, as in real pods
            "trap 'echo TERM >> /data/events' TERM; trap 'echo EXIT >> /data/events' EXIT; "
            "while true; do "
            "  if grep -q TERM /data/events 2>/dev/null; then "
            "    echo tick-after-term >> /data/events; "
            "  fi; "
            "  sleep 0.2; "
            "done"
        )
        manifest = pod(
            "stubborn",
            script,
            node=node,
            grace=4,
            volumes=[host_dir(tmp_path)],
            mounts=[{"name": "shared", "mountPath": "/data"}],
        )
        create(dev_cluster, ns, manifest)
        claim = tmp_path
        p = wait_pod(dev_cluster, ns, "stubborn", "running", phase_in("Running"))
        dev_cluster.wait_for(
            "pid file", lambda: (claim / "pid").exists() and (claim / "pid").read_text().strip()
        )
        pid = int((claim / "pid").read_text())
        assert pid == pid_of(p)
        dev_cluster.kubectl("-n", ns, "delete", "pod", "stubborn", "--wait=false")
        events = claim / "events"
        dev_cluster.wait_for(
            "the process to outlive SIGTERM",
            lambda: events.exists() and "tick-after-term" in events.read_text(),
        )
        # The process is alive after SIGTERM, so the pod must still be there (Terminating).
        still = get_pod(dev_cluster, ns, "stubborn")
        assert still is not None and still["metadata"].get("deletionTimestamp")
        assert still["metadata"].get("deletionGracePeriodSeconds") == 4
        dev_cluster.wait_for("pod deleted", lambda: get_pod(dev_cluster, ns, "stubborn") is None)
        lines = events.read_text().split()
        assert lines[0] == "TERM"
        assert "EXIT" not in lines  # it never exited by itself: it was SIGKILLed
        assert not alive(pid)


# --- volumes, probes, restarts ------------------------------------------------------------


def test_pvc_is_shared_between_pods_on_two_nodes(dev_cluster: DevCluster) -> None:
    a, b = nodes(dev_cluster)[:2]
    with dev_cluster.namespace("pn-pvc", shared_pvc=True) as ns:
        mount = [{"name": "shared", "mountPath": "/work", "subPath": "exchange"}]
        writer = pod(
            "writer",
            'echo "from $POD_NAME" > /work/note.tmp && mv /work/note.tmp /work/note; sleep 600',
            node=a,
            env=[field_env("POD_NAME", "metadata.name")],
            volumes=[SHARED],
            mounts=mount,
            grace=1,
        )
        reader = pod(
            "reader",
            "while [ ! -f /work/note ]; do sleep 0.1; done; cat /work/note > /dev/termination-log",
            node=b,
            volumes=[SHARED],
            mounts=mount,
        )
        create(dev_cluster, ns, writer)
        create(dev_cluster, ns, reader)
        p = wait_pod(dev_cluster, ns, "reader", "Succeeded", phase_in("Succeeded", "Failed"))
        assert p["status"]["phase"] == "Succeeded"
        assert p["spec"]["nodeName"] == b
        assert container(p)["state"]["terminated"]["message"].strip() == "from writer"
        assert (
            dev_cluster.claim_dir(ns) / "exchange" / "note"
        ).read_text().strip() == "from writer"
        w = get_pod(dev_cluster, ns, "writer")
        assert w is not None and w["spec"]["nodeName"] == a


def test_readiness_probe_gates_ready(dev_cluster: DevCluster, tmp_path: Path) -> None:
    node = nodes(dev_cluster)[0]
    with dev_cluster.namespace("pn-ready") as ns:
        port = 18000 + uuid.uuid4().int % 1000
        manifest = pod(
            "web",
            "mkdir -p /srv/www && cd /srv/www && "
            f'exec python3 -m http.server {port} --bind "$POD_IP"',
            node=node,
            env=[field_env("POD_IP", "status.podIP")],
            volumes=[host_dir(tmp_path)],
            mounts=[{"name": "shared", "mountPath": "/srv"}],
            grace=2,
            container_extra={
                "ports": [{"name": "http", "containerPort": port}],
                "readinessProbe": {
                    "httpGet": {"path": "/ready", "port": "http"},
                    "periodSeconds": 1,
                    "failureThreshold": 1,
                },
            },
        )
        create(dev_cluster, ns, manifest)
        p = wait_pod(dev_cluster, ns, "web", "running", phase_in("Running"))
        log = Path(dev_cluster.state_dir) / "pods" / f"{ns}_web" / "log"
        # The probe reached the server on the pod IP and got 404: the pod must not be Ready.
        dev_cluster.wait_for(
            "a failed probe",
            lambda: log.exists() and '"GET /ready HTTP/1.1" 404' in log.read_text(),
        )
        p = get_pod(dev_cluster, ns, "web")
        assert p is not None
        assert condition(p, "Ready")["status"] == "False"
        assert container(p)["ready"] is False and container(p)["started"] is True
        (tmp_path / "www" / "ready").write_text("ok")
        p = wait_pod(
            dev_cluster, ns, "web", "Ready", lambda p: condition(p, "Ready").get("status") == "True"
        )
        assert container(p)["ready"] is True
        assert p["status"]["podIP"] in log.read_text()


def test_restart_policy_always_restarts_with_backoff(
    dev_cluster: DevCluster, tmp_path: Path
) -> None:
    node = nodes(dev_cluster)[0]
    with dev_cluster.namespace("pn-restart") as ns:
        manifest = pod(
            "crasher",
            "echo run >> /data/runs; echo boom > /dev/termination-log; exit 2",
            node=node,
            restart="Always",
            volumes=[host_dir(tmp_path)],
            mounts=[{"name": "shared", "mountPath": "/data"}],
            grace=1,
        )
        create(dev_cluster, ns, manifest)
        p = wait_pod(
            dev_cluster,
            ns,
            "crasher",
            "restartCount >= 2",
            lambda p: container(p).get("restartCount", 0) >= 2,
        )
        cs = container(p)
        assert p["status"]["phase"] == "Running"
        assert cs["lastState"]["terminated"]["exitCode"] == 2
        assert cs["lastState"]["terminated"]["message"].strip() == "boom"
        # restartCount 2 means a third run has started; it leaves its mark in the host dir.
        runs = tmp_path / "runs"
        dev_cluster.wait_for("a third run", lambda: len(runs.read_text().split()) >= 3)


# --- ServiceAccount kubeconfig under RBAC ----------------------------------------------------

RBAC_PROBE = """
import json, os
from kubernetes import client, config
from kubernetes.client.exceptions import ApiException
config.load_kube_config()
ns = os.environ["NS"]
out = {"kubernetes_service_host": os.environ.get("KUBERNETES_SERVICE_HOST")}
review = client.AuthenticationV1Api().create_self_subject_review(
    {"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"})
out["user"] = review.status.user_info.username
v1 = client.CoreV1Api()
out["pods"] = len(v1.list_namespaced_pod(ns).items)
try:
    v1.list_namespaced_secret(ns)
    out["secrets"] = "allowed"
except ApiException as exc:
    out["secrets"] = exc.status
with open(os.environ["TERM_LOG"], "w") as fh:
    json.dump(out, fh)
"""


def test_pod_uses_its_service_account_under_rbac(dev_cluster: DevCluster) -> None:
    node = nodes(dev_cluster)[0]
    with dev_cluster.namespace("pn-rbac") as ns:
        dev_cluster.apply(
            [
                {
                    "apiVersion": "v1",
                    "kind": "ServiceAccount",
                    "metadata": {"name": "reader", "namespace": ns},
                },
                {
                    "apiVersion": "rbac.authorization.k8s.io/v1",
                    "kind": "Role",
                    "metadata": {"name": "pod-reader", "namespace": ns},
                    "rules": [{"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list"]}],
                },
                {
                    "apiVersion": "rbac.authorization.k8s.io/v1",
                    "kind": "RoleBinding",
                    "metadata": {"name": "reader-pods", "namespace": ns},
                    "roleRef": {
                        "apiGroup": "rbac.authorization.k8s.io",
                        "kind": "Role",
                        "name": "pod-reader",
                    },
                    "subjects": [{"kind": "ServiceAccount", "name": "reader", "namespace": ns}],
                },
            ]
        )
        manifest = pod(
            "rbac",
            'exec python3 -c "$PROBE"',
            node=node,
            env=[
                {"name": "NS", "value": ns},
                {"name": "TERM_LOG", "value": "/dev/termination-log"},
                {"name": "PROBE", "value": RBAC_PROBE},
            ],
            extra={"serviceAccountName": "reader"},
        )
        create(dev_cluster, ns, manifest)
        p = wait_pod(dev_cluster, ns, "rbac", "finished", phase_in("Succeeded", "Failed"))
        term = container(p)["state"]["terminated"]
        assert term["exitCode"] == 0, term
        out = json.loads(term["message"])
        assert out["user"] == f"system:serviceaccount:{ns}:reader"
        assert out["pods"] >= 1
        assert out["secrets"] == 403
        assert out["kubernetes_service_host"] is None


# --- a private agent: node-loss simulation and shutdown ----------------------------------------


@dataclass
class OwnAgent:
    node: str
    state_dir: Path
    proc: subprocess.Popen[bytes]
    log: Path


@pytest.fixture(scope="module")
def own_agent(
    dev_cluster: DevCluster, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[OwnAgent]:
    """A second agent instance serving one throwaway node, with its own IP range (127.1.x.y)."""
    node = f"pt-{uuid.uuid4().hex[:6]}"
    # Kept beside the dev cluster's state (git-ignored), so the agent's log survives the run.
    base = Path(dev_cluster.state_dir).parent if dev_cluster.state_dir else None
    state = base / "test-agents" / node if base else tmp_path_factory.mktemp("agent")
    state.mkdir(parents=True, exist_ok=True)
    log = state / "agent.log"
    with open(log, "wb") as fh:
        proc = subprocess.Popen(
            [
                sys.executable,
                str(AGENT),
                "--kubeconfig",
                dev_cluster.kubeconfig,
                "--node",
                node,
                "--state-dir",
                str(state),
                "--pod-ip-prefix",
                "127.1.",
                "--path-prepend",
                str(Path(sys.executable).parent),
                "--register-with-taints",
                f"{OWN_TAINT}=yes:NoSchedule",
            ],
            stdout=fh,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    agent = OwnAgent(node, state, proc, log)
    try:
        dev_cluster.wait_for(
            f"node {node} Ready (log {log})",
            lambda: (
                proc.poll() is None
                and condition(dev_cluster.get("node", node), "Ready").get("status") == "True"
            ),
        )
        yield agent
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
        dev_cluster.kubectl("delete", "node", node, "--wait=false", check=False)


def test_node_loss_simulation(dev_cluster: DevCluster, own_agent: OwnAgent) -> None:
    node = own_agent.node
    with dev_cluster.namespace("pn-loss") as ns:
        create(
            dev_cluster,
            ns,
            pod("survivor", "sleep 600", node=node, restart="Always", grace=1),
        )
        p = wait_pod(
            dev_cluster,
            ns,
            "survivor",
            "Ready",
            lambda p: condition(p, "Ready").get("status") == "True",
        )
        assert p["status"]["podIP"].startswith("127.1.")
        pid = pid_of(p)
        assert alive(pid)
        dev_cluster.kubectl("annotate", "node", node, f"{LOSS_ANNOTATION}=true", "--overwrite")
        n = dev_cluster.wait_for(
            f"node Ready=Unknown (agent log: {own_agent.log})",
            lambda: (lambda n: n if condition(n, "Ready").get("status") == "Unknown" else None)(
                dev_cluster.get("node", node)
            ),
        )
        assert condition(n, "Ready")["reason"] == "NodeStatusUnknown"
        dev_cluster.wait_for("the pod's process to be killed", lambda: not alive(pid))
        # While lost, the agent writes nothing for the pod: it still shows the old container.
        p = get_pod(dev_cluster, ns, "survivor")
        assert p is not None and pid_of(p) == pid and container(p).get("restartCount", 0) == 0
        dev_cluster.kubectl("annotate", "node", node, f"{LOSS_ANNOTATION}-")
        dev_cluster.wait_for(
            "node Ready again",
            lambda: condition(dev_cluster.get("node", node), "Ready").get("status") == "True",
        )
        p = wait_pod(
            dev_cluster,
            ns,
            "survivor",
            "restarted and Ready",
            lambda p: (
                container(p).get("restartCount", 0) >= 1
                and condition(p, "Ready").get("status") == "True"
            ),
        )
        assert container(p)["lastState"]["terminated"]["exitCode"] == 137
        assert pid_of(p) != pid and alive(pid_of(p))


def test_agent_shutdown_leaves_no_process(dev_cluster: DevCluster, own_agent: OwnAgent) -> None:
    # Runs last in this module (it stops the module's private agent).
    node = own_agent.node
    with dev_cluster.namespace("pn-stop") as ns:
        create(
            dev_cluster,
            ns,
            pod(
                "child-spawner",
                "sleep 600 & sleep 600 & wait",
                node=node,
                grace=30,
            ),
        )
        p = wait_pod(
            dev_cluster,
            ns,
            "child-spawner",
            "Ready",
            lambda p: condition(p, "Ready").get("status") == "True",
        )
        pid = pid_of(p)
        kids = Path(f"/proc/{pid}/task/{pid}/children")
        dev_cluster.wait_for("two children", lambda: len(kids.read_text().split()) == 2)
        children = [int(c) for c in kids.read_text().split()]
        own_agent.proc.send_signal(signal.SIGTERM)
        assert own_agent.proc.wait(timeout=60) == 0
        assert not alive(pid)
        assert not [c for c in children if alive(c)]


def test_kubectl_logs_of_init_and_main_containers(dev_cluster: DevCluster) -> None:
    node = nodes(dev_cluster)[0]
    with dev_cluster.namespace("pn-logs") as ns:
        manifest = pod(
            "talker",
            'for i in 1 2 3; do echo "main line $i"; done',
            node=node,
            extra={
                "initContainers": [
                    {
                        "name": "seed",
                        "image": "x",
                        "command": ["sh", "-c", "echo seeding; echo oops >&2"],
                    }
                ]
            },
        )
        create(dev_cluster, ns, manifest)
        p = wait_pod(dev_cluster, ns, "talker", "Succeeded", phase_in("Succeeded", "Failed"))
        assert p["status"]["phase"] == "Succeeded"
        init = p["status"]["initContainerStatuses"][0]
        assert init["state"]["terminated"]["reason"] == "Completed"
        logs = dev_cluster.kubectl("-n", ns, "logs", "talker", "-c", "main").stdout
        assert logs == "main line 1\nmain line 2\nmain line 3\n"
        assert (
            dev_cluster.kubectl("-n", ns, "logs", "talker", "-c", "seed").stdout
            == "seeding\noops\n"
        )
        tail = dev_cluster.kubectl("-n", ns, "logs", "talker", "-c", "main", "--tail", "1").stdout
        assert tail == "main line 3\n"


def test_missing_configmap_waits_then_starts_and_missing_binary_fails(
    dev_cluster: DevCluster,
) -> None:
    node = nodes(dev_cluster)[0]
    with dev_cluster.namespace("pn-cfg") as ns:
        needs_cm = pod(
            "needs-cm",
            'echo "$LATE" > /dev/termination-log',
            node=node,
            env=[{"name": "LATE", "valueFrom": {"configMapKeyRef": {"name": "late", "key": "k"}}}],
        )
        create(dev_cluster, ns, needs_cm)
        p = wait_pod(
            dev_cluster,
            ns,
            "needs-cm",
            "CreateContainerConfigError",
            lambda p: (
                (container(p).get("state", {}).get("waiting") or {}).get("reason")
                == "CreateContainerConfigError"
            ),
        )
        assert p["status"]["phase"] == "Pending"
        assert "late" in container(p)["state"]["waiting"]["message"]
        dev_cluster.kubectl("-n", ns, "create", "configmap", "late", "--from-literal=k=arrived")
        p = wait_pod(dev_cluster, ns, "needs-cm", "Succeeded", phase_in("Succeeded", "Failed"))
        assert container(p)["state"]["terminated"]["message"].strip() == "arrived"

        bad = pod("bad-binary", "unused", node=node)
        bad["spec"]["containers"][0]["command"] = ["berth-no-such-binary-xyz"]
        create(dev_cluster, ns, bad)
        p = wait_pod(dev_cluster, ns, "bad-binary", "Failed", phase_in("Succeeded", "Failed"))
        term = container(p)["state"]["terminated"]
        assert p["status"]["phase"] == "Failed"
        assert term["exitCode"] == 127
        assert "berth-no-such-binary-xyz" in term["message"]
