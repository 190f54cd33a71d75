"""Table tests for session_runtime.pod.termination (the exit JSON and exit codes)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from session_runtime.pod.termination import (
    TERMINATION_MESSAGE_LIMIT,
    TerminationMessage,
    Usage,
    render,
    validate,
    write,
)


@pytest.mark.parametrize(
    ("message", "code"),
    [
        (TerminationMessage("completed"), 0),
        (TerminationMessage("passivated"), 0),
        (TerminationMessage("failed"), 1),
        (TerminationMessage("failed", bad_input=True), 2),
        (TerminationMessage("fenced"), 3),
    ],
)
def test_exit_codes(message: TerminationMessage, code: int) -> None:
    assert message.exit_code == code


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        (None, Usage(0, 0, 0)),
        ({"prompt_tokens": 3, "completion_tokens": 4, "total_tokens": 7}, Usage(3, 4, 7)),
        ({"promptTokens": 3, "completionTokens": 4}, Usage(3, 4, 7)),
        ({"prompt_tokens": -1, "completion_tokens": True}, Usage(0, 0, 0)),
    ],
)
def test_usage_from_mapping(raw: dict[str, object] | None, expected: Usage) -> None:
    assert Usage.from_mapping(raw) == expected


def test_small_message_is_verbatim() -> None:
    msg = TerminationMessage("completed", "run-1", 3, Usage(1, 2, 3), None, "done")
    obj = json.loads(render(msg))
    assert obj == {
        "outcome": "completed",
        "runId": "run-1",
        "turn": 3,
        "usage": {"promptTokens": 1, "completionTokens": 2, "totalTokens": 3},
        "reason": None,
        "resultText": "done",
        "resumedFrom": None,
    }
    assert validate(obj) == []


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("x" * 10_000, None),
        ("é" * 5_000, "sigterm"),  # two bytes per char
        ('"\n\\' * 3_000, None),  # escapes grow in JSON
        ("🙂" * 2_000, None),  # four bytes per char
        ("short", "r" * 10_000),  # a huge error message: reason is cut too
    ],
)
def test_render_fits_the_kubernetes_limit(text: str, reason: str | None) -> None:
    out = render(TerminationMessage("failed", "run-1", 1, Usage(), reason, text))
    assert len(out.encode("utf-8")) <= TERMINATION_MESSAGE_LIMIT
    obj = json.loads(out)
    assert validate(obj) == []
    kept = obj["resultText"] if reason is None or len(reason) < 100 else obj["reason"]
    assert kept.endswith("…")
    # the budget is used: nothing was cut far more than needed
    assert len(out.encode("utf-8")) > TERMINATION_MESSAGE_LIMIT - 16


def test_write_creates_file_and_survives_bad_path(tmp_path: Path) -> None:
    target = tmp_path / "termination-log"
    text = write(target, TerminationMessage("passivated", "run-2", 4, reason="node_drain"))
    assert target.read_text() == text
    assert json.loads(text)["reason"] == "node_drain"
    write(tmp_path / "missing-dir" / "log", TerminationMessage("failed"))  # no exception


@pytest.mark.parametrize(
    ("obj", "bad"),
    [
        ({"outcome": "done"}, "outcome"),
        ({"turn": "1"}, "turn"),
        ({"usage": {"promptTokens": 1}}, "usage"),
        ({"runId": 5}, "runId"),
    ],
)
def test_validate_flags_bad_objects(obj: dict[str, object], bad: str) -> None:
    good = json.loads(render(TerminationMessage("completed")))
    assert any(bad in p for p in validate(good | obj))


def test_the_operator_reads_what_we_write() -> None:
    """Compatibility with the reader: the operator's TerminationMessage model."""
    op = pytest.importorskip("berth_operator.api.options")
    text = render(
        TerminationMessage(
            "passivated", "run-9", 4, Usage(10, 5, 15), "node_drain", "partial", "run-8"
        )
    )
    read = op.TerminationMessage.model_validate_json(text)
    assert (read.outcome, read.run_id, read.turn, read.reason) == (
        "passivated",
        "run-9",
        4,
        "node_drain",
    )
    assert (read.usage.prompt_tokens, read.usage.total_tokens) == (10, 15)
    assert read.resumed_from == "run-8"
    assert read.text == "partial"
