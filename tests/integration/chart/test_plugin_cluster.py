"""kubectl-berth against the real apiserver and a real keepAlive session pod.

The operator runs as in the operator integration tests (a subprocess under config/rbac's
ServiceAccount); the plugin runs as the user would run it (the ``kubectl-berth`` console script,
the cluster's kubeconfig) and reaches the session pod at ``http://<status pod IP>:8080``:
``send`` gives a keepAlive session its next prompt, ``passivate`` makes the pod checkpoint and exit
(the operator resumes the session on a new epoch), ``status`` shows the lineage.
"""

from __future__ import annotations

import base64
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from berth_operator.api.agentsession import AgentSessionStatus

from tests.cluster import DevCluster
from tests.integration.chart.support import fetch
from tests.integration.operator.harness import (
    SECRET,
    kget,
    operator,
    scripted_model,
    session_manifest,
    wait,
)

pytestmark = [pytest.mark.integration, pytest.mark.timeout(900)]


def kubectl_berth(dc: DevCluster, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(Path(sys.executable).parent / "kubectl-berth"), *args],
        env={**dc.proc_env, "COLUMNS": "200"},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def status(dc: DevCluster, ns: str, name: str) -> AgentSessionStatus:
    obj = kget(dc, ns, "agentsession", name) or {}
    return AgentSessionStatus.model_validate(obj.get("status") or {})


def api_token(dc: DevCluster, ns: str, name: str) -> str:
    """The session's API token, from its Secret ``<name>-berth`` (as the operator reads it)."""
    raw = dc.kubectl("-n", ns, "get", "secret", f"{name}-berth", "-o", "jsonpath={.data.api-token}")
    return base64.b64decode(raw.stdout).decode().strip()


def pod_state(ip: str, token: str) -> dict[str, Any]:
    body: dict[str, Any] = json.loads(fetch(f"http://{ip}:8080/v1/state", token=token))
    return body


def idle_pod(dc: DevCluster, ns: str, name: str, epoch: int) -> str:
    """Wait until the pod of ``epoch`` is idle; return its IP."""

    def check() -> str | None:
        st = status(dc, ns, name)
        if st.epoch != epoch or not st.pod_ip:
            return None
        try:
            state = pod_state(st.pod_ip, api_token(dc, ns, name))
            return st.pod_ip if state.get("state") == "idle" else None
        except OSError:
            return None

    ip: str = wait(f"{name} epoch {epoch} to be idle", check)
    return ip


def test_send_and_passivate_a_keepalive_session(dev_cluster: DevCluster) -> None:
    dc = dev_cluster
    script = {
        "turns": [{"text": "first done"}, {"text": "second done"}],
        "on_exhausted": "repeat_last",
    }
    with (
        dc.namespace("plug") as ns,
        scripted_model(script) as llm,
        operator(dc, ns),
    ):
        manifest = session_manifest("chat", llm.base_url, "first task", keepAlive=True)
        dc.kubectl("-n", ns, "apply", "-f", "-", input=yaml.safe_dump_all([SECRET, manifest]))
        idle_pod(dc, ns, "chat", 1)

        sent = kubectl_berth(dc, "send", "chat", "second task", "-n", ns)
        assert sent.returncode == 0, sent.stdout + sent.stderr
        assert "prompt accepted by chat" in sent.stdout
        wait(
            "the model to get the second prompt",
            lambda: any("second task" in json.dumps(r) for r in llm.requests),
        )
        ip = idle_pod(dc, ns, "chat", 1)
        assert pod_state(ip, api_token(dc, ns, "chat"))["resultText"] == "second done"

        passivated = kubectl_berth(dc, "passivate", "chat", "-n", ns, "--deadline-seconds", "30")
        assert passivated.returncode == 0, passivated.stdout + passivated.stderr
        assert "passivation of chat requested (deadline in 30s" in passivated.stdout
        resumed = wait(
            "the operator to resume the passivated session on epoch 2",
            lambda: (
                (st := status(dc, ns, "chat")).epoch == 2 and (st.passivations or 0) >= 1 and st
            ),
        )
        runs = resumed.runs or []
        passivated_runs = [r for r in runs if r.outcome == "passivated"]
        assert passivated_runs, [r.model_dump() for r in runs]
        assert "manual" in (passivated_runs[-1].reason or ""), passivated_runs[-1]

        shown = kubectl_berth(dc, "status", "chat", "-n", ns)
        assert shown.returncode == 0, shown.stderr
        assert "passivated" in shown.stdout and "Conditions" in shown.stdout

        missing = kubectl_berth(dc, "status", "nope", "-n", ns)
        assert missing.returncode == 1
        assert f"agentsession {ns}/nope not found" in missing.stderr
        dc.kubectl("-n", ns, "delete", "agentsession", "chat", "--timeout=120s")
