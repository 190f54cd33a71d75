"""Which journal appends are fdatasync'ed: every record, except the result that completes its
round, which is made durable by the round's commit (the next write of the agent loop)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from session_runtime.store import FileSessionStore

from .conftest import assistant, checkpoint, tool_msg

SID = "sess-1"
RUN = "run-a"


@pytest.fixture
def syncs(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    calls: list[int] = []
    real = os.fdatasync

    def counting(fd: int) -> None:
        calls.append(fd)
        real(fd)

    monkeypatch.setattr(os, "fdatasync", counting)
    return calls


def test_a_one_call_round_has_two_durability_points(tmp_path: Path, syncs: list[int]) -> None:
    store = FileSessionStore(tmp_path, epoch=1)
    store.acquire(SID)
    a = assistant(1, ("c1", "bash", "{}"))
    per_step = []
    store.begin_round(SID, RUN, 1, a)
    per_step.append(len(syncs))
    store.record_tool_result(SID, RUN, 1, "c1", {"output": "ok", "exit_code": 0})
    per_step.append(len(syncs))
    # Written though not yet synced: a process that dies here leaves it for the next owner.
    pending = FileSessionStore(tmp_path, epoch=1).load_pending_round(SID, RUN)
    assert pending is not None and list(pending.results) == ["c1"]
    store.commit_round(checkpoint(SID, RUN, 1, [a, tool_msg("c1", "ok")]))
    per_step.append(len(syncs))
    assert per_step == [1, 1, 2]


def test_results_that_leave_calls_outstanding_are_synced_at_once(
    tmp_path: Path, syncs: list[int]
) -> None:
    store = FileSessionStore(tmp_path, epoch=1)
    store.acquire(SID)
    a = assistant(1, ("c1", "bash", "{}"), ("c2", "read", "{}"), ("c3", "ls", "{}"))
    store.begin_round(SID, RUN, 1, a)
    after: list[int] = []
    for call in ("c2", "c1", "c3"):  # completion order, not call order
        store.record_tool_result(SID, RUN, 1, call, {"output": call, "exit_code": 0})
        after.append(len(syncs))
    assert after == [2, 3, 3]  # the last one rides on the commit
    msgs: list[dict[str, Any]] = [a, *(tool_msg(c, c) for c in ("c1", "c2", "c3"))]
    store.commit_round(checkpoint(SID, RUN, 1, msgs))
    assert len(syncs) == 4


def test_closing_the_store_syncs_a_result_no_commit_followed(
    tmp_path: Path, syncs: list[int]
) -> None:
    store = FileSessionStore(tmp_path, epoch=1)
    store.acquire(SID)
    store.begin_round(SID, RUN, 1, assistant(1, ("c1", "bash", "{}")))
    store.record_tool_result(SID, RUN, 1, "c1", {"output": "ok", "exit_code": 0})
    before = len(syncs)
    store.close()
    assert len(syncs) == before + 1
    again = FileSessionStore(tmp_path, epoch=2).load_pending_round(SID, RUN)
    assert again is not None and again.results["c1"]["output"] == "ok"


def test_compaction_due_on_the_rounds_last_result_waits_for_the_commit(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A snapshot must not be written while the round's last result is not yet durable: the
    commit is the round's durability point (and its lease checks cover the result), so the
    compaction that the result made due runs after the commit, from a fully synced journal."""
    store = FileSessionStore(tmp_path, epoch=1, snapshot_min_bytes=1024)
    store.acquire(SID)
    unsynced_at_rotation: list[bool] = []
    real_rotate = FileSessionStore._rotate

    def rotate(self: FileSessionStore, session_id: str, w: Any, seq: int) -> None:
        unsynced_at_rotation.append(w.journal is not None and w.journal.unsynced)
        real_rotate(self, session_id, w, seq)

    monkeypatch.setattr(FileSessionStore, "_rotate", rotate)

    def snapshots() -> list[str]:
        return sorted(p.name for p in (tmp_path / SID).glob("snapshot-*"))

    a = assistant(1, ("c1", "bash", "{}"))
    store.begin_round(SID, RUN, 1, a)
    before = snapshots()
    big = "x" * 4096  # the result alone crosses the compaction threshold
    store.record_tool_result(SID, RUN, 1, "c1", {"output": big, "exit_code": 0})
    assert snapshots() == before  # due, but not before the commit
    store.commit_round(checkpoint(SID, RUN, 1, [a, tool_msg("c1", big)]))
    after = snapshots()
    assert after != before and len(after) == 1  # compacted after the commit, old pair removed
    assert unsynced_at_rotation and not any(unsynced_at_rotation)
    fresh = FileSessionStore(tmp_path, epoch=2)
    cp = fresh.load_checkpoint(SID, RUN)
    assert cp is not None and cp.turn == 1 and cp.messages[-1]["content"] == big
    assert fresh.load_pending_round(SID, RUN) is None
