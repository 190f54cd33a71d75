"""Epoch fencing of one session directory (docs/architecture.md §6, "Fencing").

Owned by ``session_runtime.store``; used by :mod:`.file`. Every placement of a session has an
epoch (``status.epoch``, ``BERTH_EPOCH``). A writer *claims* its epoch by creating the empty file
``lease/<epoch>`` (``O_EXCL``, so two claims never overwrite each other); the lease is the highest
epoch with a file. Epochs only move up: a claimant removes lease files *below* its own epoch, never
the highest one, so concurrent claims cannot make the lease go backwards.

One writer per epoch: the lease file holds the claimant's writer id (:func:`new_writer_id`:
host, pid, process start time, a random token). A second claimant of the same epoch is refused
with ``FencedError`` while the holder may be alive; it takes the lease over only when the holder
is provably dead (same host, and its pid is gone or belongs to a newer process: a container
restarted in place). A writer whose lease file no longer holds its own id is fenced too.

Rule: a writer checks the lease before every durable write and again once it is durable (a
record it only writes, made durable by the next durable write, is covered by that write's
checks; nothing may act on it before); if a higher epoch has claimed the session, or another
writer holds its epoch, it raises ``FencedError`` and must stop. A claimant claims before it
reads, so a write whose second check passed is always seen by the newer epoch. The
writer's files carry its epoch in their names, so whatever it writes after the newer epoch's
takeover snapshot is never read by that epoch (see :mod:`.file`).
"""

from __future__ import annotations

import functools
import os
import secrets
import socket
import weakref
from pathlib import Path

from session_runtime.errors import FencedError
from session_runtime.store.atomic import fsync_dir, write_all
from session_runtime.store.layout import LEASE_DIR, MAX_NUMBER, lease_name


def check_epoch(epoch: object) -> int:
    """Return ``epoch`` if it is an int in ``0..MAX_NUMBER``, else raise ``ValueError``."""
    if isinstance(epoch, bool) or not isinstance(epoch, int) or not 0 <= epoch <= MAX_NUMBER:
        raise ValueError(f"epoch must be an int from 0 to {MAX_NUMBER}, got {epoch!r}")
    return epoch


@functools.lru_cache(maxsize=1024)
def _lease_paths(session_dir: str, epoch: int) -> tuple[str, str]:
    """``(lease directory, lease file of epoch)`` of a session directory, as strings.

    Memoised: the lease is read twice per durable write, and joining the paths anew each time
    cost about as much CPU as the system calls of the check."""
    lease_dir = os.path.join(session_dir, LEASE_DIR)
    return lease_dir, os.path.join(lease_dir, lease_name(epoch))


def highest_epoch(session_dir: str | os.PathLike[str]) -> int | None:
    """The lease: the highest epoch that claimed the session, or None if none has."""
    try:
        names = os.listdir(_lease_paths(os.fspath(session_dir), 0)[0])
    except FileNotFoundError:
        return None
    return max((int(n) for n in names if n.isdigit()), default=None)


def fenced_error(session_id: str, mine: int, owner: int) -> FencedError:
    """The error a fenced writer raises (and reports as outcome ``fenced``)."""
    return FencedError(
        f"session '{session_id}' is fenced: epoch {owner} has taken it over from epoch {mine}; "
        "this process must stop writing and exit with outcome 'fenced'"
    )


#: Writer ids of this process that are still open (a holder in this process not listed here was
#: garbage-collected or closed, so its lease may be taken over).
_LIVE_WRITERS: set[str] = set()


def _start_time(pid: int) -> str | None:
    """The start time of process ``pid`` (clock ticks since boot), or None if it is gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            stat = fh.read()
    except OSError:
        return None
    return stat.rsplit(b")", 1)[-1].split()[19].decode()


def new_writer_id(owner: object | None = None) -> str:
    """A fresh writer id ``<host>/<pid>/<start time>/<token>``; live while ``owner`` is (and
    until :func:`release_writer_id`)."""
    pid = os.getpid()
    wid = f"{socket.gethostname()}/{pid}/{_start_time(pid) or '?'}/{secrets.token_hex(8)}"
    _LIVE_WRITERS.add(wid)
    if owner is not None:
        weakref.finalize(owner, _LIVE_WRITERS.discard, wid)
    return wid


def release_writer_id(wid: str) -> None:
    """Mark ``wid`` as no longer writing (its lease may then be taken over by this host)."""
    _LIVE_WRITERS.discard(wid)


def holder_is_dead(holder: str) -> bool:
    """True only if the writer ``holder`` provably stopped: it ran on this host and its process
    is gone, is a newer process with the same pid, or is this process and no longer open."""
    parts = holder.split("/")
    if len(parts) != 4 or parts[0] != socket.gethostname() or not parts[1].isdigit():
        return False
    pid = int(parts[1])
    started = _start_time(pid)
    if started is None or started != parts[2]:
        return True
    return pid == os.getpid() and holder not in _LIVE_WRITERS


def lease_holder(session_dir: str | os.PathLike[str], epoch: int) -> str | None:
    """The writer id in ``lease/<epoch>`` ("" for an empty legacy lease), None if absent.

    Plain ``os`` calls on memoised path strings rather than ``pathlib``: every durable store
    write reads the lease twice, and the path objects cost more CPU than the system calls."""
    try:
        fd = os.open(_lease_paths(os.fspath(session_dir), epoch)[1], os.O_RDONLY)
    except FileNotFoundError:
        return None
    try:
        chunks = []
        while chunk := os.read(fd, 4096):
            chunks.append(chunk)
    finally:
        os.close(fd)
    return b"".join(chunks).decode().strip()


def same_epoch_error(session_id: str, epoch: int, holder: str) -> FencedError:
    """The error of a second writer of one epoch."""
    return FencedError(
        f"session '{session_id}' is fenced: epoch {epoch} is held by another writer ({holder}); "
        "two writers with the same epoch are refused, this process must stop writing"
    )


def check(
    session_dir: str | os.PathLike[str], session_id: str, epoch: int, writer: str | None = None
) -> None:
    """Raise ``FencedError`` if an epoch above ``epoch`` has claimed the session, or (with
    ``writer``) if ``lease/<epoch>`` is not held by ``writer``."""
    owner = highest_epoch(session_dir)
    if owner is not None and owner > epoch:
        raise fenced_error(session_id, epoch, owner)
    if writer is not None:
        holder = lease_holder(session_dir, epoch)
        if holder != writer:
            raise same_epoch_error(session_id, epoch, holder or "none")


def _write_lease(lease_dir: Path, epoch: int, writer: str, *, replace: bool) -> bool:
    """Put ``writer`` in ``lease/<epoch>`` atomically (temp file, then ``link`` when the lease
    must not exist yet, else ``rename``). Returns False if it already existed (``link``)."""
    tmp = lease_dir / f".tmp-{lease_name(epoch)}-{secrets.token_hex(4)}"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        try:
            write_all(fd, writer.encode())  # a short write must never publish part of the id
            os.fsync(fd)
        finally:
            os.close(fd)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    try:
        if replace:
            os.replace(tmp, lease_dir / lease_name(epoch))
            return True
        os.link(tmp, lease_dir / lease_name(epoch))
        return True
    except FileExistsError:
        return False
    finally:
        tmp.unlink(missing_ok=True)


def claim(
    session_dir: Path,
    session_id: str,
    epoch: int,
    *,
    writer: str | None = None,
    fsync: bool = True,
) -> None:
    """Claim ``epoch`` for ``writer`` (idempotent), then :func:`check` it is still the highest.

    Creates ``lease/`` and ``lease/<epoch>`` holding ``writer`` (default: a fresh id), makes
    both durable, and removes lease files of lower epochs. Raises ``FencedError`` if a higher
    epoch already holds the lease or another live writer holds this epoch, ``OSError`` on I/O
    failure.
    """
    writer = writer or new_writer_id()
    lease_dir = session_dir / LEASE_DIR
    check(session_dir, session_id, epoch)
    created_dir = False
    try:
        os.mkdir(lease_dir, 0o700)
        created_dir = True
    except FileExistsError:
        pass
    if not _write_lease(lease_dir, epoch, writer, replace=False):
        holder = lease_holder(session_dir, epoch) or ""
        if holder != writer:
            if holder and not holder_is_dead(holder):
                raise same_epoch_error(session_id, epoch, holder)
            _write_lease(lease_dir, epoch, writer, replace=True)
    if fsync:
        fsync_dir(lease_dir)
        if created_dir:
            fsync_dir(session_dir)
    check(session_dir, session_id, epoch, writer)
    for name in os.listdir(lease_dir):
        if name.isdigit() and int(name) < epoch:
            (lease_dir / name).unlink(missing_ok=True)
