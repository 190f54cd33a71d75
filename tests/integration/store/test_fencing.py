"""Epoch fencing across processes (docs/architecture.md §6): a session process with epoch E runs; a
process with epoch E+1 takes the session over; E exits as fenced at its next write; E+1 never
loads anything E wrote after the takeover, resumes the run and finishes it; no tool runs twice.
"""

from __future__ import annotations

import json
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from session_runtime.errors import FencedError
from session_runtime.store import FileSessionStore

from .child import EXIT_FENCED
from .harness import bash_turn, child_job, scripted_server, summarize, zygote

pytestmark = pytest.mark.timeout(300)

SID = "fence-1"
E = 5


def wait_for(cond: Any, what: str, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.01)


def turn_of(store_dir: Path, epoch: int) -> int:
    store = FileSessionStore(store_dir, epoch=epoch)
    turns = [
        cp.turn for run in store.run_ids(SID) if (cp := store.load_checkpoint(SID, run)) is not None
    ]
    return max(turns, default=0)


def test_newer_epoch_fences_older_and_never_reads_its_late_writes(tmp_path: Path) -> None:
    store_dir, ws = tmp_path / "store", tmp_path / "ws"
    ws.mkdir()
    turns: list[dict[str, Any]] = [bash_turn(f"call-{i}", linger_s=0.1) for i in range(30)]
    script = {"turns": [*turns, {"text": "finished"}], "on_exhausted": "repeat_last"}

    def job(epoch: int, name: str, **extra: Any) -> dict[str, Any]:
        return child_job(
            tmp_path,
            SID,
            srv.base_url,
            epoch,
            name,
            "fencing test",
            snapshot_min_bytes=4096,
            **extra,
        )

    with scripted_server(script) as srv, zygote() as z:
        old = z.spawn(job(E, "old"))
        wait_for(lambda: turn_of(store_dir, E) >= 3, "the old epoch to commit 3 rounds")

        takeover_file, go_file = tmp_path / "takeover.json", tmp_path / "go"
        new = z.spawn(job(E + 1, "new", takeover_file=str(takeover_file), go_file=str(go_file)))
        wait_for(takeover_file.exists, "the new epoch's takeover")
        taken_over = json.loads(takeover_file.read_text())

        # E stops at its next write and reports fenced.
        status = z.wait(old)
        log = (tmp_path / "old.log").read_text()
        assert status == EXIT_FENCED, log
        assert f"fenced: session '{SID}' is fenced: epoch {E + 1} has taken it over" in log

        # Whatever E wrote after the takeover is in epoch-E files that no loader >= E+1 reads.
        late = summarize(FileSessionStore(store_dir, epoch=E), SID)
        for epoch in (E + 1, E + 2):
            assert summarize(FileSessionStore(store_dir, epoch=epoch), SID) == taken_over
        print(f"\nfencing: took over at {taken_over}; epoch {E} view afterwards {late}")

        go_file.touch()  # E+1 resumes the run and finishes it
        assert z.wait(new) == 0, (tmp_path / "new.log").read_text()

    result = json.loads((tmp_path / "new.json").read_text())
    assert result["action"] == "resume" and result["text"] == "finished"
    ran = Counter((ws / "side.txt").read_text().split())
    assert all(n == 1 for n in ran.values()), ran
    final = FileSessionStore(store_dir, epoch=E + 1)
    assert final.highest_epoch(SID) == E + 1
    data = final.load_session(SID)
    assert data is not None and data["runs"][-1]["status"] == "completed"
    with pytest.raises(FencedError):
        FileSessionStore(store_dir, epoch=E).save_session(SID, {})
