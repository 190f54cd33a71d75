"""A session placed on a node that gives pods no Landlock (the dev cluster's node-c, as an older
kernel or gVisor would: hack/nodes.sh) fails at once and says why; with ``toolSandbox:
BestEffort`` it runs there (docs/security.md, "Nodes without Landlock").

Real pieces: the control plane, ``berth-operator`` as a subprocess, ``berth-session`` pods on
node-c (its runc answers the ``landlock_*`` syscalls with ENOSYS), the scripted model over HTTP.

Asserted: under the default (Required) the session ends ``Failed`` with ``Ready`` and ``Failed``
reason ``ToolSandboxUnavailable`` naming node-c, one Warning Event saying so, one pod (no
replacement), and no model request at all (it never reached its first bash call); the same
session with ``toolSandbox: BestEffort`` on node-c runs its bash call and Succeeds.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
import yaml

from tests.cluster import DevCluster
from tests.integration.operator.harness import (
    SECRET,
    bash,
    condition,
    kget,
    klist,
    operator,
    scripted_model,
    session_manifest,
    wait,
)

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(600)]


def on_node_without_landlock(dc: DevCluster) -> dict[str, Any]:
    """Placement pinning a session to the dev cluster's node without Landlock (tainted)."""
    nodes = dc.env.get("BERTH_NO_LANDLOCK_NODES", "").split()
    assert nodes, "the dev cluster has no node without Landlock (BERTH_NO_LANDLOCK_NODES)"
    return {
        "nodeSelector": {"kubernetes.io/hostname": nodes[0]},
        "tolerations": [
            {"key": "berth.dev/no-landlock", "operator": "Exists", "effect": "NoSchedule"}
        ],
    }


def finished(dc: DevCluster, ns: str, name: str) -> Any:
    def check() -> Any:
        obj = kget(dc, ns, "agentsession", name)
        phase = (obj or {}).get("status", {}).get("phase")
        return obj if phase in ("Succeeded", "Failed") else None

    return check


def test_no_landlock_fails_fast_naming_the_node_and_best_effort_runs(
    dev_cluster: DevCluster,
) -> None:
    dc = dev_cluster
    placement = on_node_without_landlock(dc)
    node = placement["nodeSelector"]["kubernetes.io/hostname"]
    script = {
        "turns": [{"tool_calls": [bash("echo confined-or-not > ran.txt")]}, {"text": "done"}],
        "cursor": "history",
        "on_exhausted": "repeat_last",
    }
    with dc.namespace("ll") as ns, scripted_model(script) as llm, operator(dc, ns):
        strict = session_manifest("strict", llm.base_url, "run bash", placement=placement)
        dc.kubectl("-n", ns, "apply", "-f", "-", input=yaml.safe_dump_all([SECRET, strict]))
        obj = wait("session strict to end", finished(dc, ns, "strict"), 300)
        st = obj["status"]
        assert st["phase"] == "Failed", json.dumps(st, indent=1)
        ready, failed = condition(obj, "Ready"), condition(obj, "Failed")
        assert ready is not None and ready["reason"] == "ToolSandboxUnavailable", ready
        assert f"node {node}" in ready["message"], ready
        assert failed is not None and failed["reason"] == "ToolSandboxUnavailable", failed
        events = [
            e
            for e in klist(dc, ns, "events")
            if e["involvedObject"].get("name") == "strict"
            and e.get("reason") == "ToolSandboxUnavailable"
        ]
        assert len(events) == 1 and events[0]["type"] == "Warning", events
        assert f"node {node}" in events[0]["message"]
        assert st.get("epoch") == 1  # failed at once: no replacement pod
        assert llm.requests == [], "the session reached the model before refusing"

        lenient = session_manifest(
            "lenient", llm.base_url, "run bash", placement=placement, toolSandbox="BestEffort"
        )
        dc.kubectl("-n", ns, "apply", "-f", "-", input=yaml.safe_dump(lenient))
        obj = wait("session lenient to end", finished(dc, ns, "lenient"), 300)
        assert obj["status"]["phase"] == "Succeeded", json.dumps(obj["status"], indent=1)
        assert obj["status"]["runs"][-1]["nodeName"] == node
        ran = dc.claim_dir(ns) / "workspaces" / ns / "lenient" / "ran.txt"
        assert ran.read_text().strip() == "confined-or-not"
