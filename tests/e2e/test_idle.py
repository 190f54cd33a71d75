"""Idle passivation and wake, end to end (docs/architecture.md §8, "At rest").

Real pieces: the control plane, ``berth-operator`` as a subprocess under its own ServiceAccount,
``berth-session`` pods on the dev cluster's real nodes, the shared volume, the scripted
OpenAI-compatible model, and the ``kubectl-berth`` console script as a user runs it.

Asserted: a keepAlive session with ``spec.idle.afterSeconds`` goes to rest once idle that long
(passivation reason ``idle_reaper`` in status and in its lineage, no pod, its PDB released,
``Passivated=True AtRest`` saying since when, ``kubectl berth status`` showing it); ``kubectl berth
send`` wakes it and the message is answered by the model with the whole earlier conversation
(the store intact: the model is answered by the turn its history calls for); no tool ran twice;
the woken session goes to rest again.
"""

from __future__ import annotations

import base64
import json
from typing import Any

import pytest

from tests.cluster import DevCluster
from tests.e2e.passivation_support import (
    REAL_NODE_LABEL,
    apply,
    condition,
    kubectl_berth,
    operator_env,
    pods,
    session,
    status,
    wait,
)
from tests.integration.chart.support import fetch
from tests.integration.operator.harness import SECRET, operator, scripted_model

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(900)]

IDLE_AFTER_SECONDS = 5

SCRIPT: dict[str, Any] = {
    # history cursor: the answer is chosen by the number of assistant messages in the request,
    # so a woken session that lost its conversation would get turn 0 again (a tool call).
    "turns": [
        {"tool_calls": [{"name": "bash", "arguments": {"command": "echo step-1 >> steps.log"}}]},
        {"text": "first answer"},
        {"text": "woken answer"},
    ],
    "cursor": "history",
    "on_exhausted": "repeat_last",
}


def pod_state(dc: DevCluster, ns: str, name: str, ip: str) -> dict[str, Any]:
    raw = dc.kubectl("-n", ns, "get", "secret", f"{name}-berth", "-o", "jsonpath={.data.api-token}")
    token = base64.b64decode(raw.stdout).decode().strip()
    body: dict[str, Any] = json.loads(fetch(f"http://{ip}:8080/v1/state", token=token))
    return body


PRUNED = (
    "spec.idle was pruned: the shared dev cluster's AgentSession CRD was replaced by one "
    "without it (another branch's test); this run proves nothing, re-run it"
)


def at_rest(dc: DevCluster, ns: str, name: str, passivations: int) -> dict[str, Any] | None:
    obj = session(dc, ns, name)
    assert (obj.get("spec") or {}).get("idle"), PRUNED
    st: dict[str, Any] = obj.get("status") or {}
    cond = condition(st, "Passivated")
    ok = (
        st.get("phase") == "Passivated"
        and (st.get("passivations") or 0) == passivations
        and cond.get("status") == "True"
        and cond.get("reason") == "AtRest"
        and st.get("atRestSince")
        and not pods(dc, ns, name)
    )
    return st if ok else None


def steps(dc: DevCluster, ns: str, name: str) -> list[str]:
    path = dc.claim_dir(ns) / "workspaces" / ns / name / "steps.log"
    return path.read_text().split() if path.exists() else []


def test_idle_session_rests_and_a_message_wakes_it(dev_cluster: DevCluster) -> None:
    dc = dev_cluster
    with (
        dc.namespace("idle") as ns,
        scripted_model(SCRIPT) as srv,
        operator(dc, ns, **operator_env()),
    ):
        doc = {
            "apiVersion": "berth.dev/v1alpha1",
            "kind": "AgentSession",
            "metadata": {"name": "rest"},
            "spec": {
                "prompt": "write step one",
                "model": "openai/gpt-4o-mini",
                "llm": {
                    "baseURL": srv.base_url,
                    "apiKeySecretRef": {"name": "llm-credentials", "key": "api-key"},
                },
                "keepAlive": True,
                "idle": {"afterSeconds": IDLE_AFTER_SECONDS},
                "placement": {"nodeSelector": {REAL_NODE_LABEL: "real"}},
            },
        }
        apply(dc, ns, [SECRET, doc])
        spec = session(dc, ns, "rest")["spec"]
        assert spec.get("idle") == {"afterSeconds": IDLE_AFTER_SECONDS}, PRUNED

        # 1. the first task runs, the pod goes idle, then to rest
        st = wait("rest at rest", lambda: at_rest(dc, ns, "rest", 1), cap=300)
        assert st["passivation"]["reason"] == "idle_reaper"
        assert st["passivation"]["outcome"] == "passivated"
        first = st["runs"][0]
        assert first["outcome"] == "passivated" and "idle_reaper" in first["reason"], first
        assert "at rest since" in condition(st, "Passivated")["message"]
        # the namespace's one budget; no per-session PDB was made or left
        pdbs = dc.kubectl("-n", ns, "get", "pdb", "-o", "name").stdout.split()
        assert pdbs == ["poddisruptionbudget.policy/berth-sessions"], pdbs
        assert steps(dc, ns, "rest") == ["step-1"]
        shown = kubectl_berth(dc, "status", "rest", "-n", ns)
        assert shown.returncode == 0, shown.stderr
        assert "Passivated" in shown.stdout and "since" in shown.stdout, shown.stdout

        # 2. a message wakes it; the model answers with the whole conversation behind it
        sent = kubectl_berth(dc, "send", "rest", "and now?", "-n", ns, "--wait-seconds", "300")
        assert sent.returncode == 0, sent.stdout + sent.stderr

        def answered() -> dict[str, Any] | None:
            cur = status(dc, ns, "rest")
            if (cur.get("epoch") or 0) < 2 or not cur.get("podIP"):
                return None
            try:
                body = pod_state(dc, ns, "rest", cur["podIP"])
            except OSError:
                return None
            ok = body.get("state") == "idle" and body.get("resultText") == "woken answer"
            return cur if ok else None

        woken = wait("rest answered after waking", answered, cap=300)
        assert woken["passivation"]["resumedAt"], woken["passivation"]
        last = srv.requests[-1]
        assert last["turn_index"] == 2, [r["turn_index"] for r in srv.requests]
        texts = [str(m.get("content") or "") for m in last["messages"]]
        assert "write step one" in texts  # the first prompt, from the restored conversation
        assert "first answer" in texts and texts[-1] == "and now?", texts
        assert steps(dc, ns, "rest") == ["step-1"]  # nothing ran twice

        # 3. idle again: back to rest, PDB released again
        st = wait("rest at rest again", lambda: at_rest(dc, ns, "rest", 2), cap=300)
        assert st["passivation"]["reason"] == "idle_reaper"
        assert (st.get("restarts") or 0) == 0
