"""Passivation and resume on another process through the file store (docs/architecture.md §8): a
session asked to passivate mid-run lets its running tool finish, checkpoints at a round boundary
(no pending round left behind), ends the run as passivated; a process with the next epoch resumes
the run with ``resume_run`` and finishes it with counts carried forward; nothing runs twice."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from session_runtime.store import FileSessionStore

from .harness import bash_turn, child_job, scripted_server, zygote

pytestmark = pytest.mark.timeout(300)

SID = "passivate-1"
ROUNDS = 12


def test_passivate_then_resume_elsewhere(tmp_path: Path) -> None:
    store_dir, ws = tmp_path / "store", tmp_path / "ws"
    ws.mkdir()
    turns: list[dict[str, Any]] = [bash_turn(f"call-{i}", linger_s=0.05) for i in range(ROUNDS)]
    script = {"turns": [*turns, {"text": "all done"}], "on_exhausted": "repeat_last"}

    def job(epoch: int, name: str, **extra: Any) -> dict[str, Any]:
        return child_job(tmp_path, SID, srv.base_url, epoch, name, "passivation test", **extra)

    with scripted_server(script) as srv, zygote() as z:
        assert z.run(job(1, "first", passivate_after=4)) == 0, (tmp_path / "first.log").read_text()
        first = json.loads((tmp_path / "first.json").read_text())
        assert first["passivation"]["outcome"] == "passivated", first
        passivated_run = first["passivation"]["run_id"]
        turn = first["passivation"]["turn"]
        assert 4 <= turn < ROUNDS

        store = FileSessionStore(store_dir, epoch=1)
        cp = store.load_checkpoint(SID, passivated_run)
        assert cp is not None and cp.turn == turn  # the checkpoint is the returned boundary
        assert store.load_pending_round(SID, passivated_run) is None  # nothing left mid-round
        data = store.load_session(SID)
        assert data is not None
        assert [r["status"] for r in data["runs"]] == ["passivated"]

        assert z.run(job(2, "second")) == 0, (tmp_path / "second.log").read_text()
    second = json.loads((tmp_path / "second.json").read_text())
    assert second["action"] == "resume" and second["from"] == passivated_run
    assert second["text"] == "all done"
    # Every call the model asked for ran exactly once, before or after the move, and the count
    # carried forward matches. (The model turn in flight at passivation was abandoned, so the
    # scripted model may have skipped one turn: it had no side effect.)
    resumed = FileSessionStore(store_dir, epoch=2).load_checkpoint(SID, second["run_id"])
    assert resumed is not None
    asked = [m["tool_call_id"] for m in resumed.messages if m.get("role") == "tool"]
    assert second["tool_calls_count"] == resumed.tool_calls_count == len(asked) >= ROUNDS - 1
    ran = Counter((ws / "side.txt").read_text().split())
    assert ran == Counter(asked)
    assert all(n == 1 for n in ran.values())
    final = FileSessionStore(store_dir, epoch=2).load_session(SID)
    assert final is not None
    assert [r["status"] for r in final["runs"]] == ["passivated", "completed"]
    assert final["runs"][1]["id"] == second["run_id"] != passivated_run
