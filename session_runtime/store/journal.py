"""Checksummed, append-only record files: the journal segments and snapshots of the file store.

Owned by ``session_runtime.store``; used by :mod:`.file`. Framing, one record per line::

    <crc32 of payload, 8 lower-case hex digits> <space> <payload: canonical JSON, no newline> \\n

A record is valid when its line is complete (ends with ``\\n``) and the checksum matches. Reading
stops at the first invalid record. An incomplete last line is a **torn tail** (the writer died
mid-append; that append never returned, so no tool ran on it). A *complete* last line with a bad
checksum is a **damaged record**: it was durable once, so the caller must not drop it silently
(see ``FileSessionStore.read_state``). A valid record *after* an invalid one cannot come from a
crash of a single appending writer, so it is reported as corruption.

Appends are ``write`` + ``fdatasync``: when :meth:`JournalWriter.append` returns the record is
durable (:meth:`JournalWriter.append_unsynced`: written, and made durable by the next append).
A writer never appends to a file it did not create, so a torn tail is never followed by new
records in the same file.
"""

from __future__ import annotations

import os
import zlib
from dataclasses import dataclass
from pathlib import Path

from session_runtime.errors import CheckpointError
from session_runtime.store.atomic import fsync_dir, write_all


def frame(payload: bytes) -> bytes:
    """One framed record: checksum, space, payload, newline. ``payload`` has no newline."""
    return b"%08x %s\n" % (zlib.crc32(payload), payload)


def _valid(line: bytes) -> bool:
    if len(line) < 10 or line[8:9] != b" ":
        return False
    try:
        crc = int(line[:8], 16)
    except ValueError:
        return False
    return zlib.crc32(line[9:]) == crc


@dataclass(frozen=True, slots=True)
class ReadResult:
    """What a record file holds: the payloads of its valid records; ``torn_bytes``, the size of
    an incomplete last line (a writer died mid-append: that append never returned, so nobody acted
    on it); ``damaged``, the complete last lines whose checksum does not match, as
    ``(byte offset, line without its newline)`` (the record was durable, then damaged)."""

    payloads: list[bytes]
    torn_bytes: int
    damaged: tuple[tuple[int, bytes], ...] = ()


def parse(data: bytes, name: str) -> ReadResult:
    """Split framed ``data`` into payloads, a torn tail and damaged complete last records.

    Raises ``CheckpointError`` (``journal file <name> is corrupt at byte <n>: ...``) when a valid
    record follows an invalid one (not something a crash of one appending writer can leave).
    """
    payloads: list[bytes] = []
    pos = 0
    while pos < len(data):
        end = data.find(b"\n", pos)
        if end < 0:
            return ReadResult(payloads, len(data) - pos)
        if _valid(data[pos:end]):
            payloads.append(data[pos + 9 : end])
            pos = end + 1
            continue
        rest = data[pos:].split(b"\n")
        if any(_valid(line) for line in rest[1:-1]):
            raise CheckpointError(
                f"journal file {name} is corrupt at byte {pos}: a damaged record is followed "
                "by valid ones (not a torn tail); refusing to load it"
            )
        damaged: list[tuple[int, bytes]] = []
        for line in rest[:-1]:
            damaged.append((pos, line))
            pos += len(line) + 1
        return ReadResult(payloads, len(data) - pos, tuple(damaged))
    return ReadResult(payloads, 0)


def read_file(path: Path) -> ReadResult:
    """Read and :func:`parse` ``path``; raises ``FileNotFoundError`` if it is gone."""
    return parse(path.read_bytes(), path.name)


class JournalWriter:
    """Appends framed records to a new segment file it creates (``O_EXCL``).

    ``fsync=False`` skips ``fdatasync`` (tests and benchmarks of CPU cost only). Raises
    ``OSError``; after a failed append the file may hold a torn record, so the owner must stop
    using this writer (the file store rotates to a new segment).
    """

    def __init__(self, path: Path, *, fsync: bool = True) -> None:
        self.path = path
        self._fsync = fsync
        self._fd = os.open(
            path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_APPEND | os.O_CLOEXEC, 0o600
        )
        self.size = 0
        #: True while a record appended with ``sync=False`` is not yet durable.
        self.unsynced = False
        if fsync:
            os.fsync(self._fd)
            fsync_dir(path.parent)

    def append(self, payload: bytes) -> int:
        """Append one record and make it (and every unsynced one before it) durable; returns
        the bytes written."""
        return self._append(payload, sync=True)

    def append_unsynced(self, payload: bytes) -> int:
        """Append one record without ``fdatasync``; returns the bytes written. The record is in
        the kernel's page cache (it survives this process, not the machine or a network file
        system client's crash) until the next :meth:`append` or :meth:`close`, since one
        ``fdatasync`` of this append-only file covers all earlier writes, in order."""
        return self._append(payload, sync=False)

    def _append(self, payload: bytes, *, sync: bool) -> int:
        data = frame(payload)
        write_all(self._fd, data)
        if sync and self._fsync:
            os.fdatasync(self._fd)
            self.unsynced = False
        elif self._fsync:
            self.unsynced = True
        self.size += len(data)
        return len(data)

    def close(self) -> None:
        """Make unsynced records durable, then close the file (idempotent)."""
        if self._fd >= 0:
            try:
                if self.unsynced:
                    os.fdatasync(self._fd)
            finally:
                os.close(self._fd)
                self._fd = -1
