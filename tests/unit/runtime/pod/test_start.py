"""Table tests for session_runtime.pod.start (the pod's first step)."""

from __future__ import annotations

from typing import Any

import pytest

from session_runtime.pod.start import plan_start

DONE = {"id": "run-1", "status": "completed"}
PASSIVATED = {"id": "run-1", "status": "passivated"}
RESUMED_RUNNING = {"id": "run-2", "status": "interrupted", "resumed_from": "run-1"}
RESUMED_AGAIN = {"id": "run-3", "status": "interrupted", "resumed_from": "run-2"}
OTHER_LINE = {"id": "run-4", "status": "interrupted", "resumed_from": "run-0"}


@pytest.mark.parametrize(
    ("resume", "saved", "runs", "keep_alive", "action", "run_id"),
    [
        (None, False, [], False, "send", None),
        ("run-1", False, [], False, "send", None),  # crashed before anything was saved
        (None, True, [], False, "send", None),
        (None, True, [DONE], False, "done", "run-1"),  # never redo a finished task
        (None, True, [DONE], True, "idle", "run-1"),  # keepAlive passivated while idle
        ("run-1", True, [DONE], True, "idle", "run-1"),
        ("run-1", True, [PASSIVATED], False, "resume", "run-1"),
        (None, True, [PASSIVATED, RESUMED_RUNNING], False, "resume", "run-2"),  # newest
        # told run-1, but an earlier pod resumed it into run-2: its recorded results win
        ("run-1", True, [PASSIVATED, RESUMED_RUNNING], False, "resume", "run-2"),
        ("run-1", True, [PASSIVATED, RESUMED_RUNNING, RESUMED_AGAIN], False, "resume", "run-3"),
        ("run-1", True, [PASSIVATED, RESUMED_RUNNING, OTHER_LINE], False, "resume", "run-2"),
        ("run-9", True, [DONE], False, "resume", "run-9"),  # not retained: checkpoint decides
        (None, True, [{"status": "completed"}], False, "send", None),  # unusable record
        (None, True, [{"id": "run-3", "status": "failed"}], False, "resume", "run-3"),
    ],
)
def test_plan_start(
    resume: str | None,
    saved: bool,
    runs: list[dict[str, Any]],
    keep_alive: bool,
    action: str,
    run_id: str | None,
) -> None:
    plan = plan_start(resume, saved, runs, keep_alive)
    assert (plan.action, plan.run_id) == (action, run_id)
    assert plan.why


def test_a_descendant_without_a_checkpoint_is_skipped() -> None:
    """run-2 died before its first checkpoint: its origin run-1 still holds the state."""
    runs = [PASSIVATED, RESUMED_RUNNING]
    plan = plan_start("run-1", True, runs, False, has_checkpoint=lambda r: r != "run-2")
    assert (plan.action, plan.run_id) == ("resume", "run-1")


def test_the_newest_run_without_a_checkpoint_falls_back_to_its_origin() -> None:
    """run-2 (the newest run) was resumed from run-1 and died before its first checkpoint, after
    its record was saved: run-1 still holds the state (its unfinished round with a tool that
    ran). Starting afresh instead would ask the model for that round again and run it twice."""
    runs = [PASSIVATED, RESUMED_RUNNING]
    plan = plan_start(None, True, runs, False, has_checkpoint=lambda r: r != "run-2")
    assert (plan.action, plan.run_id) == ("resume", "run-1")
    chain = [PASSIVATED, RESUMED_RUNNING, RESUMED_AGAIN]
    plan = plan_start(None, True, chain, False, has_checkpoint=lambda r: r == "run-1")
    assert (plan.action, plan.run_id) == ("resume", "run-1")


def test_a_new_object_of_a_kept_store_sends_its_own_prompt() -> None:
    """The deleted object's completed run was left out (``inherited``): never "done" with its
    result, never "idle" on it, never resumed."""
    for keep_alive in (False, True):
        plan = plan_start(None, True, [], keep_alive, inherited=2)
        assert (plan.action, plan.run_id) == ("send", None)
        assert "kept conversation (2 earlier run(s)" in plan.why
