"""Epoch fencing of one session directory (ARCHITECTURE §6, "Fencing").

Owned by ``session_runtime.store``; used by :mod:`.file`. Every placement of a session has an
epoch (``status.epoch``, ``BERTH_EPOCH``). A writer *claims* its epoch by creating the empty file
``lease/<epoch>`` (``O_EXCL``, so two claims never overwrite each other); the lease is the highest
epoch with a file. Epochs only move up: a claimant removes lease files *below* its own epoch, never
the highest one, so concurrent claims cannot make the lease go backwards.

Rule: a writer checks the lease before every write and again once the write is durable; if a
higher epoch has claimed the session it raises ``FencedError`` and must stop. A claimant claims
before it reads, so a write whose second check passed is always seen by the newer epoch. The
writer's files carry its epoch in their names, so whatever it writes after the newer epoch's
takeover snapshot is never read by that epoch (see :mod:`.file`).
"""

from __future__ import annotations

import os
from pathlib import Path

from session_runtime.errors import FencedError
from session_runtime.store.atomic import fsync_dir
from session_runtime.store.layout import LEASE_DIR, MAX_NUMBER, lease_name


def check_epoch(epoch: object) -> int:
    """Return ``epoch`` if it is an int in ``0..MAX_NUMBER``, else raise ``ValueError``."""
    if isinstance(epoch, bool) or not isinstance(epoch, int) or not 0 <= epoch <= MAX_NUMBER:
        raise ValueError(f"epoch must be an int from 0 to {MAX_NUMBER}, got {epoch!r}")
    return epoch


def highest_epoch(session_dir: Path) -> int | None:
    """The lease: the highest epoch that claimed the session, or None if none has."""
    try:
        names = os.listdir(session_dir / LEASE_DIR)
    except FileNotFoundError:
        return None
    epochs = [int(n) for n in names if n.isdigit()]
    return max(epochs) if epochs else None


def fenced_error(session_id: str, mine: int, owner: int) -> FencedError:
    """The error a fenced writer raises (and reports as outcome ``fenced``)."""
    return FencedError(
        f"session '{session_id}' is fenced: epoch {owner} has taken it over from epoch {mine}; "
        "this process must stop writing and exit with outcome 'fenced'"
    )


def check(session_dir: Path, session_id: str, epoch: int) -> None:
    """Raise ``FencedError`` if an epoch above ``epoch`` has claimed the session."""
    owner = highest_epoch(session_dir)
    if owner is not None and owner > epoch:
        raise fenced_error(session_id, epoch, owner)


def claim(session_dir: Path, session_id: str, epoch: int, *, fsync: bool = True) -> None:
    """Claim ``epoch`` for the session (idempotent), then :func:`check` it is still the highest.

    Creates ``lease/`` and ``lease/<epoch>``, makes both durable, and removes lease files of
    lower epochs. Raises ``FencedError`` if a higher epoch already holds the lease, ``OSError``
    on I/O failure.
    """
    lease_dir = session_dir / LEASE_DIR
    check(session_dir, session_id, epoch)
    created_dir = False
    try:
        os.mkdir(lease_dir, 0o700)
        created_dir = True
    except FileExistsError:
        pass
    try:
        fd = os.open(lease_dir / lease_name(epoch), os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        os.close(fd)
    except FileExistsError:
        pass
    if fsync:
        fsync_dir(lease_dir)
        if created_dir:
            fsync_dir(session_dir)
    check(session_dir, session_id, epoch)
    for name in os.listdir(lease_dir):
        if name.isdigit() and int(name) < epoch:
            (lease_dir / name).unlink(missing_ok=True)
