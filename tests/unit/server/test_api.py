"""Table tests for session_runtime.pod.api (HTTP bodies, lifecycle, /v1/state mapping)."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from session_runtime.pod.api import (
    MessageRequest,
    PassivateRequest,
    Passivation,
    camelize,
    outcome_of,
    state_body,
)
from session_runtime.pod.options import IdentityOptions


@pytest.mark.parametrize(
    ("phase", "outcome"),
    [
        ("starting", None),
        ("running", None),
        ("idle", None),
        ("passivating", None),
        ("completed", "completed"),
        ("passivated", "passivated"),
        ("failed", "failed"),
        ("fenced", "fenced"),
    ],
)
def test_outcome_of(phase: Any, outcome: str | None) -> None:
    assert outcome_of(phase) == outcome


@pytest.mark.parametrize(
    ("body", "ok"),
    [
        ({"reason": "node_drain", "deadlineMs": 5}, True),
        ({"reason": "manual"}, True),
        ({"reason": ""}, False),
        ({"deadlineMs": 5}, False),
        ({"reason": "x", "deadlineMs": -1}, False),
        ({"reason": "x", "deadlineMs": "soon"}, False),
    ],
)
def test_passivate_request(body: dict[str, Any], ok: bool) -> None:
    if ok:
        assert PassivateRequest.model_validate(body).reason == body["reason"]
    else:
        with pytest.raises(ValidationError):
            PassivateRequest.model_validate(body)


def test_message_request_needs_a_prompt() -> None:
    assert MessageRequest.model_validate({"prompt": "go"}).prompt == "go"
    with pytest.raises(ValidationError):
        MessageRequest.model_validate({"prompt": ""})


def test_camelize() -> None:
    assert camelize({"run_id": 1, "a": [{"tool_calls_count": 2}], "x_y_z": None}) == {
        "runId": 1,
        "a": [{"toolCallsCount": 2}],
        "xYZ": None,
    }


def test_state_body_before_the_session_exists() -> None:
    body = state_body(
        "starting", None, session="ns/s", epoch=3, identity=IdentityOptions(tenant_id="t")
    )
    assert body["state"] == "starting"
    assert body["runId"] is None and body["turn"] == 0
    assert body["usage"] == {"promptTokens": 0, "completionTokens": 0, "totalTokens": 0}
    assert body["identity"] == {
        "tenantId": "t",
        "principal": None,
        "agentTemplateId": None,
        "correlationId": None,
    }
    assert body["epoch"] == 3 and body["passivation"] is None


def test_state_body_maps_the_runtime_state() -> None:
    runtime = {
        "state": "running",
        "run_id": "run-1",
        "turn": 2,
        "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15},
        "tool_calls_count": 4,
        "last_checkpoint": {"run_id": "run-1", "turn": 2, "checkpoint_ms": 99},
        "last_error": None,
    }
    body = state_body(
        "passivating",
        runtime,
        session="ns/s",
        epoch=1,
        identity=IdentityOptions(),
        pod_name="p",
        passivation=Passivation("node_drain", 200, 100),
        ignoring_passivation=True,
    )
    assert body["runtimeState"] == "running"
    assert (body["runId"], body["turn"], body["toolCallsCount"]) == ("run-1", 2, 4)
    assert body["usage"]["totalTokens"] == 15
    assert body["lastCheckpoint"] == {"runId": "run-1", "turn": 2, "checkpointMs": 99}
    assert body["passivation"] == {
        "reason": "node_drain",
        "deadlineMs": 200,
        "requestedMs": 100,
        "ignored": True,
    }
