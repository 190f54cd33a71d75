"""Helpers of the passivation e2e tests and of ``bench/drain.py``.

Draining a node evicts *every* pod on it. The suite runs its tests one after another, so these
tests drain the dev cluster's two real nodes themselves (``drainable_nodes``) and leave both
uncordoned afterwards; sessions select the real nodes (``berth.dev/dev-node=real``). "A runtime
that ignores passivation" is a session container frozen with SIGSTOP from the host: it accepts
connections but never answers, as a wedged runtime would.

Waits are bounded only to turn a hang into a failure, never to assert a duration.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from tests.cluster import ROOT, DevCluster, poll_until
from tests.integration.operator.harness import apply_test_rbac, free_port

REAL_NODE_LABEL = "berth.dev/dev-node"


@dataclass
class PrivateNodes:
    """The two real nodes a test may cordon and drain."""

    a: str
    b: str
    dc: DevCluster

    def claim_dir(self, namespace: str, claim: str = "berth-shared") -> Path:
        """Host directory of a shared claim (``DevCluster.claim_dir``)."""
        return self.dc.claim_dir(namespace, claim)

    def placement(self) -> dict[str, Any]:
        """spec.placement that puts a session (or a plain pod) on the real nodes only."""
        return {"nodeSelector": {REAL_NODE_LABEL: "real"}}


def wait(what: str, check: Callable[[], Any], cap: float = 180.0, every: float = 0.5) -> Any:
    """Poll ``check`` until truthy; AssertionError naming ``what`` after ``cap`` seconds."""
    return poll_until(what, check, cap, every)


@contextmanager
def private_nodes(dc: DevCluster) -> Iterator[PrivateNodes]:
    """The dev cluster's two real nodes, uncordoned before and after use."""
    if len(dc.nodes) < 2:
        raise RuntimeError(f"passivation tests need two real nodes; BERTH_NODES={dc.nodes}")
    a, b = dc.nodes[:2]
    for node in (a, b):
        dc.kubectl("uncordon", node)
    try:
        yield PrivateNodes(a, b, dc)
    finally:
        for node in (a, b):
            dc.kubectl("uncordon", node, check=False)


def webhook_env(dc: DevCluster, namespace: str, cert_dir: Path) -> dict[str, str]:
    """Operator env enabling the pods/eviction webhook on a free loopback port, with openssl
    certificates (hack/webhook-certs.sh) and the optional RBAC of config/rbac/webhook."""
    subprocess.run(
        ["bash", str(ROOT / "hack" / "webhook-certs.sh"), str(cert_dir)],
        check=True,
        capture_output=True,
    )
    apply_test_rbac(dc, "webhook")
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


def kubectl_berth(dc: DevCluster, *args: str) -> subprocess.CompletedProcess[str]:
    """Run the ``kubectl-berth`` console script as a user does (wide output; never raises)."""
    return subprocess.run(
        [str(Path(sys.executable).parent / "kubectl-berth"), *args],
        env={**dc.proc_env, "COLUMNS": "250"},
        capture_output=True,
        text=True,
        timeout=400,
        check=False,
    )


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


def evict(
    dc: DevCluster, namespace: str, pod: str, *, dry_run: bool = False
) -> subprocess.CompletedProcess[str]:
    """POST an Eviction (policy/v1) for ``pod`` through the Eviction API, as kubectl drain does;
    with ``dry_run`` as ``?dryRun=All`` (admission is asked, nothing is evicted or recorded).

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
        f"/api/v1/namespaces/{namespace}/pods/{pod}/eviction" + ("?dryRun=All" if dry_run else ""),
        "-f",
        "-",
        input=json.dumps(body),
        check=False,
    )


def drain(
    dc: DevCluster, node: str, timeout: int = 300, *flags: str
) -> tuple[subprocess.CompletedProcess[str], float]:
    """``kubectl drain NODE --ignore-daemonsets --delete-emptydir-data [FLAGS]``; (result,
    seconds)."""
    started = time.monotonic()
    res = dc.kubectl(
        "drain",
        node,
        "--ignore-daemonsets",
        "--delete-emptydir-data",
        f"--timeout={timeout}s",
        *flags,
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
