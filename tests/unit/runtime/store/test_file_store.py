"""FileSessionStore specifics: layout, journal deltas, compaction, torn tails, corruption,
takeover snapshots and epoch fencing inside one process (docs/architecture.md §6)."""

from __future__ import annotations

import json
import os
import threading
from pathlib import Path
from typing import Any

import pytest

from session_runtime.errors import CheckpointError, FencedError, StoreError
from session_runtime.store import FileSessionStore
from session_runtime.store import fence as fence_mod
from session_runtime.store.journal import frame, read_file

from .conftest import assistant, checkpoint, tool_msg

SID = "sess-1"
RUN = "run-a"


def do_round(
    store: FileSessionStore, msgs: list[dict[str, Any]], turn: int, run: str = RUN
) -> None:
    a = assistant(turn, (f"c{turn}", "bash", f'{{"command": "echo {turn}"}}'))
    store.begin_round(SID, run, turn, a)
    store.record_tool_result(SID, run, turn, f"c{turn}", {"output": f"out {turn}", "exit_code": 0})
    msgs += [a, tool_msg(f"c{turn}", f"out {turn}")]
    store.commit_round(checkpoint(SID, run, turn, list(msgs)))


def files(root: Path, sid: str = SID) -> list[str]:
    d = root / sid
    return sorted(p.name for p in d.iterdir() if p.is_file())


def journal_of(root: Path) -> Path:
    (name,) = [n for n in files(root) if n.startswith("journal-")]
    return root / SID / name


def test_layout_names_carry_epoch_and_sequence(tmp_path: Path) -> None:
    store = FileSessionStore(tmp_path, epoch=7)
    store.save_session(SID, {"x": 1})
    assert files(tmp_path) == [
        "journal-0000000007-0000000000.rec",
        "snapshot-0000000007-0000000000.rec",
    ]
    assert sorted(os.listdir(tmp_path / SID / "lease")) == ["0000000007"]
    assert store.highest_epoch(SID) == 7 and not store.is_fenced(SID)
    assert store.list_sessions() == [SID]


def test_round_costs_stay_flat_as_the_session_ages(tmp_path: Path) -> None:
    """Bytes appended per round do not grow with the number of earlier rounds."""
    store = FileSessionStore(tmp_path, epoch=1, fsync=False, snapshot_min_bytes=10**9)
    msgs: list[dict[str, Any]] = [{"role": "user", "content": "go"}]
    sizes = []
    store.acquire(SID)
    for turn in range(1, 301):
        before = journal_of(tmp_path).stat().st_size
        do_round(store, msgs, turn)
        sizes.append(journal_of(tmp_path).stat().st_size - before)
    # turn numbers grow in digits (1 -> 300), everything else is constant
    assert max(sizes[100:]) - min(sizes[9:]) <= 30
    fresh = FileSessionStore(tmp_path, epoch=1).load_checkpoint(SID, RUN)
    assert fresh is not None and fresh.messages == msgs and fresh.turn == 300


def test_compaction_bounds_the_journal_and_keeps_state(tmp_path: Path) -> None:
    store = FileSessionStore(tmp_path, epoch=1, fsync=False, snapshot_min_bytes=2048)
    msgs: list[dict[str, Any]] = [{"role": "user", "content": "go"}]
    for turn in range(1, 201):
        do_round(store, msgs, turn)
        names = files(tmp_path)
        assert len(names) == 2, names  # one snapshot + its journal
        snap = tmp_path / SID / names[1]
        assert journal_of(tmp_path).stat().st_size <= max(2048, snap.stat().st_size) + 1024
    seq = int(files(tmp_path)[1].split("-")[2].split(".")[0])
    assert 3 < seq < 60  # compacted, geometrically rather than every round
    cp = FileSessionStore(tmp_path, epoch=1).load_checkpoint(SID, RUN)
    assert cp is not None and cp.turn == 200 and cp.messages == msgs


def test_torn_tail_is_ignored(tmp_path: Path) -> None:
    store = FileSessionStore(tmp_path, epoch=1)
    msgs: list[dict[str, Any]] = [{"role": "user", "content": "go"}]
    do_round(store, msgs, 1)
    store.begin_round(SID, RUN, 2, assistant(2, ("c2", "bash", "{}")))
    store.close()
    path = journal_of(tmp_path)
    data = path.read_bytes()
    last = data.rstrip(b"\n").rfind(b"\n") + 1
    for cut in (len(data) - 1, last + 5, last + 9, last + 1):  # tear the begin record
        path.write_bytes(data[:cut])
        loaded = FileSessionStore(tmp_path, epoch=1).read_state(SID)
        assert loaded is not None and loaded.torn_bytes == cut - last
        reader = FileSessionStore(tmp_path, epoch=1)
        assert reader.load_pending_round(SID, RUN) is None
        assert reader.load_checkpoint(SID, RUN) == checkpoint(SID, RUN, 1, msgs)
    path.write_bytes(data + b"\x00" * 100)  # zero-filled tail after a power loss
    pending = FileSessionStore(tmp_path, epoch=1).load_pending_round(SID, RUN)
    assert pending is not None and pending.turn == 2


def test_reopening_after_a_crash_never_appends_behind_a_torn_tail(tmp_path: Path) -> None:
    store = FileSessionStore(tmp_path, epoch=1)
    msgs: list[dict[str, Any]] = [{"role": "user", "content": "go"}]
    do_round(store, msgs, 1)
    store.close()
    path = journal_of(tmp_path)
    path.write_bytes(path.read_bytes()[:-7])  # the commit of round 1 is torn
    again = FileSessionStore(tmp_path, epoch=1)
    pending = again.load_pending_round(SID, RUN)
    assert pending is not None and set(pending.results) == {"c1"}
    do_round(again, msgs[:1], 1)  # the loop redoes the commit
    assert files(tmp_path) == [
        "journal-0000000001-0000000001.rec",
        "snapshot-0000000001-0000000001.rec",
    ]
    assert FileSessionStore(tmp_path, epoch=1).load_checkpoint(SID, RUN) is not None


def test_damaged_record_followed_by_valid_ones_is_corruption(tmp_path: Path) -> None:
    store = FileSessionStore(tmp_path, epoch=1)
    msgs: list[dict[str, Any]] = [{"role": "user", "content": "go"}]
    do_round(store, msgs, 1)
    store.close()
    path = journal_of(tmp_path)
    data = bytearray(path.read_bytes())
    data[12] ^= 0x01  # flip a bit inside the first record
    path.write_bytes(bytes(data))
    with pytest.raises(CheckpointError, match=r"is corrupt at byte 0: a damaged record"):
        FileSessionStore(tmp_path, epoch=1).load_checkpoint(SID, RUN)


def test_damaged_snapshot_is_refused_with_a_message(tmp_path: Path) -> None:
    FileSessionStore(tmp_path, epoch=1).save_session(SID, {"x": 1})
    (snap,) = (tmp_path / SID).glob("snapshot-*")
    snap.write_bytes(snap.read_bytes()[:-3])
    with pytest.raises(CheckpointError, match="is damaged"):
        FileSessionStore(tmp_path, epoch=1).load_session(SID)
    snap.write_bytes(frame(b'{"t":"snapshot","session":"sess-1","epoch":1,"seq":0,"state":{}}'))
    with pytest.raises(CheckpointError, match="unreadable: session: Field required"):
        FileSessionStore(tmp_path, epoch=1).load_session(SID)
    snap.write_bytes(frame(b"not json"))
    with pytest.raises(CheckpointError, match="not JSON"):
        FileSessionStore(tmp_path, epoch=1).load_session(SID)


def test_checkpoint_of_another_session_is_refused(tmp_path: Path) -> None:
    store = FileSessionStore(tmp_path, epoch=1)
    do_round(store, [{"role": "user", "content": "go"}], 1)
    store.close()
    (tmp_path / SID).rename(tmp_path / "sess-2")
    with pytest.raises(CheckpointError, match="belongs to session 'sess-1'"):
        FileSessionStore(tmp_path, epoch=1).load_checkpoint("sess-2", RUN)


def test_journal_record_of_a_newer_schema_is_refused(tmp_path: Path) -> None:
    store = FileSessionStore(tmp_path, epoch=1)
    store.save_session(SID, {})
    store.close()
    with journal_of(tmp_path).open("ab") as f:  # as a newer build would write it
        f.write(frame(b'{"t":"commit","run":"run-z","v":2,"shape":"new"}'))
    with pytest.raises(CheckpointError) as err:
        FileSessionStore(tmp_path, epoch=1).load_checkpoint(SID, "run-z")
    assert str(err.value).startswith(
        "loop checkpoint for run run-z has schema version 2 but this build supports at most 1; "
    )


def test_unknown_record_kind_is_refused(tmp_path: Path) -> None:
    FileSessionStore(tmp_path, epoch=1).save_session(SID, {})
    with journal_of(tmp_path).open("ab") as f:
        f.write(frame(b'{"t":"mystery"}'))
    with pytest.raises(CheckpointError, match="unreadable record"):
        FileSessionStore(tmp_path, epoch=1).load_session(SID)


def test_temp_files_are_never_read_and_are_cleaned(tmp_path: Path) -> None:
    FileSessionStore(tmp_path, epoch=1).save_session(SID, {"x": 1})
    (tmp_path / SID / ".tmp-snapshot-0000000001-0000000005.rec-1-0").write_bytes(b"half")
    (tmp_path / SID / ".tmp-snapshot-0000000003-0000000000.rec-1-0").write_bytes(b"newer")
    assert FileSessionStore(tmp_path, epoch=1).load_session(SID) == {"x": 1}
    FileSessionStore(tmp_path, epoch=2).acquire(SID)
    # the dead writer's temp file is gone; a newer epoch's write in progress is left alone
    assert [p.name for p in (tmp_path / SID).glob(".tmp-*")] == [
        ".tmp-snapshot-0000000003-0000000000.rec-1-0"
    ]


def test_secrets_never_reach_the_disk(tmp_path: Path) -> None:
    store = FileSessionStore(tmp_path, epoch=1, snapshot_min_bytes=1)
    store.save_session(SID, {"llm": {"apiKey": "sk-secret-1"}, "env": {"OPENAI_API_KEY": "sk-2"}})
    store.save_session(SID, {"llm": {"api_key": "sk-secret-1"}})
    for p in (tmp_path / SID).iterdir():
        if p.is_file():
            assert b"sk-secret" not in p.read_bytes() and b"sk-2" not in p.read_bytes()


def test_same_operations_give_byte_identical_files(tmp_path: Path) -> None:
    for name in ("a", "b"):
        store = FileSessionStore(tmp_path / name, epoch=3, snapshot_min_bytes=4096)
        msgs: list[dict[str, Any]] = [{"role": "user", "content": "go"}]
        store.save_session(SID, {"labels": {"tenant_id": "t"}})
        for turn in range(1, 40):
            do_round(store, msgs, turn)
        store.close()
    a, b = files(tmp_path / "a"), files(tmp_path / "b")
    assert a == b
    for name in a:
        assert (tmp_path / "a" / SID / name).read_bytes() == (
            tmp_path / "b" / SID / name
        ).read_bytes()


# ---- epochs and fencing --------------------------------------------------------------------


def test_a_loader_reads_the_highest_epoch_not_above_its_own(tmp_path: Path) -> None:
    FileSessionStore(tmp_path, epoch=2).save_session(SID, {"by": 2})
    FileSessionStore(tmp_path, epoch=5).save_session(SID, {"by": 5})
    assert FileSessionStore(tmp_path, epoch=1).load_session(SID) is None
    assert FileSessionStore(tmp_path, epoch=4).load_session(SID) == {"by": 2}
    assert FileSessionStore(tmp_path, epoch=5).load_session(SID) == {"by": 5}
    assert FileSessionStore(tmp_path, epoch=9).load_session(SID) == {"by": 5}


def test_an_older_epoch_cannot_open_a_newer_session(tmp_path: Path) -> None:
    FileSessionStore(tmp_path, epoch=5).acquire(SID)
    with pytest.raises(FencedError, match="epoch 5 has taken it over from epoch 4"):
        FileSessionStore(tmp_path, epoch=4).save_session(SID, {})


def test_takeover_fences_the_old_writer_and_ignores_its_late_writes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    old = FileSessionStore(tmp_path, epoch=1)
    msgs: list[dict[str, Any]] = [{"role": "user", "content": "go"}]
    for turn in (1, 2):
        do_round(old, msgs, turn)
    new = FileSessionStore(tmp_path, epoch=2)
    new.acquire(SID)  # claims the lease and writes the takeover snapshot
    taken_over = new.load_checkpoint(SID, RUN)
    assert taken_over is not None and taken_over.turn == 2

    with pytest.raises(FencedError, match="fenced: epoch 2 has taken it over from epoch 1"):
        do_round(old, list(msgs), 3)
    with pytest.raises(FencedError):  # and every later write too
        old.save_session(SID, {})

    # A write that slipped past the check (it raced the takeover) lands in epoch-1 files ...
    monkeypatch.setattr(fence_mod, "check", lambda *a, **k: None)
    old2 = FileSessionStore(tmp_path, epoch=1)
    old2._writers = {}
    late = list(msgs)
    do_round(old2, late, 3)
    monkeypatch.undo()
    # ... which the epoch-1 view shows and no epoch >= 2 loader ever reads.
    stale = FileSessionStore(tmp_path, epoch=1).load_checkpoint(SID, RUN)
    assert stale is not None and stale.turn == 3
    for reader in (new, FileSessionStore(tmp_path, epoch=2), FileSessionStore(tmp_path, epoch=3)):
        cp = reader.load_checkpoint(SID, RUN)
        assert cp is not None and cp.turn == 2


def test_readers_never_fence_and_survive_concurrent_compaction(tmp_path: Path) -> None:
    writer = FileSessionStore(tmp_path, epoch=1, fsync=False, snapshot_min_bytes=512)
    msgs: list[dict[str, Any]] = [{"role": "user", "content": "go"}]
    do_round(writer, msgs, 1)
    errors: list[BaseException] = []
    seen: list[int] = []
    stop = threading.Event()

    def read_loop() -> None:
        reader = FileSessionStore(tmp_path, epoch=1)
        while not stop.is_set():
            try:
                cp = reader.load_checkpoint(SID, RUN)
                assert cp is not None and cp.messages == msgs[: len(cp.messages)]
                seen.append(cp.turn)
            except BaseException as exc:
                errors.append(exc)
                return

    t = threading.Thread(target=read_loop)
    t.start()
    try:
        for turn in range(2, 150):
            do_round(writer, msgs, turn)
    finally:
        stop.set()
        t.join()
    assert not errors, errors[0]
    assert seen == sorted(seen) and len(seen) > 5
    assert not writer.is_fenced(SID)


def test_io_failures_become_store_errors(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("x")
    with pytest.raises(StoreError, match="cannot open session"):
        FileSessionStore(blocker, epoch=1).save_session(SID, {})


def test_epoch_must_be_a_non_negative_int(tmp_path: Path) -> None:
    for bad in (-1, "3", 1.5, True, 10**10):
        with pytest.raises(ValueError, match="epoch must be an int"):
            FileSessionStore(tmp_path, epoch=bad)  # type: ignore[arg-type]


def test_read_file_reports_torn_bytes(tmp_path: Path) -> None:
    p = tmp_path / "j"
    p.write_bytes(frame(b'{"a":1}') + frame(b'{"b":2}')[:-1])
    res = read_file(p)
    assert res.payloads == [b'{"a":1}'] and res.torn_bytes == len(frame(b'{"b":2}')) - 1


# ---- resumed runs share their origin's history --------------------------------------------


def _history(turns: int) -> list[dict[str, Any]]:
    msgs: list[dict[str, Any]] = [{"role": "user", "content": "go"}]
    for t in range(1, turns + 1):
        msgs += [assistant(t, (f"c{t}", "bash", "{}")), tool_msg(f"c{t}", "x" * 100)]
    return msgs


def test_a_resumed_run_journals_only_its_new_messages(tmp_path: Path) -> None:
    store = FileSessionStore(tmp_path, epoch=1, snapshot_min_bytes=10**9)
    base = _history(50)
    store.commit_round(checkpoint(SID, "run-1", 50, base))
    size = journal_of(tmp_path).stat().st_size
    # resume_run: a new run whose first checkpoint is the origin's history plus one round
    origin = FileSessionStore(tmp_path, epoch=1).load_checkpoint(SID, "run-1")
    assert origin is not None
    resumed = [dict(m) for m in origin.messages]
    resumed += [assistant(51, ("c51", "bash", "{}")), tool_msg("c51", "y")]
    store.commit_round(checkpoint(SID, "run-2", 51, resumed))
    grown = journal_of(tmp_path).stat().st_size - size
    assert grown < 1000 < size  # not the whole history again
    assert b'"base":"run-1"' in journal_of(tmp_path).read_bytes()
    reader = FileSessionStore(tmp_path, epoch=1)
    assert reader.load_checkpoint(SID, "run-2") == checkpoint(SID, "run-2", 51, resumed)
    assert reader.load_checkpoint(SID, "run-1") == checkpoint(SID, "run-1", 50, base)


def test_snapshots_store_a_resumed_history_once(tmp_path: Path) -> None:
    store = FileSessionStore(tmp_path, epoch=1, snapshot_min_bytes=10**9)
    msgs = _history(40)
    store.commit_round(checkpoint(SID, "run-0", 40, list(msgs)))
    for r in range(1, 6):  # five resumes, each adds a round
        msgs = [*msgs, assistant(40 + r, (f"r{r}", "bash", "{}")), tool_msg(f"r{r}", "z")]
        store.commit_round(checkpoint(SID, f"run-{r}", 40 + r, list(msgs)))
    store.close()
    one_run = FileSessionStore(tmp_path / "single", epoch=1)
    one_run.commit_round(checkpoint(SID, "run-0", 45, list(msgs)))
    one_run.close()
    FileSessionStore(tmp_path, epoch=2).acquire(SID)  # takeover snapshot of all six runs
    FileSessionStore(tmp_path / "single", epoch=2).acquire(SID)
    (snap,) = (tmp_path / SID).glob("snapshot-0000000002-*")
    (single,) = (tmp_path / "single" / SID).glob("snapshot-0000000002-*")
    assert snap.stat().st_size < 1.5 * single.stat().st_size
    reader = FileSessionStore(tmp_path, epoch=2)
    for r in range(6):
        cp = reader.load_checkpoint(SID, f"run-{r}")
        assert cp is not None and cp.messages == msgs[: 81 + 2 * r]


def test_a_rewritten_origin_does_not_corrupt_runs_built_on_it(tmp_path: Path) -> None:
    store = FileSessionStore(tmp_path, epoch=1, snapshot_min_bytes=10**9)
    origin = _history(10)
    store.commit_round(checkpoint(SID, "run-1", 10, list(origin)))
    resumed = [*origin, assistant(11, ("c11", "bash", "{}")), tool_msg("c11", "y")]
    store.commit_round(checkpoint(SID, "run-2", 11, list(resumed)))
    compacted = [{"role": "user", "content": "summary"}]
    store.commit_round(checkpoint(SID, "run-1", 11, compacted))  # origin rewritten afterwards
    for reader in (FileSessionStore(tmp_path, epoch=1), FileSessionStore(tmp_path, epoch=2)):
        if reader.epoch == 2:
            reader.acquire(SID)  # goes through a snapshot
        cp2 = reader.load_checkpoint(SID, "run-2")
        assert cp2 is not None and cp2.messages == resumed
        cp1 = reader.load_checkpoint(SID, "run-1")
        assert cp1 is not None and cp1.messages == compacted
    FileSessionStore(tmp_path, epoch=3).acquire(SID)  # a snapshot read back from a snapshot
    cp2 = FileSessionStore(tmp_path, epoch=3).load_checkpoint(SID, "run-2")
    assert cp2 is not None and cp2.messages == resumed


def test_a_snapshot_with_a_missing_base_is_refused(tmp_path: Path) -> None:
    (tmp_path / SID).mkdir()
    state: dict[str, Any] = {
        "session": None,
        "workflows": {},
        "runs": [
            {
                "run": "run-2",
                "base": "run-1",
                "keep": 3,
                "pending": None,
                "checkpoint": checkpoint(SID, "run-2", 1, []).to_dict(),
            }
        ],
    }
    rec = {"t": "snapshot", "session": SID, "epoch": 1, "seq": 0, "state": state}
    (tmp_path / SID / "snapshot-0000000001-0000000000.rec").write_bytes(
        frame(json.dumps(rec).encode())
    )
    with pytest.raises(CheckpointError, match="builds run run-2 on 3 messages of run run-1"):
        FileSessionStore(tmp_path, epoch=1).load_checkpoint(SID, "run-2")


def test_a_write_racing_a_takeover_is_reported_fenced(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Old writer checks the lease, the new owner claims and reads, the old writer appends its
    intent: the append must not be acted on, so begin_round raises FencedError after it."""
    from session_runtime.store import journal as journal_mod

    old = FileSessionStore(tmp_path, epoch=1)
    msgs: list[dict[str, Any]] = [{"role": "user", "content": "go"}]
    do_round(old, msgs, 1)
    real_append = journal_mod.JournalWriter.append
    seen: list[Any] = []

    def append_after_takeover(self: Any, payload: bytes) -> int:
        new = FileSessionStore(tmp_path, epoch=2)
        new.acquire(SID)  # claims and reads between the old writer's check and its append
        seen.append(new.load_pending_round(SID, RUN))
        return real_append(self, payload)

    monkeypatch.setattr(journal_mod.JournalWriter, "append", append_after_takeover)
    with pytest.raises(FencedError):
        old.begin_round(SID, RUN, 2, assistant(2, ("c2", "bash", "{}")))
    assert seen == [None]  # the new owner did not see the intent, and the old one must not act


def test_concurrent_claims_never_move_the_lease_backwards(tmp_path: Path) -> None:
    epochs = [3, 9, 1, 7, 5, 8, 2, 6, 4]
    barrier = threading.Barrier(len(epochs))
    fenced: list[int] = []
    failed: dict[int, Exception] = {}

    def claim(epoch: int) -> None:
        barrier.wait()
        try:
            FileSessionStore(tmp_path, epoch=epoch, fsync=False).acquire(SID)
        except FencedError:
            fenced.append(epoch)
        except StoreError as exc:  # a lower epoch losing a race it is about to be fenced in
            failed[epoch] = exc

    threads = [threading.Thread(target=claim, args=(e,)) for e in epochs]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert FileSessionStore(tmp_path, epoch=0).highest_epoch(SID) == 9
    assert 9 not in fenced and 9 not in failed, failed
    assert sorted(os.listdir(tmp_path / SID / "lease"))[-1] == "0000000009"
    for e in epochs[:-1]:
        if e != 9:
            assert FileSessionStore(tmp_path, epoch=e).is_fenced(SID)
