"""A session on a custom agent image (docs/agent-images.md), end to end.

Real pieces: ``examples/agent-image`` (Berth's image plus Node.js from Debian) built by
``hack/agent-image.sh`` with buildah on the locally built Berth image and loaded into the dev
cluster's real nodes; ``berth-operator`` as a subprocess; the session pod on a real node; the
scripted OpenAI-compatible model.

Asserted: an AgentSession whose ``spec.image`` names the agent image runs on it (its status says
so) and its agent's bash tool, run in the session pod (every lane internal), answers
``node --version`` with a version: the model is sent that tool result; the session Succeeds.

On an external cluster (``BERTH_EXTERNAL_CLUSTER=1``) the image is not built here:
``BERTH_AGENT_IMAGE`` names one built from the example and pullable by the cluster.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
from typing import Any

import pytest

from tests.cluster import DEV_DIR, ROOT, DevCluster
from tests.e2e.passivation_support import REAL_NODE_LABEL
from tests.integration.operator.harness import (
    SECRET,
    apply_in,
    bash,
    kget,
    operator,
    scripted_model,
    session_manifest,
    wait,
)

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(1200)]

EXAMPLE = ROOT / "examples" / "agent-image"
PROMPT = "Which Node.js version does this image have?"
SCRIPT: dict[str, Any] = {
    "turns": [{"tool_calls": [bash("node --version")]}, {"text": "Node.js is installed"}]
}
NODE_VERSION = re.compile(r"\bv\d+\.\d+\.\d+\b")
"""What ``node --version`` prints (``v18.19.0``)."""


def agent_image(dc: DevCluster) -> str:
    """The example's image: built (or reused from the cache) and loaded into the nodes by
    ``hack/agent-image.sh load``, or ``BERTH_AGENT_IMAGE`` on an external cluster."""
    if dc.external:
        return os.environ["BERTH_AGENT_IMAGE"]
    proc = subprocess.run(
        ["bash", str(ROOT / "hack" / "agent-image.sh"), "load", str(EXAMPLE)],
        env={**dc.proc_env, "BERTH_DEV_DIR": str(DEV_DIR)},
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )
    assert proc.returncode == 0, (
        f"agent-image.sh failed:\n{proc.stdout[-3000:]}{proc.stderr[-3000:]}"
    )
    return proc.stdout.strip().splitlines()[-1]


def tool_outputs(requests: list[dict[str, Any]]) -> list[str]:
    """The tool results the model was sent in the conversation started by :data:`PROMPT`."""
    outputs: list[str] = []
    for req in requests:
        messages = req["messages"]
        if any(m.get("role") == "user" and m.get("content") == PROMPT for m in messages):
            outputs = [str(m.get("content", "")) for m in messages if m.get("role") == "tool"]
    return outputs


def test_a_session_runs_its_tools_on_its_own_agent_image(dev_cluster: DevCluster) -> None:
    dc = dev_cluster
    image = agent_image(dc)
    assert image != dc.image
    with dc.namespace("agentimg") as ns, scripted_model(SCRIPT) as llm, operator(dc, ns):
        doc = session_manifest(
            "node",
            llm.base_url,
            PROMPT,
            image=image,
            placement={"nodeSelector": {REAL_NODE_LABEL: "real"}},
        )
        apply_in(dc, ns, [SECRET, doc])

        def finished() -> dict[str, Any] | None:
            obj = kget(dc, ns, "agentsession", "node") or {}
            done = (obj.get("status") or {}).get("phase") in ("Succeeded", "Failed")
            return obj if done else None

        obj = wait("session node to finish", finished, cap=600)
        st = obj["status"]
        assert st["phase"] == "Succeeded", json.dumps(st, indent=1)
        assert st["image"] == image
        outputs = tool_outputs(llm.requests)
        assert len(outputs) == 1 and NODE_VERSION.search(outputs[0]), outputs
