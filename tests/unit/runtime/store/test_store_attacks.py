"""Attacks on the file store that used to lose data silently: damaged last records, a deleted
snapshot, two writers of one epoch, and credentials in tool output. Each is refused or
surfaced now (never a silent loss)."""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

from session_runtime.errors import CheckpointError, FencedError
from session_runtime.store import FileSessionStore, MemorySessionStore, fence
from session_runtime.store.journal import frame, parse

from .conftest import assistant, checkpoint, tool_msg

SID, RUN = "s1", "run-1"
SECRETS = ("sk-proj-abcdefghijklmnopqrstuvwx", "hunter2", "ghp_abcdefghijklmnopqrstuvwxyz12")
LEAKY = (
    "OPENAI_API_KEY=sk-proj-abcdefghijklmnopqrstuvwx\n"
    "BERTH_REDIS_URL=redis://:hunter2@redis:6379/0\n"
    "token ghp_abcdefghijklmnopqrstuvwxyz12 ok\n"
)


def journal_of(root: Path) -> Path:
    (path,) = (root / SID).glob("journal-*.rec")
    return path


def with_pending_intent(root: Path) -> Path:
    """A session whose journal ends with the intent of round 2 (its tools may have run)."""
    store = FileSessionStore(root, epoch=1)
    msgs: list[dict[str, Any]] = [{"role": "user", "content": "go"}]
    store.begin_round(SID, RUN, 1, assistant(1, ("c1", "read", "{}")))
    store.record_tool_result(SID, RUN, 1, "c1", {"output": "x", "exit_code": 0})
    store.commit_round(checkpoint(SID, RUN, 1, msgs))
    store.begin_round(SID, RUN, 2, assistant(2, ("c2", "bash", '{"command":"rm -rf build"}')))
    store.close()
    return journal_of(root)


def flip_last_record(path: Path, old: bytes, new: bytes) -> None:
    data = path.read_bytes()
    last = data.rstrip(b"\n").rfind(b"\n") + 1
    assert old in data[last:]
    path.write_bytes(data[:last] + data[last:].replace(old, new, 1))


def test_damaged_intent_is_kept_pending_and_counted(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # Before: a bit flip in the last record dropped the intent as if torn: resume asked the model
    # again and the bash call could run twice.
    path = with_pending_intent(tmp_path)
    flip_last_record(path, b"rm -rf build", b"rm -rf bui1d")
    reader = FileSessionStore(tmp_path, epoch=1)
    with caplog.at_level(logging.ERROR, logger="session_runtime.store.file"):
        pending = reader.load_pending_round(SID, RUN)
    assert pending is not None and pending.turn == 2 and pending.results == {}
    assert reader.damage["damaged_record"] == 1 and reader.damage["torn_tail"] == 0
    assert "bad checksum" in caplog.text and "round 2 of run run-1" in caplog.text
    loaded = reader.read_state(SID)
    assert loaded is not None and loaded.damaged_records == 1 and loaded.torn_bytes == 0


def test_unreadable_damaged_record_refuses_the_load(tmp_path: Path) -> None:
    path = with_pending_intent(tmp_path)
    flip_last_record(path, b'{"message"', b'{"messagX"')
    with pytest.raises(CheckpointError, match="bad checksum and cannot be read"):
        FileSessionStore(tmp_path, epoch=1).load_pending_round(SID, RUN)
    with pytest.raises(CheckpointError):  # a writer refuses too, and deletes nothing
        FileSessionStore(tmp_path, epoch=1).save_session(SID, {})
    assert path.exists()


def test_damaged_result_leaves_the_round_pending(tmp_path: Path) -> None:
    store = FileSessionStore(tmp_path, epoch=1)
    store.begin_round(SID, RUN, 1, assistant(1, ("c1", "bash", "{}")))
    store.record_tool_result(SID, RUN, 1, "c1", {"output": "done", "exit_code": 0})
    store.close()
    flip_last_record(journal_of(tmp_path), b"done", b"dona")
    reader = FileSessionStore(tmp_path, epoch=1)
    pending = reader.load_pending_round(SID, RUN)
    assert pending is not None and pending.results == {}  # settled as interrupted on resume
    assert reader.damage["damaged_record"] == 1


def test_torn_tail_is_logged_and_counted(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    path = with_pending_intent(tmp_path)
    path.write_bytes(path.read_bytes()[:-7])
    reader = FileSessionStore(tmp_path, epoch=1)
    with caplog.at_level(logging.WARNING, logger="session_runtime.store.file"):
        assert reader.load_pending_round(SID, RUN) is None  # that append never returned
    assert reader.damage["torn_tail"] == 1 and "torn record" in caplog.text


def test_parse_tells_torn_from_damaged() -> None:
    good = frame(b'{"x":1}')
    res = parse(b"", "j")
    assert res.torn_bytes == 0 and res.damaged == ()
    res = parse(good + b"00000000 {}", "j")
    assert res.torn_bytes == len(b"00000000 {}") and res.damaged == ()
    res = parse(good + b"00000000 {}\n", "j")
    assert res.torn_bytes == 0 and res.damaged == ((len(good), b"00000000 {}"),)


def test_deleted_snapshot_is_refused_and_the_journal_kept(tmp_path: Path) -> None:
    # Before: the session looked brand new and the next writer deleted the orphaned journal.
    path = with_pending_intent(tmp_path)
    (snap,) = (tmp_path / SID).glob("snapshot-*.rec")
    snap.unlink()
    with pytest.raises(CheckpointError, match=r"snapshot .* is missing"):
        FileSessionStore(tmp_path, epoch=1).load_session(SID)
    for epoch in (1, 2):
        with pytest.raises(CheckpointError, match="nothing was changed"):
            FileSessionStore(tmp_path, epoch=epoch).save_session(SID, {"new": True})
    assert path.exists()


def test_second_writer_of_an_epoch_is_refused(tmp_path: Path) -> None:
    # Before: both wrote with epoch 1 and rounds one had reported durable were lost.
    first = FileSessionStore(tmp_path, epoch=1)
    first.save_session(SID, {"who": "first"})
    second = FileSessionStore(tmp_path, epoch=1)
    with pytest.raises(FencedError, match="two writers with the same epoch"):
        second.save_session(SID, {"who": "second"})
    first.begin_round(SID, RUN, 1, assistant(1, ("c1", "bash", "{}")))
    assert FileSessionStore(tmp_path, epoch=1).load_session(SID) == {"who": "first"}


def test_writer_whose_lease_was_taken_stops(tmp_path: Path) -> None:
    store = FileSessionStore(tmp_path, epoch=1)
    store.save_session(SID, {})
    (tmp_path / SID / "lease" / "0000000001").write_text("other-host/1/1/cafe")
    with pytest.raises(FencedError, match="held by another writer"):
        store.save_session(SID, {"late": True})


HOLDER = textwrap.dedent(
    """
    import sys, time
    from session_runtime.store import FileSessionStore
    store = FileSessionStore(sys.argv[1], epoch=1)
    store.save_session("s1", {"who": "child"})
    print("ready", flush=True)
    time.sleep(600)
    """
)


def test_live_writer_in_another_process_blocks_and_a_dead_one_does_not(tmp_path: Path) -> None:
    child = subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(tmp_path)],
        stdout=subprocess.PIPE,
        cwd=Path(__file__).resolve().parents[4],
    )
    try:
        assert child.stdout is not None and child.stdout.readline() == b"ready\n"
        with pytest.raises(FencedError, match="two writers with the same epoch"):
            FileSessionStore(tmp_path, epoch=1).save_session(SID, {"who": "parent"})
    finally:
        os.kill(child.pid, signal.SIGKILL)
        child.wait()
    restarted = FileSessionStore(tmp_path, epoch=1)  # a container restarted in place
    restarted.save_session(SID, {"who": "parent"})
    assert restarted.load_session(SID) == {"who": "parent"}


def test_closed_writer_of_this_process_may_be_taken_over(tmp_path: Path) -> None:
    first = FileSessionStore(tmp_path, epoch=1)
    first.save_session(SID, {})
    first.close()
    FileSessionStore(tmp_path, epoch=1).save_session(SID, {"again": True})
    assert not fence.holder_is_dead("elsewhere/1/1/x")


@pytest.mark.parametrize("kind", ["memory", "file"])
def test_credentials_in_tool_output_are_masked_before_journaling(tmp_path: Path, kind: str) -> None:
    store: Any = MemorySessionStore() if kind == "memory" else FileSessionStore(tmp_path, epoch=1)
    store.begin_round(SID, RUN, 1, assistant(1, ("c1", "bash", '{"command":"env"}')))
    store.record_tool_result(SID, RUN, 1, "c1", {"output": LEAKY, "exit_code": 0})
    pending = store.load_pending_round(SID, RUN)
    assert "OPENAI_API_KEY=[REDACTED]" in pending.results["c1"]["output"]
    msgs = [{"role": "user", "content": "go"}, tool_msg("c1", LEAKY)]
    store.commit_round(checkpoint(SID, RUN, 1, msgs))
    store.commit_round(checkpoint(SID, RUN, 2, [*msgs, tool_msg("c2", "clean")]))
    cp = store.load_checkpoint(SID, RUN)
    assert cp is not None and cp.messages[2]["content"] == "clean"
    assert "redis://:[REDACTED]@redis:6379/0" in cp.messages[1]["content"]
    dumped = repr(cp) + repr(pending)
    if kind == "file":
        store.close()
        dumped += "".join(p.read_text() for p in (tmp_path / SID).glob("*.rec"))
    for secret in SECRETS:
        assert secret not in dumped


def test_a_short_write_never_leaves_a_torn_lease(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """write(2) may write less than asked (a nearly full volume). A lease holding part of its
    writer id could never be taken over (the id does not parse), fencing every later process
    of that epoch for good (found by the crash campaign, seed 120)."""
    real_write = os.write

    def short(fd: int, data: Any) -> int:
        return real_write(fd, bytes(data)[:2])

    monkeypatch.setattr(os, "write", short)
    store = FileSessionStore(tmp_path, epoch=1)
    store.acquire("s1")
    monkeypatch.setattr(os, "write", real_write)
    holder = fence.lease_holder(tmp_path / "s1", 1)
    assert holder == store._writer_id


def test_a_writer_whose_snapshot_a_newer_epoch_removed_reports_fenced(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A new placement opens the session while the old process is still writing its takeover
    snapshot (a lost node's pod runs on). The newer epoch removes the older epoch's temp file;
    the old process must end ``fenced``, not ``failed`` with an I/O error (found by the crash
    campaign, seed 577)."""
    old = FileSessionStore(tmp_path, epoch=1)
    new = FileSessionStore(tmp_path, epoch=2)
    real_replace = os.replace

    def racing(src: Any, dst: Any, *args: Any, **kwargs: Any) -> None:
        if ".tmp-snapshot-0000000001-" in str(src):
            monkeypatch.setattr(os, "replace", real_replace)
            new.acquire("s1")  # claims epoch 2 and clears what older epochs left half-written
        real_replace(src, dst, *args, **kwargs)

    monkeypatch.setattr(os, "replace", racing)
    with pytest.raises(FencedError):
        old.acquire("s1")
