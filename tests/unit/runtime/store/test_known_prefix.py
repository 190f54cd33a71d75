"""Checkpoints that vouch for their prefix (``LoopCheckpoint.known_prefix``): the store journals
only the new messages without comparing the history, never keeps the caller's objects, and a
session reloaded after many such rounds rebuilds exactly the caller's history."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from session_runtime.store import FileSessionStore
from session_runtime.store import state as state_mod
from session_runtime.store.journal import read_file
from session_runtime.store.shapes import decode

from .conftest import assistant, checkpoint, tool_msg

SID = "sess-1"
RUN = "run-a"


class Writer:
    """Drives a store like the agent loop: one live message list, ``known_prefix`` = the length
    of the previous checkpoint."""

    def __init__(self, store: Any, run: str = RUN) -> None:
        self.store, self.run = store, run
        self.messages: list[dict[str, Any]] = [{"role": "system", "content": "sys"}]
        self.synced = 0
        self.turn = 0

    def round(self, output: str | None = None) -> None:
        self.turn += 1
        t, call = self.turn, f"c{self.turn}"
        a = assistant(t, (call, "bash", f'{{"command": "echo {t}"}}'))
        out = output if output is not None else f"out {t}"
        self.store.begin_round(SID, self.run, t, a)
        self.store.record_tool_result(SID, self.run, t, call, {"output": out, "exit_code": 0})
        self.messages += [a, tool_msg(call, out)]
        cp = checkpoint(SID, self.run, t, self.messages, known_prefix=self.synced)
        self.store.commit_round(cp)
        self.synced = len(self.messages)


def commits(root: Path) -> list[dict[str, Any]]:
    d = root / SID
    out = []
    for p in sorted(d.glob("journal-*.rec")):
        out += [r for r in map(decode, read_file(p).payloads) if r["t"] == "commit"]
    return out


def test_a_session_reloaded_after_1000_rounds_rebuilds_the_same_history(tmp_path: Path) -> None:
    store = FileSessionStore(tmp_path, epoch=1, fsync=False, snapshot_min_bytes=16 * 1024)
    w = Writer(store)
    for _ in range(1000):
        w.round()
    assert len(w.messages) == 2001
    # Compactions happened on the way, so the reload reads a snapshot and a journal.
    assert store.read_state(SID) is not None
    assert store.load_checkpoint(SID, RUN).messages == w.messages  # type: ignore[union-attr]
    store.close()
    for epoch in (1, 2):  # restarted in place, then a new placement
        again = FileSessionStore(tmp_path, epoch=epoch, fsync=False)
        cp = again.load_checkpoint(SID, RUN)
        assert cp is not None and cp.turn == 1000 and cp.messages == w.messages
        again.close()


def test_vouched_rounds_journal_only_new_messages_and_never_compare_the_history(
    store: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    compared: list[int] = []
    real = state_mod._is_prefix

    def counting(head: list[dict[str, Any]], messages: list[dict[str, Any]]) -> bool:
        compared.append(len(head))
        return real(head, messages)

    monkeypatch.setattr(state_mod, "_is_prefix", counting)
    w = Writer(store)
    for _ in range(50):
        w.round()
    assert compared == []  # O(new messages) per round, whatever the history's length
    assert store.load_checkpoint(SID, RUN).messages == w.messages
    if isinstance(store, FileSessionStore):
        recs = commits(tmp_path / "store")
        assert [(r["keep"], len(r["append"])) for r in recs[1:]] == [
            (1 + 2 * t, 2) for t in range(1, 50)
        ]


def test_a_wrong_promise_is_caught_at_the_prefix_end_and_the_history_compared(
    store: Any, tmp_path: Path
) -> None:
    w = Writer(store)
    for _ in range(3):
        w.round()
    # The caller edited the last vouched message in place and still vouches for the prefix.
    w.messages[-1]["content"] = "edited after the commit"
    w.round()
    assert store.load_checkpoint(SID, RUN).messages == w.messages
    # A promise longer than the previous checkpoint is not believed either.
    w.synced += 2
    w.round()
    assert store.load_checkpoint(SID, RUN).messages == w.messages
    if isinstance(store, FileSessionStore):
        keeps = [r["keep"] for r in commits(tmp_path / "store")]
        assert keeps == [0, 3, 5, 0, 9]  # the two broken promises wrote whole records


def test_the_store_keeps_no_object_of_the_caller(store: Any) -> None:
    w = Writer(store)
    w.round()
    w.round()
    w.messages[1]["content"] = "changed in place"
    w.messages.append({"role": "user", "content": "appended, never committed"})
    cp = store.load_checkpoint(SID, RUN)
    assert cp.messages[1]["content"] is None and len(cp.messages) == 5


def test_a_masked_history_still_journals_only_new_messages(store: Any, tmp_path: Path) -> None:
    w = Writer(store)
    w.round("OPENAI_API_KEY=sk-abcdefghijklmnopqrstuvwxyz")
    for _ in range(3):
        w.round()
    stored = store.load_checkpoint(SID, RUN).messages
    assert "sk-abc" not in str(stored) and "[REDACTED]" in stored[2]["content"]
    assert stored[3:] == w.messages[3:]
    if isinstance(store, FileSessionStore):
        assert [r["keep"] for r in commits(tmp_path / "store")] == [0, 3, 5, 7]
