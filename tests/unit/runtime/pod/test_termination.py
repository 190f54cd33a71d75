"""Table tests for the termination message (berth_contract.termination: the exit JSON and exit
codes) and its writer (session_runtime.pod.termination.write)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from berth_contract.termination import (
    TERMINATION_MESSAGE_LIMIT,
    TerminationMessage,
    Usage,
    render,
    validate,
)
from session_runtime.pod.termination import write


def usage(prompt: int, completion: int, total: int) -> Usage:
    return Usage(prompt_tokens=prompt, completion_tokens=completion, total_tokens=total)


@pytest.mark.parametrize(
    ("message", "code"),
    [
        (TerminationMessage(outcome="completed"), 0),
        (TerminationMessage(outcome="passivated"), 0),
        (TerminationMessage(outcome="failed"), 1),
        (TerminationMessage(outcome="failed", bad_input=True), 2),
        (TerminationMessage(outcome="fenced"), 3),
    ],
)
def test_exit_codes(message: TerminationMessage, code: int) -> None:
    assert message.exit_code == code


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        (None, usage(0, 0, 0)),
        ({"prompt_tokens": 3, "completion_tokens": 4, "total_tokens": 7}, usage(3, 4, 7)),
        ({"promptTokens": 3, "completionTokens": 4}, usage(3, 4, 7)),
        ({"prompt_tokens": -1, "completion_tokens": True}, usage(0, 0, 0)),
    ],
)
def test_usage_from_mapping(raw: dict[str, object] | None, expected: Usage) -> None:
    assert Usage.from_mapping(raw) == expected


def test_small_message_is_verbatim() -> None:
    msg = TerminationMessage(
        outcome="completed", run_id="run-1", turn=3, usage=usage(1, 2, 3), result_text="done"
    )
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
    out = render(
        TerminationMessage(
            outcome="failed", run_id="run-1", turn=1, usage=Usage(), reason=reason, result_text=text
        )
    )
    assert len(out.encode("utf-8")) <= TERMINATION_MESSAGE_LIMIT
    obj = json.loads(out)
    assert validate(obj) == []
    kept = obj["resultText"] if reason is None or len(reason) < 100 else obj["reason"]
    assert kept.endswith("…")
    # the budget is used: nothing was cut far more than needed
    assert len(out.encode("utf-8")) > TERMINATION_MESSAGE_LIMIT - 16


def test_write_creates_file_and_survives_bad_path(tmp_path: Path) -> None:
    target = tmp_path / "termination-log"
    text = write(
        target,
        TerminationMessage(outcome="passivated", run_id="run-2", turn=4, reason="node_drain"),
    )
    assert target.read_text() == text
    assert json.loads(text)["reason"] == "node_drain"
    write(tmp_path / "missing-dir" / "log", TerminationMessage(outcome="failed"))  # no exception


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
    good = json.loads(render(TerminationMessage(outcome="completed")))
    assert any(bad in p for p in validate(good | obj))


def test_the_reader_reads_what_the_writer_writes() -> None:
    """The operator's side of the contract (:meth:`TerminationMessage.parse`) reads what
    :func:`render` writes."""
    text = render(
        TerminationMessage(
            outcome="passivated",
            run_id="run-9",
            turn=4,
            usage=usage(10, 5, 15),
            reason="node_drain",
            result_text="partial",
            resumed_from="run-8",
        )
    )
    read = TerminationMessage.parse(text)
    assert read is not None
    assert (read.outcome, read.run_id, read.turn, read.reason) == (
        "passivated",
        "run-9",
        4,
        "node_drain",
    )
    assert read.usage is not None
    assert (read.usage.prompt_tokens, read.usage.total_tokens) == (10, 15)
    assert read.resumed_from == "run-8"
    assert read.result_text == "partial"
