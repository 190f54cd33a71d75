"""LoopCheckpoint / WorkflowCheckpoint parsing and ``ensure_loadable`` (A3S contract messages)."""

from __future__ import annotations

from typing import Any

import pytest

from session_runtime.errors import CheckpointError
from session_runtime.store import LoopCheckpoint, WorkflowCheckpoint

from .conftest import checkpoint


def test_loop_checkpoint_round_trips() -> None:
    cp = checkpoint("s", "run-1", 2, [{"role": "user", "content": "hi"}])
    assert LoopCheckpoint.from_dict(cp.to_dict()) == cp
    assert list(cp.to_dict()) == [
        "schema_version",
        "run_id",
        "session_id",
        "turn",
        "messages",
        "total_usage",
        "tool_calls_count",
        "checkpoint_ms",
    ]


@pytest.mark.parametrize("version", [2, 7])
def test_newer_loop_schema_refused(version: int) -> None:
    data = {"schema_version": version, "run_id": "run-x", "whatever": "shape"}
    with pytest.raises(CheckpointError) as err:
        LoopCheckpoint.from_dict(data)
    assert str(err.value).startswith(
        f"loop checkpoint for run run-x has schema version {version} but this build supports "
        "at most 1; "
    )
    cp = checkpoint("s", "run-x", 1, [], schema_version=version)
    with pytest.raises(CheckpointError, match="supports at most 1; "):
        cp.ensure_loadable()


@pytest.mark.parametrize("version", [0, -1, "1", None, True])
def test_invalid_loop_schema_refused(version: Any) -> None:
    with pytest.raises(CheckpointError, match="invalid schema version"):
        LoopCheckpoint.from_dict({"schema_version": version, "run_id": "r"})


@pytest.mark.parametrize(
    ("data", "needle"),
    [
        ("not a dict", "expected an object"),
        ({"schema_version": 1, "run_id": "r"}, "is unreadable: session_id: Field required"),
        (
            {**checkpoint("s", "r", 1, []).to_dict(), "turn": "3"},
            "is unreadable: turn: Input should be a valid integer",
        ),
        ({**checkpoint("s", "r", 1, []).to_dict(), "turn": -1}, "turn: Input should be greater"),
        ({**checkpoint("s", "r", 1, []).to_dict(), "messages": {}}, "messages: Input should be"),
    ],
)
def test_corrupt_loop_checkpoint_refused_with_message(data: Any, needle: str) -> None:
    with pytest.raises(CheckpointError, match=needle.replace("(", r"\(")):
        LoopCheckpoint.from_dict(data)


def test_checkpoint_of_another_session_refused() -> None:
    cp = checkpoint("sess-a", "run-1", 1, [])
    cp.ensure_session("sess-a")
    with pytest.raises(
        CheckpointError, match="loop checkpoint for run run-1 belongs to session 'sess-a', not 'b'"
    ):
        cp.ensure_session("b")


def test_workflow_checkpoint_round_trips_and_refuses_newer() -> None:
    wf = WorkflowCheckpoint(workflow_id="wf", steps=[{"id": "a"}], checkpoint_ms=3)
    assert WorkflowCheckpoint.from_dict(wf.to_dict()) == wf
    assert list(wf.to_dict()) == ["schema_version", "workflow_id", "steps", "checkpoint_ms"]
    with pytest.raises(CheckpointError) as err:
        WorkflowCheckpoint.from_dict({**wf.to_dict(), "schema_version": 2})
    assert str(err.value).startswith(
        "workflow checkpoint for workflow wf has schema version 2 but this build "
        "supports at most 1; "
    )
    with pytest.raises(CheckpointError, match="steps: Input should be a valid list"):
        WorkflowCheckpoint.from_dict({**wf.to_dict(), "steps": "x"})
