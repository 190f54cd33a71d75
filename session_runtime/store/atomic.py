"""Crash-atomic file writes (docs/architecture.md §6): temp file in the same directory, fsync the
file, rename over the target, fsync the directory.

Owned by ``session_runtime.store``; used by the file store for snapshots. A reader of the target
sees either the old bytes or the new bytes, never a mix, even after ``kill -9`` or power loss.
Temp files start with :data:`TMP_PREFIX`; a crash can leave one behind, never the target torn.
"""

from __future__ import annotations

import itertools
import os
from pathlib import Path

#: Name prefix of temp files; loaders ignore them and the owning writer removes stale ones.
TMP_PREFIX = ".tmp-"

_counter = itertools.count()


def fsync_dir(directory: Path) -> None:
    """fsync a directory so that entries created, renamed or removed in it are durable."""
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_all(fd: int, data: bytes) -> None:
    """Write every byte of ``data`` to ``fd`` (``os.write`` may write less than asked)."""
    view = memoryview(data)
    while view:
        n = os.write(fd, view)
        view = view[n:]


def atomic_write(path: Path, data: bytes, *, sync_dir: bool = True, fsync: bool = True) -> None:
    """Replace ``path`` with ``data`` crash-atomically.

    Steps: create ``<dir>/.tmp-<name>-<pid>-<n>`` exclusively (mode 0600), write, fsync, rename
    onto ``path``, fsync the directory (skip the last step only when the caller fsyncs the
    directory itself afterwards). ``fsync=False`` skips both fsyncs (atomic against a crashed
    process, not against power loss: benchmarks only). Raises ``OSError``; on failure the temp
    file is removed.
    """
    tmp = path.with_name(f"{TMP_PREFIX}{path.name}-{os.getpid()}-{next(_counter)}")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
    try:
        try:
            write_all(fd, data)
            if fsync:
                os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    if sync_dir and fsync:
        fsync_dir(path.parent)
