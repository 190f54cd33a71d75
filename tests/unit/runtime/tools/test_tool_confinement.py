"""Attacks on the file tools: symlink-swap races, hard links, special files, costly patterns,
huge files and malformed arguments. Each test reproduces an attack and shows it is refused now
(and that the session's event loop keeps running meanwhile)."""

from __future__ import annotations

import asyncio
import ctypes
import os
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from session_runtime.tools import run_tool

LIBC = ctypes.CDLL(None, use_errno=True)
RENAME_EXCHANGE, SYS_RENAMEAT2, AT_FDCWD = 2, 316, -100


@pytest.fixture
def tree(tmp_path: Path) -> tuple[Path, Path]:
    ws, outside = tmp_path / "ws", tmp_path / "outside"
    (ws / "x").mkdir(parents=True)
    outside.mkdir()
    for d, text in ((ws / "x", "inside"), (outside, "TOP SECRET")):
        (d / "secret.txt").write_text(f"{text}\n")
        (d / "edit.txt").write_text(f"TOP {text}\n")
        (d / "target.txt").write_text(f"{text}\n")
    os.symlink(outside, ws / "x.alt")
    (ws / "env").write_text("inside\n")
    os.symlink("/proc/self/environ", ws / "env.alt")
    return ws, outside


@pytest.fixture
def swapper(tree: tuple[Path, Path]) -> Iterator[None]:
    """A thread exchanging ``x`` (a real directory) with ``x.alt`` (a symlink to outside) and
    ``env`` with a link to ``/proc/self/environ``, atomically and as fast as it can."""
    ws, _ = tree
    stop = threading.Event()
    pairs = [(str(ws / a).encode(), str(ws / f"{a}.alt").encode()) for a in ("x", "env")]

    def run() -> None:
        while not stop.is_set():
            for a, b in pairs:
                LIBC.syscall(SYS_RENAMEAT2, AT_FDCWD, a, AT_FDCWD, b, RENAME_EXCHANGE)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    yield
    stop.set()
    thread.join()


CALLS = [
    ("read", {"file_path": "x/secret.txt"}),
    ("read", {"file_path": "env"}),
    ("write", {"file_path": "x/target.txt", "content": "pwned\n"}),
    ("edit", {"file_path": "x/edit.txt", "old_string": "TOP", "new_string": "OWNED"}),
    ("patch", {"file_path": "x/edit.txt", "diff": "@@ -1 +1 @@\n-TOP TOP SECRET\n+P\n"}),
    ("ls", {"path": "x"}),
    ("glob", {"pattern": "**/*", "path": "x"}),
    ("grep", {"pattern": "SECRET", "path": "x"}),
]


@pytest.mark.usefixtures("swapper")
async def test_symlink_swap_race_never_escapes(tree: tuple[Path, Path]) -> None:
    # Before the descriptor walk this race got through in about 1 of 3 calls (bench/tool_races).
    ws, outside = tree
    before = {p.name: p.read_text() for p in outside.iterdir()}
    escapes, calls, deadline = 0, 0, time.monotonic() + 3.0
    while time.monotonic() < deadline:
        for name, args in CALLS:
            if name == "grep" and calls % 50:  # a grep costs a child process
                continue
            res = await run_tool(name, args, str(ws), "c")
            calls += 1
            leaked = "TOP SECRET" in res.output or "PATH=" in res.output
            changed = {p.name: p.read_text() for p in outside.iterdir()} != before
            escapes += leaked or changed
            if changed:
                for n, text in before.items():
                    (outside / n).write_text(text)
    assert calls > 100
    assert escapes == 0


@pytest.mark.parametrize(
    ("tool", "args"),
    [
        ("read", {"file_path": "hl.txt"}),
        ("write", {"file_path": "hl.txt", "content": "pwned"}),
        ("edit", {"file_path": "hl.txt", "old_string": "TOP", "new_string": "OWNED"}),
        ("patch", {"file_path": "hl.txt", "diff": "@@ -1 +1 @@\n-TOP SECRET\n+P\n"}),
        ("grep", {"pattern": "SECRET", "path": "hl.txt"}),
    ],
)
async def test_hard_links_to_outside_files_are_refused(
    tree: tuple[Path, Path], tool: str, args: dict[str, object]
) -> None:
    ws, outside = tree
    os.link(outside / "secret.txt", ws / "hl.txt")
    res = await run_tool(tool, args, str(ws), "c")
    assert "TOP SECRET" not in res.output
    assert "hard links" in res.output
    assert (outside / "secret.txt").read_text() == "TOP SECRET\n"


async def test_special_files_are_refused_and_never_block(tmp_path: Path) -> None:
    os.mkfifo(tmp_path / "fifo")
    (tmp_path / "a.txt").write_text("needle\n")
    # Before: reading or grepping a FIFO blocked the event loop forever (no writer ever comes).
    for tool, args in [
        ("read", {"file_path": "fifo"}),
        ("edit", {"file_path": "fifo", "old_string": "a", "new_string": "b"}),
        ("write", {"file_path": "fifo", "content": "x"}),
        ("grep", {"pattern": "x", "path": "fifo"}),
    ]:
        res = await run_tool(tool, args, str(tmp_path), "c")
        assert res.is_error and "FIFO" in res.output, (tool, res.output)
    grep = await run_tool("grep", {"pattern": "needle"}, str(tmp_path), "g")
    assert grep.output == "a.txt:1:needle"  # the walk skips the FIFO, never opens it


async def test_catastrophic_regex_is_killed_and_the_loop_keeps_running(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("BERTH_TOOL_GREP_TIMEOUT_MS", "1000")
    (tmp_path / "evil.txt").write_text("a" * 40 + "b\n")
    ticks = 0

    async def heartbeat() -> None:
        nonlocal ticks
        while True:
            await asyncio.sleep(0.01)
            ticks += 1

    beat = asyncio.create_task(heartbeat())
    res = await run_tool("grep", {"pattern": "^(a+)+$"}, str(tmp_path), "c")
    beat.cancel()
    assert res.is_error and res.exit_code == 124 and "timed out" in res.output
    assert ticks > 10  # the event loop ran while the pattern burnt its child's CPU


def make_sparse(path: Path, head: bytes, size: int) -> None:
    with open(path, "wb") as fh:
        fh.write(head)
        fh.truncate(size)


async def test_huge_sparse_file_is_read_partially(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("BERTH_TOOL_MAX_FILE_BYTES", str(1 << 20))
    make_sparse(tmp_path / "big", b"first line\n", 1 << 30)
    res = await run_tool("read", {"file_path": "big", "limit": 1}, str(tmp_path), "c")
    assert not res.is_error and "first line" in res.output
    assert f"only the first {1 << 20} bytes were read" in res.output
    edit = await run_tool(
        "edit", {"file_path": "big", "old_string": "first", "new_string": "1st"}, str(tmp_path), "e"
    )
    assert edit.is_error and "not edited" in edit.output
    grep = await run_tool("grep", {"pattern": "first"}, str(tmp_path), "g")
    assert "big:1:first line" in grep.output and "only the first" in grep.output


@pytest.mark.parametrize(
    ("tool", "args", "expect"),
    [
        ("glob", {"pattern": ""}, "must not be empty"),
        ("glob", {"pattern": "/etc/*"}, "leaves the workspace"),
        ("read", {"file_path": "a/" * 3000 + "f"}, "longer than"),
        ("read", {"file_path": "a/" * 1000 + "f"}, "segments"),
        ("write", {"file_path": "a\x00b", "content": ""}, "NUL"),
        ("read", {"file_path": "loop"}, "symbolic links"),
        ("edit", {"file_path": "latin1.txt", "old_string": "a", "new_string": "b"}, "Decode"),
        ("ls", {"path": "latin1.txt"}, "not a directory"),
    ],
)
async def test_bad_calls_become_tool_results(
    tmp_path: Path, tool: str, args: dict[str, object], expect: str
) -> None:
    os.symlink("loop", tmp_path / "loop")
    (tmp_path / "latin1.txt").write_bytes(b"caf\xe9 a\n")
    res = await run_tool(tool, args, str(tmp_path), "c")
    assert res.is_error and expect in res.output, res.output


async def test_deep_trees_are_walked_with_a_bound(tmp_path: Path) -> None:
    fd = os.open(tmp_path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        for _ in range(200):
            os.mkdir("d", dir_fd=fd)
            nxt = os.open("d", os.O_RDONLY | os.O_DIRECTORY, dir_fd=fd)
            os.close(fd)
            fd = nxt
        os.close(os.open("leaf.txt", os.O_CREAT | os.O_WRONLY, dir_fd=fd))
    finally:
        os.close(fd)
    res = await run_tool("glob", {"pattern": "**/leaf.txt"}, str(tmp_path), "c")
    assert not res.is_error and "did not descend below depth" in res.output
    grep = await run_tool("grep", {"pattern": "x"}, str(tmp_path), "g")
    assert "did not descend below depth" in grep.output
