"""docs/agent-images.md against the code it describes: its manifests are valid specs, its
Dockerfile is the example's, and what it says an image must keep (entrypoints, user, the tool
sandbox's directories and environment) is what the pod builders and the sandbox do."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import yaml
from berth_operator.api.agentsession import AgentSessionSpec
from berth_operator.api.constants import SESSION_COMMAND
from berth_operator.api.laneworker import LaneWorkerSpec
from berth_operator.builders.laneworker import WORKER_COMMAND
from berth_operator.builders.security import hardened_container_security

from session_runtime.tools import sandbox

ROOT = Path(__file__).resolve().parents[4]
DOC = (ROOT / "docs" / "agent-images.md").read_text()
EXAMPLE = (ROOT / "examples" / "agent-image" / "Dockerfile").read_text()


def blocks(lang: str) -> list[str]:
    return re.findall(rf"```{lang}\n(.*?)```", DOC, flags=re.S)


def instructions(dockerfile: str) -> list[str]:
    """The Dockerfile's instructions, comments dropped, continuation lines joined."""
    text = "\n".join(line for line in dockerfile.splitlines() if not line.startswith("#"))
    return [" ".join(i.split()) for i in text.replace("\\\n", " ").splitlines() if i.strip()]


def test_the_manifests_are_valid_specs() -> None:
    docs: dict[str, dict[str, Any]] = {}
    for block in blocks("yaml"):
        doc = yaml.safe_load(block)
        docs[doc["kind"]] = doc["spec"]
    session = AgentSessionSpec.model_validate(docs["AgentSession"])
    worker = LaneWorkerSpec.model_validate(docs["LaneWorker"])
    assert session.image and session.image == worker.image
    assert worker.lane == "execute"


def test_the_dockerfile_shown_is_the_tested_example() -> None:
    (shown,) = blocks("dockerfile")
    assert instructions(shown) == instructions(EXAMPLE)
    assert instructions(EXAMPLE)[-2] == "USER 10001:10001"  # numeric, Berth's user


def test_what_the_page_says_the_pods_need_is_what_they_get() -> None:
    assert f"`{SESSION_COMMAND}`" in DOC and f"`{WORKER_COMMAND}`" in DOC
    assert hardened_container_security()["readOnlyRootFilesystem"] is True
    assert hardened_container_security()["allowPrivilegeEscalation"] is False


def test_the_tool_sandbox_is_described_as_it_is() -> None:
    """Every directory a tool may execute from and every variable it inherits is on the page
    (``/lib32``, ``/lib64`` as ``/lib*``)."""
    for d in sandbox.SYSTEM_RO:
        shown = "/lib*" if d.startswith("/lib") else d
        assert f"`{shown}`" in DOC, d
    for name in sandbox.ENV_ALLOW:
        assert f"`{name}`" in DOC, name
