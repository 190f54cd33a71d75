"""Table tests for berth_contract.state (HTTP bodies, lifecycle, /v1/state mapping)."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from berth_contract.options import IdentityOptions
from berth_contract.state import (
    MessageRequest,
    PassivateRequest,
    Passivation,
    RuntimeState,
    checkpoint_json,
    outcome_of,
    state_body,
)


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


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        (None, None),
        ({}, None),
        (
            {"run_id": "run-1", "turn": 2, "tool_calls_count": 3, "at_ms": 99},
            {"runId": "run-1", "turn": 2, "toolCallsCount": 3, "checkpointMs": 99},
        ),
        (
            {"run_id": "run-1", "turn": 0, "checkpoint_ms": 5},
            {"runId": "run-1", "turn": 0, "toolCallsCount": None, "checkpointMs": 5},
        ),
    ],
)
def test_checkpoint_json(raw: dict[str, Any] | None, expected: dict[str, Any] | None) -> None:
    assert checkpoint_json(raw) == expected


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
    assert body["lastCheckpoint"] is None and body["resumedFrom"] is None
    assert body["runStartedMs"] is None
    assert (
        state_body(
            "running",
            None,
            session="ns/s",
            epoch=3,
            identity=IdentityOptions(),
            run_started_ms=1234,
        )["runStartedMs"]
        == 1234
    )


def test_state_body_maps_the_runtime_state() -> None:
    runtime = {
        "state": "running",
        "run_id": "run-1",
        "turn": 2,
        "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15},
        "tool_calls_count": 4,
        "last_checkpoint": {"run_id": "run-1", "turn": 2, "tool_calls_count": 4, "at_ms": 99},
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
        resumed_from="run-0",
    )
    assert body["runtimeState"] == "running"
    assert (body["runId"], body["turn"], body["toolCallsCount"]) == ("run-1", 2, 4)
    assert body["usage"]["totalTokens"] == 15
    assert body["resumedFrom"] == "run-0"
    assert body["lastCheckpoint"] == {
        "runId": "run-1",
        "turn": 2,
        "toolCallsCount": 4,
        "checkpointMs": 99,
    }
    assert body["passivation"] == {
        "reason": "node_drain",
        "deadlineMs": 200,
        "requestedMs": 100,
    }


def test_the_operator_reads_the_state_body() -> None:
    """The reader of GET /v1/state (:class:`RuntimeState`, the operator's and the plugin's)
    reads what :func:`state_body` writes."""
    runtime = {
        "state": "running",
        "run_id": "run-2",
        "turn": 3,
        "usage": {"prompt_tokens": 7, "completion_tokens": 3, "total_tokens": 10},
        "tool_calls_count": 5,
        "last_checkpoint": {"run_id": "run-2", "turn": 3, "tool_calls_count": 5, "at_ms": 1234},
        "last_error": "boom",
    }
    body = state_body(
        "running",
        runtime,
        session="ns/s",
        epoch=2,
        identity=IdentityOptions(),
        passivation=Passivation("node_drain", 200, 100),
        resumed_from="run-1",
        result_text="partial answer",
    )
    read = RuntimeState.model_validate(body)
    assert (read.state, read.run_id, read.resumed_from, read.turn) == (
        "running",
        "run-2",
        "run-1",
        3,
    )
    assert read.usage.total_tokens == 10
    assert read.checkpoint.checkpoint_ms == 1234 and read.checkpoint.tool_calls_count == 5
    assert read.last_error == "boom"
    assert read.result_text == "partial answer"
    assert (read.passivation.reason, read.passivation.deadline_ms) == ("node_drain", 200)
