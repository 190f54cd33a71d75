"""The dev cluster's nodes are real: kubelet + containerd run Berth's image as containers.

What a platform engineer checks first on a new cluster, here on the two real nodes:
- each node reports a containerd runtime and is Ready;
- a pod of Berth's image runs under the chart's securityContext (non-root uid, read-only root
  filesystem, no capabilities), as the runtime enforces it, read from inside the container;
- pods on different nodes reach each other, the host services (Redis on the host address, which
  refuses a client without credentials) and the API server through the ``kubernetes`` Service;
- ``kubectl logs`` and ``kubectl exec`` reach the kubelet.
"""

from __future__ import annotations

import json
import subprocess
import urllib.parse
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from tests.cluster import DevCluster

pytestmark = pytest.mark.timeout(300)

HARDENED = {
    "runAsNonRoot": True,
    "readOnlyRootFilesystem": True,
    "allowPrivilegeEscalation": False,
    "capabilities": {"drop": ["ALL"]},
    "seccompProfile": {"type": "RuntimeDefault"},
}


def _pod(name: str, node: str, image: str, command: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": {"app": name}},
        "spec": {
            "nodeName": node,
            "restartPolicy": "Never",
            "terminationGracePeriodSeconds": 1,
            "securityContext": {"runAsUser": 10001, "runAsGroup": 10001},
            "containers": [
                {
                    "name": "c",
                    "image": image,
                    "imagePullPolicy": "Never",
                    "command": ["sh", "-c", command],
                    "securityContext": HARDENED,
                    "volumeMounts": [{"name": "tmp", "mountPath": "/tmp"}],
                }
            ],
            "volumes": [{"name": "tmp", "emptyDir": {}}],
        },
    }


@pytest.fixture(scope="module")
def two_pods(dev_cluster: DevCluster) -> Iterator[tuple[str, list[dict[str, Any]]]]:
    """One long-running pod of Berth's image on each real node, in a fresh namespace."""
    dc = dev_cluster
    if len(dc.nodes) < 2:
        pytest.skip("needs two real nodes (BERTH_NODES)")
    with dc.namespace("nodes") as ns:
        names = [f"p-{uuid.uuid4().hex[:6]}" for _ in dc.nodes[:2]]
        for name, node in zip(names, dc.nodes[:2], strict=True):
            doc = _pod(name, node, dc.image, "echo started; exec sleep 3600")
            dc.kubectl("-n", ns, "apply", "-f", "-", input=json.dumps(doc))
        for name in names:
            dc.kubectl("-n", ns, "wait", "--for=condition=Ready", f"pod/{name}", "--timeout=120s")
        pods = [
            json.loads(dc.kubectl("-n", ns, "get", "pod", n, "-o", "json").stdout) for n in names
        ]
        yield ns, pods


def _exec(dc: DevCluster, ns: str, pod: str, *cmd: str) -> str:
    return dc.kubectl("-n", ns, "exec", pod, "--", *cmd).stdout


def test_nodes_are_real_containerd_nodes(dev_cluster: DevCluster) -> None:
    for node in dev_cluster.nodes:
        obj = dev_cluster.get("node", node)
        info = obj["status"]["nodeInfo"]
        assert info["containerRuntimeVersion"].startswith("containerd://"), info
        ready = {c["type"]: c["status"] for c in obj["status"]["conditions"]}["Ready"]
        assert ready == "True"


def test_security_context_is_enforced_inside_the_container(
    dev_cluster: DevCluster, two_pods: tuple[str, list[dict[str, Any]]]
) -> None:
    ns, pods = two_pods
    name = pods[0]["metadata"]["name"]
    assert _exec(dev_cluster, ns, name, "id", "-u").strip() == "10001"
    probe = "touch /opt/x 2>&1 || true; grep CapEff /proc/self/status"
    out = _exec(dev_cluster, ns, name, "sh", "-c", probe)
    assert "Read-only file system" in out, out
    assert "CapEff:\t0000000000000000" in out, out
    # /tmp (an emptyDir) is the one writable place.
    assert _exec(dev_cluster, ns, name, "sh", "-c", "touch /tmp/ok && echo ok").strip() == "ok"


def test_pods_reach_each_other_the_host_and_the_api_server(
    dev_cluster: DevCluster, two_pods: tuple[str, list[dict[str, Any]]]
) -> None:
    dc = dev_cluster
    ns, pods = two_pods
    a, b = pods
    assert a["spec"]["nodeName"] != b["spec"]["nodeName"]
    redis = urllib.parse.urlsplit(dc.env["BERTH_REDIS_URL"])
    redis_host, redis_port = redis.hostname, redis.port
    redis_tls = redis.scheme == "rediss"  # the dev Redis speaks TLS only, as managed ones do
    script = f"""
import socket, ssl, sys, urllib.request
def tcp(host, port, send=b"", tls=False):
    with socket.create_connection((host, int(port)), timeout=5) as raw:
        s = ssl._create_unverified_context().wrap_socket(raw) if tls else raw
        if send:
            s.sendall(send)
            return s.recv(64)
        return b"connected"
print("redis", tcp("{redis_host}", {redis_port}, b"PING\\r\\n", tls={redis_tls}))
host = __import__("os").environ["KUBERNETES_SERVICE_HOST"]
with urllib.request.urlopen(f"https://{{host}}/version", context=ssl._create_unverified_context(),
                            timeout=5) as r:
    print("apiserver", r.status)
"""
    out = _exec(dc, ns, a["metadata"]["name"], "python", "-c", script)
    # Redis on the host answers pods, and only with credentials (its ACL users).
    assert "redis b'-NOAUTH" in out, out
    assert "apiserver 200" in out, out
    # Across nodes: B serves a line on a port, A connects to B's pod IP.
    b_name, b_ip = b["metadata"]["name"], b["status"]["podIP"]
    serve = (
        "import socket; s=socket.socket(); s.bind(('0.0.0.0', 8099)); s.listen(1); "
        "c,_=s.accept(); c.sendall(b'hello from b'); c.close()"
    )
    server = subprocess.Popen(
        ["kubectl", "-n", ns, "exec", b_name, "--", "python", "-c", serve],
        env=dc.proc_env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    fetch = (
        "import socket,time\n"
        "for _ in range(50):\n"
        "    try:\n"
        f"        print(socket.create_connection(('{b_ip}', 8099), timeout=2).recv(64)); break\n"
        "    except OSError: time.sleep(0.2)\n"
    )
    try:
        out = _exec(dc, ns, a["metadata"]["name"], "python", "-c", fetch)
    finally:
        server.kill()
        server.wait(timeout=30)
    assert "hello from b" in out, out


def test_kubectl_logs_reads_the_container_log(
    dev_cluster: DevCluster, two_pods: tuple[str, list[dict[str, Any]]]
) -> None:
    ns, pods = two_pods
    for pod in pods:
        out = dev_cluster.kubectl("-n", ns, "logs", pod["metadata"]["name"]).stdout
        assert out.strip() == "started"
