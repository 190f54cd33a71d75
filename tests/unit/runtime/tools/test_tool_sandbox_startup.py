"""The start-up probe of the tool sandbox: a pod that would run tools unconfined refuses to start
(with a message naming its node and the ToolSandboxUnavailable code), never at a bash call."""

from __future__ import annotations

import json

from berth_contract import termination
from session_runtime.tools import sandbox


def test_required_without_landlock_refuses_naming_the_node() -> None:
    msg = sandbox.startup_refusal("required", 0, "node-b")
    assert msg is not None
    assert msg.startswith(sandbox.TOOL_SANDBOX_UNAVAILABLE)
    assert "node node-b" in msg
    assert "BestEffort" in msg


def test_without_node_name_says_this_node() -> None:
    msg = sandbox.startup_refusal("required", 0, None)
    assert msg is not None and "this node" in msg


def test_landlock_best_effort_or_no_local_tools_start() -> None:
    assert sandbox.startup_refusal("required", 1, "node-a") is None
    assert sandbox.startup_refusal("required", 7, None) is None
    assert sandbox.startup_refusal("best-effort", 0, "node-b") is None
    assert sandbox.startup_refusal("required", 0, "node-b", runs_tools=False) is None


def test_termination_message_carries_the_code_only_when_set() -> None:
    plain = json.loads(
        termination.render(termination.TerminationMessage(outcome="failed", reason="x"))
    )
    assert "code" not in plain
    assert termination.validate(plain) == []
    coded = termination.TerminationMessage(
        outcome="failed", reason="no landlock", code=sandbox.TOOL_SANDBOX_UNAVAILABLE
    )
    obj = json.loads(termination.render(coded))
    assert obj["code"] == "ToolSandboxUnavailable"
    assert termination.validate(obj) == []
    assert coded.exit_code == 1


def test_the_operator_writes_what_the_runtime_reads() -> None:
    from berth_operator.api.conditions import Reason
    from berth_operator.api.constants import TOOL_SANDBOX_VALUES

    from berth_contract import envvars
    from session_runtime.tools import sandbox

    assert envvars.TOOL_SANDBOX == sandbox.SANDBOX_MODE_ENV  # the script's copy of the name
    assert tuple(TOOL_SANDBOX_VALUES.values()) == sandbox.SANDBOX_MODES
    assert Reason.TOOL_SANDBOX_UNAVAILABLE == sandbox.TOOL_SANDBOX_UNAVAILABLE
