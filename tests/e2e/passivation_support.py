"""Helpers of the passivation e2e tests and of ``bench/drain.py`` (issue 7).

Draining a node evicts *every* pod on it, so these tests do not drain the shared process nodes
(other suites run pods there at the same time). ``private_nodes`` starts its own process node agent
(``hack/process_node_agent.py``, the same test-only kubelet as the dev cluster's) for two fresh
nodes tainted ``berth.dev/passivation-test=yes:NoSchedule`` and labelled
``berth.dev/passivation-pool=<id>``; sessions tolerate the taint and select the pool. The agent's
PATH starts with a directory holding a ``berth-session`` wrapper that sets the runtime's test-only
``BERTH_TEST_IGNORE_PASSIVATION=1`` for sessions named ``ignore-*`` (the operator has no way to set
pod env, and none is wanted): "a runtime that ignores passivation".

Waits are bounded only to turn a hang into a failure, never to assert a duration.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from tests.cluster import ROOT, DevCluster
from tests.integration.operator.harness import free_port

TAINT_KEY = "berth.dev/passivation-test"
POOL_LABEL = "berth.dev/passivation-pool"
WRAPPER = """#!/bin/sh
# test-only: sessions named ignore-* get a runtime that accepts but ignores passivation
case "$BERTH_SESSION" in */ignore-*) export BERTH_TEST_IGNORE_PASSIVATION=1 ;; esac
exec {real} "$@"
"""


@dataclass
class PrivateNodes:
    """Two process nodes served by a private agent."""

    a: str
    b: str
    pool: str
    state_dir: Path
    agent: subprocess.Popen[bytes]

    def claim_dir(self, namespace: str, claim: str = "berth-shared") -> Path:
        """Host directory of a PVC on these nodes."""
        return self.state_dir / "pvc" / namespace / claim

    def placement(self) -> dict[str, Any]:
        """spec.placement that puts a session (or a plain pod) on these nodes only."""
        return {
            "nodeSelector": {POOL_LABEL: self.pool},
            "tolerations": [{"key": TAINT_KEY, "operator": "Exists", "effect": "NoSchedule"}],
        }


def wait(what: str, check: Callable[[], Any], cap: float = 180.0, every: float = 0.5) -> Any:
    """Poll ``check`` until truthy; AssertionError naming ``what`` after ``cap`` seconds."""
    end = time.monotonic() + cap
    last: Any = None
    while time.monotonic() < end:
        try:
            last = check()
        except subprocess.CalledProcessError as exc:
            last = exc.stderr
        else:
            if last:
                return last
        time.sleep(every)
    raise AssertionError(f"gave up waiting for {what}; last: {str(last)[:2000]}")


@contextmanager
def private_nodes(dc: DevCluster) -> Iterator[PrivateNodes]:
    """Start a private process node agent for two new nodes; stop it and delete them after."""
    ident = uuid.uuid4().hex[:6]
    a, b = f"pz-{ident}-a", f"pz-{ident}-b"
    with tempfile.TemporaryDirectory(prefix="berth-pz-") as tmp:
        state = Path(tmp) / "state"
        bindir = Path(tmp) / "bin"
        bindir.mkdir()
        wrapper = bindir / "berth-session"
        wrapper.write_text(WRAPPER.format(real=Path(sys.executable).parent / "berth-session"))
        wrapper.chmod(0o755)
        octet = 100 + int(ident[:2], 16) % 100
        log = open(Path(tmp) / "agent.log", "wb")  # noqa: SIM115
        agent = subprocess.Popen(
            [
                sys.executable,
                str(ROOT / "hack" / "process_node_agent.py"),
                "--kubeconfig",
                dc.kubeconfig,
                "--node",
                a,
                "--node",
                b,
                "--state-dir",
                str(state),
                "--pod-ip-prefix",
                f"127.{octet}.",
                "--path-prepend",
                str(bindir),
                "--path-prepend",
                str(Path(sys.executable).parent),
                "--register-with-taints",
                f"{TAINT_KEY}=yes:NoSchedule",
                "--kubelet-port",
                str(free_port()),
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
            env=dc.proc_env,
            start_new_session=True,
        )
        log.close()
        nodes = PrivateNodes(a, b, ident, state, agent)
        try:
            for node in (a, b):
                wait(f"node {node} Ready", lambda n=node: _ready(dc, n), cap=60)
                dc.kubectl("label", "node", node, f"{POOL_LABEL}={ident}", "--overwrite")
            yield nodes
        except BaseException:
            print((Path(tmp) / "agent.log").read_text(errors="replace")[-6000:], file=sys.stderr)
            raise
        finally:
            if agent.poll() is None:
                agent.send_signal(signal.SIGTERM)
                try:
                    agent.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    agent.kill()
                    agent.wait(timeout=10)
            dc.kubectl("delete", "node", a, b, "--wait=false", check=False)


def _ready(dc: DevCluster, node: str) -> bool:
    res = dc.kubectl("get", "node", node, "-o", "json", check=False)
    if res.returncode != 0:
        return False
    conds = json.loads(res.stdout).get("status", {}).get("conditions") or []
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conds)


def webhook_env(dc: DevCluster, namespace: str, cert_dir: Path) -> dict[str, str]:
    """Operator env enabling the pods/eviction webhook on a free loopback port, with openssl
    certificates (hack/webhook-certs.sh) and the optional RBAC of config/rbac/webhook."""
    subprocess.run(
        ["bash", str(ROOT / "hack" / "webhook-certs.sh"), str(cert_dir)],
        check=True,
        capture_output=True,
    )
    dc.kubectl("create", "namespace", "berth-system", check=False)
    dc.kubectl("apply", "-k", str(ROOT / "config" / "rbac" / "webhook"))
    return {
        "BERTH_WEBHOOK_ENABLED": "true",
        "BERTH_WEBHOOK_LISTEN_HOST": "127.0.0.1",
        "BERTH_WEBHOOK_PORT": str(free_port()),
        "BERTH_WEBHOOK_CERT_DIR": str(cert_dir),
        "BERTH_WEBHOOK_CONFIGURATION": f"berth-eviction-{namespace}",
    }


def delete_webhook_configurations(dc: DevCluster, prefix: str = "berth-eviction-") -> None:
    """Delete the (emptied) webhook configurations kopf's managed mode leaves behind."""
    for kind in ("validatingwebhookconfigurations", "mutatingwebhookconfigurations"):
        names = dc.kubectl("get", kind, "-o", "name", check=False).stdout.split()
        mine = [n for n in names if n.split("/", 1)[-1].startswith(prefix)]
        if mine:
            dc.kubectl("delete", *mine, "--wait=false", check=False)


def step_script(rounds: int, delay_ms: int = 300, sleep_s: float = 0.2) -> dict[str, Any]:
    """A scripted conversation of ``rounds`` bash rounds, each appending ``step-<i>`` to
    steps.log in the workspace, then a final answer. ``history`` cursor: a resumed run gets the
    turn its own history calls for, even after an abandoned in-flight call."""
    turns: list[dict[str, Any]] = [
        {
            "tool_calls": [
                {
                    "name": "bash",
                    "arguments": {"command": f"echo step-{i} >> steps.log; sleep {sleep_s}"},
                }
            ],
            "delay_ms": delay_ms,
        }
        for i in range(1, rounds + 1)
    ]
    turns.append({"text": "all steps done", "delay_ms": delay_ms})
    return {"turns": turns, "cursor": "history", "on_exhausted": "repeat_last"}


def session_doc(
    name: str, base_url: str, nodes: PrivateNodes, deadline_seconds: int, **spec: Any
) -> dict[str, Any]:
    """An AgentSession on the private nodes (the harness's Secret llm-credentials)."""
    return {
        "apiVersion": "berth.dev/v1alpha1",
        "kind": "AgentSession",
        "metadata": {"name": name},
        "spec": {
            "prompt": f"run the steps ({name})",
            "model": "openai/gpt-4o-mini",
            "llm": {
                "baseURL": base_url,
                "apiKeySecretRef": {"name": "llm-credentials", "key": "api-key"},
            },
            "passivation": {"deadlineSeconds": deadline_seconds},
            "placement": nodes.placement(),
            **spec,
        },
    }


def apply(dc: DevCluster, namespace: str, docs: list[dict[str, Any]]) -> None:
    dc.kubectl("-n", namespace, "apply", "-f", "-", input=yaml.safe_dump_all(docs))


def session(dc: DevCluster, namespace: str, name: str) -> dict[str, Any]:
    out: dict[str, Any] = json.loads(
        dc.kubectl("-n", namespace, "get", "agentsession", name, "-o", "json").stdout
    )
    return out


def status(dc: DevCluster, namespace: str, name: str) -> dict[str, Any]:
    st: dict[str, Any] = session(dc, namespace, name).get("status") or {}
    return st


def pods(dc: DevCluster, namespace: str, name: str) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = json.loads(
        dc.kubectl(
            "-n", namespace, "get", "pods", "-l", f"berth.dev/session={name}", "-o", "json"
        ).stdout
    )["items"]
    return items


def condition(st: dict[str, Any], type_: str) -> dict[str, Any]:
    for cond in st.get("conditions") or []:
        if cond.get("type") == type_:
            c: dict[str, Any] = cond
            return c
    return {}


def steps(nodes: PrivateNodes, namespace: str, name: str) -> list[str]:
    """Lines of the session's workspace steps.log (one per execute-lane tool that ran)."""
    path = nodes.claim_dir(namespace) / "workspaces" / namespace / name / "steps.log"
    return path.read_text().split() if path.exists() else []


def evict(dc: DevCluster, namespace: str, pod: str) -> subprocess.CompletedProcess[str]:
    """POST an Eviction (policy/v1) for ``pod`` through the Eviction API, as kubectl drain does.

    ``-v=6`` makes kubectl log the HTTP status line (e.g. ``429 Too Many Requests``) to stderr."""
    body = {
        "apiVersion": "policy/v1",
        "kind": "Eviction",
        "metadata": {"name": pod, "namespace": namespace},
    }
    return dc.kubectl(
        "create",
        "-v=6",
        "--raw",
        f"/api/v1/namespaces/{namespace}/pods/{pod}/eviction",
        "-f",
        "-",
        input=json.dumps(body),
        check=False,
    )


def drain(
    dc: DevCluster, node: str, timeout: int = 300
) -> tuple[subprocess.CompletedProcess[str], float]:
    """``kubectl drain NODE --ignore-daemonsets --delete-emptydir-data``; (result, seconds)."""
    started = time.monotonic()
    res = dc.kubectl(
        "drain",
        node,
        "--ignore-daemonsets",
        "--delete-emptydir-data",
        f"--timeout={timeout}s",
        check=False,
        timeout=timeout + 30,
    )
    return res, time.monotonic() - started


def operator_env(**extra: str) -> dict[str, str]:
    """Operator settings for these tests: fast refresh, short kill grace."""
    return {
        "BERTH_STATUS_REFRESH_SECONDS": "0.5",
        "BERTH_PASSIVATION_KILL_GRACE_SECONDS": "2",
        **extra,
    }


def tmpdir() -> Path:
    return Path(tempfile.mkdtemp(prefix="berth-wh-"))


def env_flag(name: str) -> bool:
    return os.environ.get(name, "") in ("1", "true")
