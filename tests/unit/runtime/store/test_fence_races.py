"""A writer that loses its lease anywhere inside a tool round never completes the round, and
nothing it writes after the loss becomes visible to the new owner.

The lease is checked before and after each durability point (the intent; the commit, which
also makes the round's last result durable), not around the result that only rides on the
commit. Each case below lets a newer epoch (or a rival writer of the same epoch) take the
session over at one point of a one-call round: just before a step is called, just before its
record is appended, or just after.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from session_runtime.errors import FencedError
from session_runtime.store import FileSessionStore, fence, shapes
from session_runtime.store import journal as journal_mod
from session_runtime.store.layout import LEASE_DIR

from .conftest import assistant, checkpoint, tool_msg

SID, RUN = "s1", "run-1"
STEPS = ("begin", "result", "commit")
#: Where the takeover lands, relative to a step.
WHEN = ("before the call", "before the append", "after the append")
#: The step that must raise ``FencedError`` for a takeover at (step, when). The result alone is
#: not a durability point: the commit after it refuses the round.
RAISES = {
    ("begin", "before the call"): "begin",
    ("begin", "before the append"): "begin",
    ("begin", "after the append"): "begin",
    ("result", "before the call"): "commit",
    ("result", "before the append"): "commit",
    ("result", "after the append"): "commit",
    ("commit", "before the call"): "commit",
    ("commit", "before the append"): "commit",
    ("commit", "after the append"): "commit",
}


def view(store: FileSessionStore) -> tuple[Any, Any]:
    """What ``store`` shows of the run: (checkpoint turn and messages, pending round)."""
    cp = store.load_checkpoint(SID, RUN)
    pending = store.load_pending_round(SID, RUN)
    return (
        None if cp is None else (cp.turn, cp.messages),
        None if pending is None else (pending.turn, pending.results),
    )


class Round:
    """One one-call round of the stale writer, step by step."""

    def __init__(self, store: FileSessionStore, msgs: list[dict[str, Any]], turn: int) -> None:
        self.store, self.msgs, self.turn = store, msgs, turn
        self.call = f"c{turn}"
        self.amsg = assistant(turn, (self.call, "bash", f'{{"command": "echo {turn}"}}'))

    def step(self, name: str) -> None:
        s, t = self.store, self.turn
        if name == "begin":
            s.begin_round(SID, RUN, t, self.amsg)
        elif name == "result":
            s.record_tool_result(SID, RUN, t, self.call, {"output": f"out {t}", "exit_code": 0})
        else:
            msgs = [*self.msgs, self.amsg, tool_msg(self.call, f"out {t}")]
            s.commit_round(checkpoint(SID, RUN, t, msgs, known_prefix=len(self.msgs)))
            self.msgs[:] = msgs

    def run(self, before_call: Callable[[str], None] = lambda _: None) -> str | None:
        """Run the steps in order; returns the step that raised ``FencedError``, or None."""
        for name in STEPS:
            before_call(name)
            try:
                self.step(name)
            except FencedError:
                return name
        return None


def stale_writer(root: Path) -> tuple[FileSessionStore, list[dict[str, Any]]]:
    """An epoch-1 writer that completed two rounds."""
    store = FileSessionStore(root, epoch=1)
    msgs: list[dict[str, Any]] = [{"role": "user", "content": "go"}]
    for turn in (1, 2):
        assert Round(store, msgs, turn).run() is None
    return store, msgs


def on_append(
    monkeypatch: pytest.MonkeyPatch, kind: str, when: str, action: Callable[[], None]
) -> None:
    """Run ``action`` once, just before or just after the first append of a ``kind`` record."""
    done: list[bool] = []
    for method in ("append", "append_unsynced"):
        real = getattr(journal_mod.JournalWriter, method)

        def wrapped(self: Any, payload: bytes, _real: Any = real) -> int:
            mine = not done and shapes.decode(payload)["t"] == kind
            if mine and when == "before the append":
                done.append(True)
                action()
            n = int(_real(self, payload))
            if mine and when == "after the append":
                done.append(True)
                action()
            return n

        monkeypatch.setattr(journal_mod.JournalWriter, method, wrapped)


@pytest.mark.parametrize("when", WHEN)
@pytest.mark.parametrize("step", STEPS)
def test_a_newer_epoch_taking_over_inside_a_round_refuses_the_stale_round(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, step: str, when: str
) -> None:
    old, msgs = stale_writer(tmp_path)
    new = FileSessionStore(tmp_path, epoch=2)
    seen: list[tuple[Any, Any]] = []

    def take_over() -> None:
        new.acquire(SID)  # claims the lease, reads, writes its takeover snapshot
        seen.append(view(new))

    if when == "before the call":
        raised = Round(old, msgs, 3).run(lambda name: take_over() if name == step else None)
    else:
        on_append(monkeypatch, step, when, take_over)
        raised = Round(old, msgs, 3).run()
    monkeypatch.undo()

    assert len(seen) == 1
    assert raised == RAISES[step, when]  # the round is refused; commit never returned
    with pytest.raises(FencedError):  # and the stale writer stays fenced
        old.save_session(SID, {"late": True})
    # Nothing the stale writer wrote after the takeover is visible to any newer epoch.
    at_takeover = seen[0]
    for reader in (new, FileSessionStore(tmp_path, epoch=2), FileSessionStore(tmp_path, epoch=3)):
        assert view(reader) == at_takeover
        assert reader.load_session(SID) is None
    # The new owner resumes from what was durable when it took over.
    cp, pending = at_takeover
    assert cp is not None and cp[0] == (3 if (step, when) == ("commit", "after the append") else 2)
    if step == "begin" and when != "after the append":
        assert pending is None  # the intent was appended after the takeover: never seen
    elif cp[0] == 2:
        assert pending is not None and pending[0] == 3
        result_written = step == "commit" or (step, when) == ("result", "after the append")
        assert list(pending[1]) == (["c3"] if result_written else [])


@pytest.mark.parametrize("step", STEPS)
def test_a_rival_writer_of_the_same_epoch_refuses_the_stale_round(
    tmp_path: Path, step: str
) -> None:
    old, msgs = stale_writer(tmp_path)

    def rival(name: str) -> None:
        if name == step:  # another writer of epoch 1 now holds the lease file
            lease = tmp_path / SID / LEASE_DIR / "0000000001"
            lease.write_text("otherhost/1/1/feedface")

    assert Round(old, msgs, 3).run(rival) == ("begin" if step == "begin" else "commit")
    cp = FileSessionStore(tmp_path, epoch=1).load_checkpoint(SID, RUN)
    assert cp is not None and cp.turn == 2


def test_the_lease_is_checked_around_each_durability_point_only(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    old, msgs = stale_writer(tmp_path)
    events: list[str] = []
    real_check, real_sync = fence.check, os.fdatasync

    def check(*a: Any, **k: Any) -> None:
        events.append("check")
        real_check(*a, **k)

    def sync(fd: int) -> None:
        events.append("sync")
        real_sync(fd)

    monkeypatch.setattr(fence, "check", check)
    monkeypatch.setattr(os, "fdatasync", sync)
    marks: list[int] = []
    assert Round(old, msgs, 3).run(lambda _: marks.append(len(events))) is None
    monkeypatch.undo()
    ends = [*marks[1:], len(events)]
    begin, result, commit = (events[a:b] for a, b in zip(marks, ends, strict=True))
    assert begin == ["check", "sync", "check"]
    assert result == []  # written, not synced: the commit's checks and sync cover it
    assert commit == ["check", "sync", "check"]
