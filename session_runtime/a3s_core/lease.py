"""One epoch space for a3s-code-core's writer lease and Berth's placement epochs.

Berth fences a session by placement epoch (``status.epoch``/``BERTH_EPOCH``; ``lease/<epoch>``
in the session directory, :mod:`session_runtime.store.fence`). a3s-code-core 9.x fences a
``FileSessionStore`` by a store-wide writer lease (``<store>/v1/writer_lease.json``:
``{schema, epoch, holderId, acquiredAtMs}``): ``acquire_writer_lease`` writes the durable epoch
plus one, and a snapshot commit by a handle whose held lease is not the durable one (epoch and
holder) fails with "writer lease lost or taken over". The rule this module keeps
(docs/a3s-compatibility.md, "Lease parity"): **the a3s-code-core lease epoch is the Berth
epoch**. Then:

- a Berth placement of epoch ``E`` (:func:`fence_core`, :func:`claim_epoch`) writes the core
  lease ``{epoch E, holder "berth/<writer id>"}``: every 9.x handle holding an older lease fails
  its next snapshot commit;
- a 9.x writer that acquires the lease gets ``durable + 1``, an epoch above the Berth
  placement's: :func:`check_epoch` (which a Berth writer runs with its own fence check) raises
  ``FencedError`` and Berth stops writing;
- :func:`claim_epoch` makes a 9.x session hosted *by* a Berth placement hold exactly epoch ``E``
  (a handoff lease at ``E - 1``, then a3s-code-core's own acquire), so that session's commits
  pass only while Berth's epoch ``E`` is current.

What a3s-code-core 9.1.3 does not fence (read in its source): loop checkpoints and artifacts are
written without a lease check, and ``acquire_writer_lease`` is a read-then-write under an
in-process mutex only. Parity therefore covers session snapshots, the state a resume reads.
"""

from __future__ import annotations

import json
import os
import secrets
import time
from pathlib import Path
from typing import Any

from session_runtime.a3s_core.binding import CoreStore
from session_runtime.errors import FencedError
from session_runtime.store import fence
from session_runtime.store.atomic import fsync_dir, write_all
from session_runtime.store.file import FileSessionStore

#: ``SESSION_STORE_WRITER_LEASE_SCHEMA_V1`` of a3s-code-core.
LEASE_SCHEMA = "a3s.code.session-store-writer-lease.v1"
#: Holder ids Berth writes into the core lease start with this.
BERTH_HOLDER = "berth/"
#: Where a Berth session keeps the a3s-code-core store of the 9.x session it hosts:
#: ``<Berth store root>/<session id>/a3s-core/`` (Berth's store ignores names it does not own).
CORE_DIR = "a3s-core"


def core_lease_path(core_dir: str | os.PathLike[str]) -> Path:
    """``<core store>/v1/writer_lease.json`` (a3s-code-core ``FileSessionStore`` layout)."""
    return Path(core_dir) / "v1" / "writer_lease.json"


def read_core_lease(core_dir: str | os.PathLike[str]) -> tuple[int, str] | None:
    """``(epoch, holder)`` of the durable core lease, None if there is none. Raises
    ``FencedError`` for a lease Berth cannot read (an encrypted or foreign file): a writer that
    cannot tell who owns the store must not write."""
    path = core_lease_path(core_dir)
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        return None
    try:
        lease = json.loads(raw)
        if lease["schema"] != LEASE_SCHEMA:
            raise ValueError(f"schema {lease['schema']!r}")
        return int(lease["epoch"]), str(lease["holderId"])
    except (ValueError, KeyError, TypeError) as exc:
        raise FencedError(f"a3s-code-core writer lease {path} is unreadable ({exc})") from exc


def berth_holder(writer: str) -> str:
    """The core lease holder id of Berth writer ``writer``."""
    return BERTH_HOLDER + writer


def _write_core_lease(core_dir: Path, epoch: int, holder: str) -> None:
    """Replace the core lease atomically (temp file, fsync, rename; 0600 in a 0700 ``v1/``)."""
    v1 = core_dir / "v1"
    v1.mkdir(mode=0o700, parents=True, exist_ok=True)
    body = {
        "schema": LEASE_SCHEMA,
        "epoch": epoch,
        "holderId": holder,
        "acquiredAtMs": int(time.time() * 1000),
    }
    tmp = v1 / f".writer_lease.{secrets.token_hex(4)}.tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        write_all(fd, json.dumps(body).encode())
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, core_lease_path(core_dir))
    fsync_dir(v1)


def _refuse_newer(session_id: str, epoch: int, core: tuple[int, str] | None, writer: str) -> None:
    if core is None:
        return
    owner, holder = core
    if owner > epoch or (owner == epoch and holder != berth_holder(writer)):
        raise FencedError(
            f"session '{session_id}' is fenced: the a3s-code-core writer lease is at epoch "
            f"{owner} (holder {holder!r}), this Berth writer has epoch {epoch}; "
            "this process must stop writing"
        )


def fence_core(session_id: str, core_dir: str | os.PathLike[str], epoch: int, writer: str) -> None:
    """Make Berth epoch ``epoch`` (writer ``writer``) the core lease, fencing every 9.x handle
    that holds an older one. Raises ``FencedError`` if the core lease is already at a higher
    epoch, or at ``epoch`` held by someone else (the claimant is stale)."""
    fence.check_epoch(epoch)
    _refuse_newer(session_id, epoch, read_core_lease(core_dir), writer)
    _write_core_lease(Path(core_dir), epoch, berth_holder(writer))


def check_epoch(
    session_dir: str | os.PathLike[str],
    session_id: str,
    epoch: int,
    core_dir: str | os.PathLike[str],
    writer: str,
) -> None:
    """Berth's fence check of ``epoch`` plus the core lease: raises ``FencedError`` if a higher
    Berth epoch claimed the session, or if the core lease moved past ``epoch`` (a 9.x writer
    acquired it) or is held at ``epoch`` by another holder."""
    fence.check(session_dir, session_id, epoch)
    _refuse_newer(session_id, epoch, read_core_lease(core_dir), writer)


def claim_epoch(
    session_dir: Path, session_id: str, epoch: int, core: CoreStore, writer: str
) -> dict[str, Any]:
    """Claim ``epoch`` on both sides for a 9.x session this Berth placement hosts: Berth's lease
    (``fence.claim``), then the core lease at exactly ``epoch`` held by ``core``'s handle (a
    handoff lease at ``epoch - 1``, then ``acquire_writer_lease``). Returns the core lease.
    Raises ``FencedError`` if either side is already past ``epoch`` or a 9.x writer acquired
    the lease in between."""
    if epoch < 1:
        raise ValueError("a3s-code-core lease epochs are one-based: a placement epoch >= 1")
    fence.claim(session_dir, session_id, epoch, writer=writer)
    _refuse_newer(session_id, epoch, read_core_lease(core.directory), writer)
    if epoch > 1:
        _write_core_lease(Path(core.directory), epoch - 1, berth_holder(writer) + "/handoff")
    lease = core.acquire_writer_lease(berth_holder(writer))
    if lease["epoch"] != epoch:
        raise FencedError(
            f"session '{session_id}' is fenced: the a3s-code-core writer lease moved to epoch "
            f"{lease['epoch']} while Berth epoch {epoch} claimed it"
        )
    return lease


class ParityFileSessionStore(FileSessionStore):
    """Berth's ``FileSessionStore`` under lease parity: claiming a session with ``acquire`` (a
    session pod calls it at start-up) also makes this epoch the a3s-code-core lease of the
    session's core store (``<session dir>/a3s-core``, :func:`fence_core`), and every fence
    check of a durable write
    also reads that lease (:func:`check_epoch`), so a 9.x writer that acquired the lease stops
    this writer (``FencedError``) exactly as a newer Berth epoch does."""

    def acquire(self, session_id: str) -> None:
        """Claim ``session_id`` on both sides; raises ``FencedError`` if either is past it."""
        super().acquire(session_id)
        fence_core(session_id, self.core_dir(session_id), self.epoch, self.writer_id)

    @property
    def writer_id(self) -> str:
        """The writer id this store holds in ``lease/<epoch>`` (and, prefixed, in the core
        lease)."""
        return self._writer_id

    def core_dir(self, session_id: str) -> Path:
        """The a3s-code-core store directory of ``session_id``."""
        return self.session_dir(session_id) / CORE_DIR

    def _check_fence(self, w: Any, session_id: str) -> None:
        super()._check_fence(w, session_id)
        try:
            _refuse_newer(
                session_id, self.epoch, read_core_lease(self.core_dir(session_id)), self._writer_id
            )
        except FencedError as exc:
            w.fenced = exc
            raise
