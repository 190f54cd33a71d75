"""Incarnations of a kept session directory: a new AgentSession object of the same name never
reuses an old epoch, never takes the deleted object's runs as its own, and a pod of the deleted
object is refused."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from session_runtime.errors import FencedError, StoreError
from session_runtime.store import FileSessionStore
from session_runtime.store.ids import InvalidIdError
from session_runtime.store.incarnation import open_incarnation, record_inherited

OLD, NEW = "uid-old", "uid-new"


def _claim(root: Path, epoch: int) -> FileSessionStore:
    store = FileSessionStore(str(root), epoch=epoch)
    store.acquire("s0")
    return store


def test_first_object_starts_at_zero_and_inherits_nothing(tmp_path: Path) -> None:
    inc = open_incarnation(tmp_path / "s0", OLD)
    assert (inc.base_epoch, inc.inherited_runs, inc.earlier) == (0, (), False)
    assert inc.store_epoch(3) == 3
    runs = [{"id": "run-1"}]
    assert inc.own_runs(runs) == runs
    assert open_incarnation(tmp_path / "s0", OLD) == inc  # idempotent


def test_a_later_object_starts_above_every_old_epoch_and_fences_the_old_pods(
    tmp_path: Path,
) -> None:
    session_dir = tmp_path / "s0"
    old = open_incarnation(session_dir, OLD)
    old_store = _claim(tmp_path, old.store_epoch(5))  # the deleted object reached epoch 5
    old_store.save_session("s0", {"messages": []})

    new = open_incarnation(session_dir, NEW)
    assert new.earlier and new.base_epoch == 5 and new.inherited_runs is None
    assert new.own_runs([{"id": "run-1"}]) == []  # unknown yet: nothing is its own
    _claim(tmp_path, new.store_epoch(1))  # placement epoch 1 of the new object: store epoch 6

    with pytest.raises(FencedError):  # the old object's pod still running is fenced
        old_store.save_session("s0", {"messages": ["late"]})
    with pytest.raises(FencedError, match="newer AgentSession"):  # and may not start again
        open_incarnation(session_dir, OLD)


def test_inherited_runs_are_recorded_once_and_left_out(tmp_path: Path) -> None:
    session_dir = tmp_path / "s0"
    open_incarnation(session_dir, OLD)
    new = open_incarnation(session_dir, NEW)
    new = record_inherited(session_dir, new, ["run-1", "run-2"])
    assert new.inherited_runs == ("run-1", "run-2")
    runs = [{"id": "run-1"}, {"id": "run-2"}, {"id": "run-3"}]
    assert new.own_runs(runs) == [{"id": "run-3"}]
    # a second pod of the new object (after a crash) reads the same list, not the store's now
    again = open_incarnation(session_dir, NEW)
    assert record_inherited(session_dir, again, ["run-1", "run-2", "run-3"]).inherited_runs == (
        "run-1",
        "run-2",
    )


def test_each_later_object_is_above_the_previous_even_without_writes(tmp_path: Path) -> None:
    session_dir = tmp_path / "s0"
    bases = [open_incarnation(session_dir, f"uid-{i}").base_epoch for i in range(3)]
    assert bases == [0, 1, 2]
    with pytest.raises(FencedError):
        open_incarnation(session_dir, "uid-1")


def test_a_damaged_record_and_an_unsafe_uid_are_refused(tmp_path: Path) -> None:
    session_dir = tmp_path / "s0"
    with pytest.raises(InvalidIdError):
        open_incarnation(session_dir, "../escape")
    open_incarnation(session_dir, OLD)
    (session_dir / "owners" / f"{OLD}.json").write_text(json.dumps({"uid": OLD}))
    with pytest.raises(StoreError, match="not an incarnation record"):
        open_incarnation(session_dir, OLD)
