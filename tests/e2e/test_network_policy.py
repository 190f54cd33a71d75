"""Berth's NetworkPolicies, tested by packets on the dev cluster's real nodes.

The dev cluster enforces NetworkPolicy with kube-router's policy controller (hack/netpol.sh). The
operator (run on the host, as the other e2e tests run it) is given the session and worker policies
the chart renders (``BERTH_NETWORK_POLICY_TEMPLATES`` from ``helm template``, with the provider
recipes' LLM ports and the dev cluster's addresses), and creates them in a namespace the test
makes, with the namespace's claim. Then, from inside the pods (``kubectl exec`` running Python
sockets):

- a session pod cannot reach another session's pod, nor the operator's webhook port;
- a LaneWorker pod cannot reach a session pod;
- a session cannot use Redis as another role: Redis's ACL refuses its password for the worker and
  operator users and refuses it the workers' commands (the policy cannot tell credentials apart:
  it only keeps pods other than Berth's, and ports other than Redis's, out);
- the LLM endpoint on the recipes' ports (vLLM 8000, llama.cpp 8080, LiteLLM 4000), DNS, Redis and
  the store work;
- ``kubectl berth send`` and ``passivate`` (the API server's pod proxy) work.

A probe table (expected vs seen) is printed. Node-local sources (the API server, kubelets, the
operator on the host) are always admitted by NetworkPolicy implementations, here for every pod,
so the pod-proxy rule of the policy is exercised only on a cluster whose API server is elsewhere.
"""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import threading
import urllib.parse
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.cluster import DEV_DIR, ROOT, DevCluster
from tests.e2e.passivation_support import delete_webhook_configurations, webhook_env
from tests.integration.operator.harness import (
    SECRET,
    apply_in,
    kget,
    operator,
    session_manifest,
    wait,
)

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(600)]

WORKSPACE = "/var/lib/berth/workspace"
"""The session's workspace on the namespace's shared claim."""
RECIPE_PORTS = {"LiteLLM": 4000, "vLLM": 8000, "llama.cpp": 8080}
"""The LLM endpoint ports of docs/llm-providers.md's recipes."""
POOL: dict[str, Any] = {
    "apiVersion": "berth.dev/v1alpha1",
    "kind": "LaneWorker",
    "metadata": {"name": "pool"},
    "spec": {"lane": "execute", "minReplicas": 1, "maxReplicas": 1},
}

PROBE = r"""
import json, os, socket, sys, urllib.parse
kind, host, port = sys.argv[1], sys.argv[2], int(sys.argv[3])
def tcp():
    s = socket.create_connection((host, port), timeout=3); s.close(); return "open"
def dns():
    q = bytes.fromhex("b3270100000100000000000005626572746807696e76616c69640000010001")
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.settimeout(3)
    s.sendto(q, (host, port)); s.recvfrom(512); return "open"
def redis_as(user):
    import redis
    from berth_contract import names  # the probe runs in Berth's image
    url = os.environ["BERTH_REDIS_URL"]
    c = redis.Redis.from_url(url, socket_timeout=3, socket_connect_timeout=3)
    if user == "self":
        c.ping(); return "open"
    if user == "self-tasks":
        try:
            c.xreadgroup("workers", "probe", {names.task_stream("probe", "pool"): ">"}, count=1)
            return "allowed"
        except redis.exceptions.NoPermissionError:
            return "denied (NOPERM)"
    u = urllib.parse.urlsplit(url)  # the pod's own password, under another role's user name
    other = u._replace(netloc=f"{user}:{u.password}@{u.hostname}:{u.port}").geturl()
    c = redis.Redis.from_url(other, socket_timeout=3, socket_connect_timeout=3)
    try:
        c.ping(); return "allowed"
    except redis.exceptions.AuthenticationError:
        return "denied (WRONGPASS)"
def store():
    d = sys.argv[4]; p = os.path.join(d, ".netpol-probe")
    open(p, "w").write("ok"); ok = open(p).read() == "ok"; os.remove(p)
    return "open" if ok else "broken"
try:
    out = {"tcp": tcp, "dns": dns, "store": store}.get(kind) or (lambda: redis_as(kind))
    print(out())
except (TimeoutError, socket.timeout):
    print("blocked (timeout)")
except ConnectionRefusedError:
    print("blocked (rejected)")
except OSError as exc:
    print(f"blocked ({exc.__class__.__name__})")
"""
"""Run in a pod: ``python3 - KIND HOST PORT [DIR]``; prints what it saw. Every TCP target has a
listener, so a refused connection is the policy's REJECT, never a closed port."""


@contextmanager
def listeners(host: str, ports: list[int]) -> Iterator[None]:
    """TCP listeners on ``host`` for each port, accepting and closing (stand-ins for nothing:
    they only make a port open, so a probe tells an allowed port from a rejected one)."""
    socks = []
    for port in ports:
        s = socket.socket()
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s.bind((host, port))
        s.listen(16)
        socks.append(s)

    def serve(s: socket.socket) -> None:
        while True:
            try:
                conn, _ = s.accept()
            except OSError:
                return
            conn.close()

    for s in socks:
        threading.Thread(target=serve, args=(s,), daemon=True).start()
    try:
        yield
    finally:
        for s in socks:
            s.close()


def rendered_templates(dc: DevCluster, values: dict[str, Any]) -> str:
    """``BERTH_NETWORK_POLICY_TEMPLATES`` of the chart's operator Deployment, rendered by
    ``helm template`` with the dev cluster's values and ``values``."""
    out = subprocess.run(
        ["helm", "template", "berth", str(ROOT / "charts" / "berth"), "-n", "berth-np",
         "-f", str(DEV_DIR / "values.yaml"),
         "-f", "-", "--show-only", "templates/deployment.yaml"],
        input=yaml.safe_dump(values), env=dc.proc_env, capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    deployment = next(d for d in yaml.safe_load_all(out) if d and d["kind"] == "Deployment")
    env = deployment["spec"]["template"]["spec"]["containers"][0]["env"]
    return str(next(e["value"] for e in env if e["name"] == "BERTH_NETWORK_POLICY_TEMPLATES"))


def default_llm_ports() -> list[int]:
    """``networkPolicy.llmEgress.ports`` of the chart's own values.yaml."""
    values = yaml.safe_load((ROOT / "charts" / "berth" / "values.yaml").read_text())
    return list(values["networkPolicy"]["llmEgress"]["ports"])


def probe(dc: DevCluster, ns: str, pod: str, *args: str) -> str:
    """What ``PROBE`` saw from inside ``pod``."""
    out = dc.kubectl("-n", ns, "exec", "-i", pod, "--", "python3", "-", *args, input=PROBE)
    return out.stdout.strip().splitlines()[-1]


def kubectl_berth(dc: DevCluster, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(Path(sys.executable).parent / "kubectl-berth"), *args],
        env=dc.proc_env, capture_output=True, text=True, timeout=90, check=False,
    )  # fmt: skip


def resolver() -> str:
    """This machine's first resolver: the pods' DNS server (hack/nodes.sh clusterDNS)."""
    for line in Path("/etc/resolv.conf").read_text().splitlines():
        if line.startswith("nameserver"):
            return line.split()[1]
    raise RuntimeError("no nameserver in /etc/resolv.conf")


def running_pod(dc: DevCluster, ns: str, name: str) -> dict[str, Any]:
    """Session ``name``'s status once its pod runs with an IP."""
    return dict(
        wait(
            f"session {name} running",
            lambda: (
                (o := kget(dc, ns, "agentsession", name))
                and (st := o.get("status") or {}).get("podIP")
                and st.get("phase") in ("Running", "Succeeded")
                and st
            ),
        )
    )


Row = tuple[str, str, str]
"""A probe's line of the table: what, expected, seen."""


def matches(want: str, seen: str) -> bool:
    """``seen`` is what ``want`` expects (a "blocked" probe may say how: timeout or rejected)."""
    return seen == want or (want == "blocked" and seen.startswith("blocked"))


def probe_plan(
    host: str, redis_port: int, webhook_port: str, pods: dict[str, str], ips: dict[str, str]
) -> list[tuple[str, str, str, tuple[str, ...]]]:
    """(pod, what, expected, PROBE arguments) for every probe; ``pods`` names the pods probed
    from (``alpha`` on the first node, ``beta`` on the second, ``worker`` on the second), ``ips``
    the sessions' pod IPs."""
    s, w, r = pods["alpha"], pods["worker"], str(redis_port)
    beta_ip = ips["beta"]
    plan = [
        (s, "session -> other session's pod :8080", "blocked", ("tcp", beta_ip, "8080")),
        (
            pods["beta"],
            "session (2nd node) -> other session :8080",
            "blocked",
            ("tcp", ips["alpha"], "8080"),
        ),
        (s, f"session -> operator webhook :{webhook_port}", "blocked", ("tcp", host, webhook_port)),
        (w, "laneworker -> session pod :8080", "blocked", ("tcp", beta_ip, "8080")),
        (s, "session -> redis as berth-worker", "denied (WRONGPASS)", ("berth-worker", host, r)),
        (
            s,
            "session -> redis as berth-operator",
            "denied (WRONGPASS)",
            ("berth-operator", host, r),
        ),
        (s, "session -> redis: a worker's command", "denied (NOPERM)", ("self-tasks", host, r)),
        (s, "session -> redis (own user)", "open", ("self", host, r)),
        (w, "laneworker -> redis (own user)", "open", ("self", host, r)),
        (s, "session -> DNS (udp 53)", "open", ("dns", resolver(), "53")),
        (s, "session -> shared claim (workspace)", "open", ("store", host, "0", WORKSPACE)),
    ]
    for recipe, port in RECIPE_PORTS.items():
        plan.append((s, f"session -> LLM {recipe} :{port}", "open", ("tcp", host, str(port))))
    return plan


def test_policies_hold_by_packets(
    dev_cluster: DevCluster, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    dc = dev_cluster
    host = dc.host_ip
    redis_port = urllib.parse.urlsplit(dc.env["BERTH_REDIS_URL"]).port or 6379
    values = {
        "networkPolicy": {
            "apiServer": {"cidrs": [f"{host}/32"]},
            "externalRedis": {"cidrs": [f"{host}/32"], "ports": [redis_port]},
            # The chart's default ports (the dev values allow any port, for scripted models).
            "llmEgress": {"cidrs": [f"{host}/32"], "except": [], "ports": default_llm_ports()},
            "dns": {"cidrs": [f"{resolver()}/32"]},
        }
    }
    templates = rendered_templates(dc, values)
    from session_runtime.llm.scripted import ScriptedServer

    script = {"turns": [{"text": "ok"}], "on_exhausted": "repeat_last"}
    model = ScriptedServer(script, host=host, port=RECIPE_PORTS["vLLM"])
    model.start_in_thread()
    hook = webhook_env(dc, "np", tmp_path)
    hook["BERTH_WEBHOOK_LISTEN_HOST"] = host
    env = {
        "BERTH_NETWORK_POLICY_TEMPLATES": templates,
        # the tests' operator runs with config/rbac's ClusterRole as rbac_for_tests names it
        "BERTH_NETWORK_POLICY_OWNER_CLUSTER_ROLE": "berth-tests:operator",
        **hook,
    }
    rows: list[Row] = []
    try:
        with (
            listeners(host, [RECIPE_PORTS["LiteLLM"], RECIPE_PORTS["llama.cpp"]]),
            dc.namespace("np") as ns,
            operator(dc, ns, **env),
        ):
            # alpha on one node, beta and the worker on the other: both kube-router instances
            # (iptables-legacy for node-a, iptables-nft for node-b) are on the probes' paths.
            first, second = dc.nodes[:2]
            pool = {**POOL, "spec": {**POOL["spec"], "template": {"nodeSelector": on(second)}}}
            apply_in(dc, ns, [SECRET, pool])
            for name, node in (("alpha", first), ("beta", second)):
                placement = {"nodeSelector": on(node)}
                manifest = session_manifest(
                    name, model.base_url, "hi", keepAlive=True, placement=placement
                )
                apply_in(dc, ns, [manifest])
            alpha, beta = running_pod(dc, ns, "alpha"), running_pod(dc, ns, "beta")
            check_policies(dc, ns)
            pods = {
                "alpha": alpha["podName"],
                "beta": beta["podName"],
                "worker": worker_pod(dc, ns),
            }
            ips = {"alpha": alpha["podIP"], "beta": beta["podIP"]}
            plan = probe_plan(host, redis_port, hook["BERTH_WEBHOOK_PORT"], pods, ips)

            def seen_all() -> list[Row] | None:
                got = [(what, want, probe(dc, ns, pod, *args)) for pod, what, want, args in plan]
                rows[:] = got
                return got if all(matches(want, seen) for _, want, seen in got) else None

            # kube-router applies a new pod's chains at its next sync: wait until they hold.
            try:
                wait("every probe to see what the policies say", seen_all, cap=90, every=3)
            finally:
                print_table(rows, capsys)
            plugin_path(dc, ns, rows, capsys)
    finally:
        model.stop_thread()
        delete_webhook_configurations(dc)


def on(node: str) -> dict[str, str]:
    """A nodeSelector for ``node``."""
    return {"kubernetes.io/hostname": node}


def check_policies(dc: DevCluster, ns: str) -> None:
    """The operator created the session and worker policies, owned by its ClusterRole."""
    raw = json.loads(dc.kubectl("-n", ns, "get", "networkpolicy", "-o", "json").stdout)
    names = sorted(p["metadata"]["name"] for p in raw["items"])
    assert names == ["berth-sessions", "berth-workers"], names
    owners = {o["kind"] for p in raw["items"] for o in p["metadata"].get("ownerReferences", [])}
    assert owners == {"ClusterRole"}, owners


def worker_pod(dc: DevCluster, ns: str) -> str:
    """The name of the running pod of LaneWorker ``pool``."""

    def find() -> str | None:
        out = dc.kubectl("-n", ns, "get", "pods", "-l", "berth.dev/laneworker=pool", "-o", "json")
        running = [
            p["metadata"]["name"]
            for p in json.loads(out.stdout)["items"]
            if p["status"].get("phase") == "Running" and p["status"].get("podIP")
        ]
        return running[0] if running else None

    return str(wait("a LaneWorker pod running", find))


def plugin_path(
    dc: DevCluster, ns: str, rows: list[Row], capsys: pytest.CaptureFixture[str]
) -> None:
    """``kubectl berth send`` then ``passivate`` on session alpha (the API server's pod proxy);
    the session resumes from its store on epoch 2."""
    sent = kubectl_berth(dc, "send", "alpha", "again", "-n", ns)
    passivated = kubectl_berth(dc, "passivate", "alpha", "-n", ns, "--deadline-seconds", "30")
    for what, done in (("send", sent), ("passivate", passivated)):
        seen = "ok" if done.returncode == 0 else (done.stderr.strip() or done.stdout)[-120:]
        rows.append((f"plugin {what} (API server pod proxy)", "ok", seen))
    print_table(rows[-2:], capsys)
    assert sent.returncode == 0, sent.stdout + sent.stderr
    assert passivated.returncode == 0, passivated.stdout + passivated.stderr

    def epoch() -> int:
        return int(
            ((kget(dc, ns, "agentsession", "alpha") or {}).get("status") or {}).get("epoch") or 0
        )

    wait("alpha resumed from its store after the passivation", lambda: epoch() >= 2)


def print_table(rows: list[Row], capsys: pytest.CaptureFixture[str]) -> None:
    """The probe table: what, expected, seen (a mismatch is marked); printed past pytest's
    capture, so every run shows it."""
    width = max((len(r[0]) for r in rows), default=10)
    with capsys.disabled():
        print(f"\n{'probe':<{width}}  {'expected':<20}  seen")
        for what, want, seen in rows:
            mark = "" if matches(want, seen) else "  <-- MISMATCH"
            print(f"{what:<{width}}  {want:<20}  {seen}{mark}")
