"""``FileSessionStore``: the session store on a (shared) directory, docs/architecture.md §6.

Owned by ``session_runtime.store``; constructed by the session pod (``berth-session``) with
``BERTH_STORE_DIR`` and ``BERTH_EPOCH``, and by tests. Layout in :mod:`.layout`, record framing in
:mod:`.journal`, record kinds in :mod:`.shapes`, fencing in :mod:`.fence`.

How it writes
    The first write to a session (or :meth:`FileSessionStore.acquire`) *opens* it: claim the
    lease for this store's epoch, load the newest state of the highest epoch ``<=`` ours, write it
    as ``snapshot-<epoch>-<seq>`` (the takeover snapshot; atomic: temp file, fsync, rename,
    directory fsync) and create the empty ``journal-<epoch>-<seq>``. Every write then appends one
    checksummed record to the journal and fdatasyncs it, the lease checked before and after (the
    round's last result rides on its commit's fdatasync and checks): a tool round costs its own
    bytes (intent, results, and a commit that carries only the messages added since the run's
    previous checkpoint), whatever the session's age.

Compaction
    When the journal has grown to at least ``max(snapshot_min_bytes, size of the last
    snapshot)``, the state is written as the next snapshot, a new journal is started and the old
    pair is deleted. Snapshot bytes therefore never exceed journal bytes written, so the amortised
    write cost of a round stays proportional to the round's own size, and a load reads at most
    about twice the state.
    Compaction runs only after a durable append: when the round's last result makes it due,
    it waits for the commit that makes that result durable.

How it reads
    A store with epoch ``E`` reads the newest snapshot of the highest epoch ``<= E`` plus that
    snapshot's journal, ignoring a torn tail. Files of higher epochs are invisible to it; once the
    newer epoch has written its takeover snapshot, nothing the older epoch writes is ever read by
    the newer one. A session this process has opened is served from memory (identical to disk).

Fencing, and how a process reports it
    Every durable write (every write but the round's last result, which its commit makes
    durable) checks the lease before appending *and again after* the record is durable; a
    write that finds a higher epoch raises ``FencedError`` (a ``StoreError``), and every later
    write of that session raises it again. The second check closes the race "old writer checks,
    new owner claims and reads, old writer appends an intent and runs the tool": a write that
    returns normally was durable before any newer epoch claimed the session, so the newer epoch's
    takeover read includes it (an intent it sees without a result is reported as interrupted).
    The agent loop lets ``FencedError`` end the run; the session pod reports outcome ``fenced``
    in its termination message and exits. Loads never
    claim the lease, so inspecting a store never fences its owner.
"""

from __future__ import annotations

import collections
import contextlib
import logging
import os
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from session_runtime.errors import CheckpointError, FencedError, StoreError
from session_runtime.store import fence, journal, layout, shapes
from session_runtime.store.atomic import atomic_write
from session_runtime.store.base import LoopCheckpoint, PendingRound, WorkflowCheckpoint
from session_runtime.store.ids import check_id
from session_runtime.store.redact import redact_messages, redact_tool_result, strip_secrets
from session_runtime.store.state import (
    SessionState,
    begin_record,
    check_record,
    checkpoint_delete_record,
    commit_record,
    copy_json,
    result_record,
    session_record,
    workflow_delete_record,
    workflow_record,
)

log = logging.getLogger(__name__)

#: Default lower bound of the journal size that triggers compaction (bytes).
DEFAULT_SNAPSHOT_MIN_BYTES = 64 * 1024

#: How often a loader retries when a concurrent compaction removed a file it was reading.
_LOAD_ATTEMPTS = 20


@dataclass(slots=True)
class LoadedState:
    """A session state read from disk: the state, the snapshot it came from, the bytes of a torn
    tail that was ignored and the number of damaged complete records (see ``_settle_damaged``)."""

    state: SessionState
    epoch: int
    seq: int
    torn_bytes: int
    damaged_records: int = 0


@dataclass(slots=True)
class _Writer:
    state: SessionState
    seq: int
    journal: journal.JournalWriter | None = None
    since_snapshot: int = 0
    snapshot_bytes: int = 0
    broken: bool = False
    fenced: FencedError | None = None
    #: The session directory as a string (the fence check runs twice per durable write; a
    #: ``Path`` built per write costs more CPU than the check's system calls).
    path: str = ""


class FileSessionStore:
    """A ``SessionStore`` on a directory: journal + snapshots + epoch fencing (docs/architecture.md
    §6).

    ``directory``: the store root (created on first write); each session lives in
    ``<directory>/<session_id>/``. ``epoch``: this placement's epoch (``BERTH_EPOCH``; 0 for a
    single-process store, A3S ``FileSessionStore(dir)``). ``fsync``: False skips every fsync
    (only for benchmarks of CPU cost; never in production). ``snapshot_min_bytes``: the
    compaction threshold's lower bound (bytes).

    Errors: ``InvalidIdError`` for unsafe ids; ``FencedError`` when a higher epoch owns the
    session; ``CheckpointError`` for a checkpoint that cannot be used (newer schema, other
    session, corrupt file); ``StoreError`` for I/O failures and values that are not JSON.
    Thread-safe within a process; one writer process per (session, epoch).
    """

    def __init__(
        self,
        directory: str | os.PathLike[str],
        *,
        epoch: int = 0,
        fsync: bool = True,
        snapshot_min_bytes: int = DEFAULT_SNAPSHOT_MIN_BYTES,
    ) -> None:
        self.root = Path(directory)
        self.epoch = fence.check_epoch(epoch)
        self._fsync = fsync
        self.snapshot_min_bytes = snapshot_min_bytes
        self._writers: dict[str, _Writer] = {}
        self._lock = threading.RLock()
        #: This store's writer id, held in ``lease/<epoch>`` of every session it writes.
        self._writer_id = fence.new_writer_id(self)
        #: Damage found by loads of this store, by kind: ``torn_tail`` (an incomplete last record,
        #: ignored) and ``damaged_record`` (a complete record with a bad checksum). Counted once
        #: per load that meets it; the session server exports it as a Prometheus counter.
        self.damage: collections.Counter[str] = collections.Counter()

    def __repr__(self) -> str:
        return f"FileSessionStore({str(self.root)!r}, epoch={self.epoch})"

    # -- paths and reading -------------------------------------------------------------------

    def session_dir(self, session_id: str) -> Path:
        """``<root>/<session_id>`` after checking the id is safe (``InvalidIdError``)."""
        return self.root / check_id("session id", session_id)

    def read_state(self, session_id: str) -> LoadedState | None:
        """Load the session from disk (never from memory, never claiming the lease), or None.

        Reads the newest snapshot of the highest epoch ``<=`` this store's epoch plus its journal.
        Retries when a concurrent compaction removed a file mid-read. Raises ``CheckpointError``
        for a corrupt snapshot or journal or one that belongs to another session.
        """
        d = self.session_dir(session_id)
        for _ in range(_LOAD_ATTEMPTS):
            try:
                listing = layout.scan(d)
            except FileNotFoundError:
                return None
            except OSError as exc:
                raise StoreError(f"cannot list session '{session_id}' in {d}: {exc}") from exc
            newest = listing.newest_snapshot(self.epoch)
            self._refuse_orphan_journals(session_id, d, listing, newest)
            if newest is None:
                return None
            epoch, seq = newest
            try:
                snap = journal.read_file(d / layout.snapshot_name(epoch, seq))
                tail = (
                    journal.read_file(d / layout.journal_name(epoch, seq))
                    if newest in listing.journals
                    else journal.ReadResult([], 0)
                )
            except FileNotFoundError:
                continue  # compacted under us: list again
            except OSError as exc:
                raise StoreError(f"cannot read session '{session_id}' in {d}: {exc}") from exc
            state = self._state_from_snapshot(session_id, epoch, seq, snap)
            for payload in tail.payloads:
                state.apply(check_record(session_id, _decode(session_id, payload)))
            jname = layout.journal_name(epoch, seq)
            if tail.torn_bytes:
                self.damage["torn_tail"] += 1
                log.warning(
                    "store: journal %s of session '%s' ends in a torn record (%d bytes: a write "
                    "that never completed); it is ignored",
                    jname,
                    session_id,
                    tail.torn_bytes,
                )
            for offset, line in tail.damaged:
                self.damage["damaged_record"] += 1
                self._settle_damaged(session_id, jname, state, offset, line)
            return LoadedState(state, epoch, seq, tail.torn_bytes, len(tail.damaged))
        raise StoreError(
            f"session '{session_id}' kept changing while loading it ({_LOAD_ATTEMPTS} attempts)"
        )

    def _refuse_orphan_journals(
        self, session_id: str, d: Path, listing: layout.Listing, newest: tuple[int, int] | None
    ) -> None:
        """Raise ``CheckpointError`` if a journal this epoch may read is newer than the newest
        snapshot: its snapshot was deleted, and loading would silently drop the journal (or
        make the session look new, after which a writer would delete the journal)."""
        orphans = sorted(
            j for j in listing.journals if j[0] <= self.epoch and (newest is None or j > newest)
        )
        if orphans:
            e, s = orphans[-1]
            raise CheckpointError(
                f"session '{session_id}' has journal {layout.journal_name(e, s)} in {d} but its "
                f"snapshot {layout.snapshot_name(e, s)} is missing; refusing to load the session "
                "or to start it afresh (that would lose or delete the journal). Restore the "
                "snapshot, or move the session directory aside to start over; nothing was changed"
            )

    def _settle_damaged(
        self, session_id: str, jname: str, state: SessionState, offset: int, line: bytes
    ) -> None:
        """A complete last record with a bad checksum: it was durable, so it is never dropped
        silently. A readable round intent (``begin``) is applied, so the round stays pending and
        resume reports its unrecorded calls as interrupted instead of asking the model again; a
        readable record of another kind leaves the state safe without it (a lost result or
        commit leaves the round pending) and is logged; an unreadable one refuses the load,
        since it may have been an intent whose tools ran. Raises ``CheckpointError``."""
        where = f"journal {jname} of session '{session_id}', byte {offset}"
        try:
            rec = check_record(session_id, shapes.decode(line[9:]))
        except (ValueError, CheckpointError):
            raise CheckpointError(
                f"{where}: a complete record has a bad checksum and cannot be read; it may be the "
                "intent of a round whose tools ran, so the session is not loaded (move the "
                "journal aside to accept the loss)"
            ) from None
        if rec["t"] == "begin":
            state.apply(rec)
            log.error(
                "store: %s: the intent of round %s of run %s has a bad checksum; kept as an "
                "unfinished round (its calls are reported as interrupted, never re-run blindly)",
                where,
                rec["turn"],
                rec["run"],
            )
        else:
            log.error(
                "store: %s: a %r record has a bad checksum and was not applied", where, rec["t"]
            )

    @staticmethod
    def _state_from_snapshot(
        session_id: str, epoch: int, seq: int, snap: journal.ReadResult
    ) -> SessionState:
        name = layout.snapshot_name(epoch, seq)
        if len(snap.payloads) != 1 or snap.torn_bytes:
            raise CheckpointError(
                f"snapshot {name} of session '{session_id}' is damaged (checksum mismatch or "
                "truncated); refusing to load it"
            )
        rec = _decode(session_id, snap.payloads[0])
        if not isinstance(rec, dict) or rec.get("t") != "snapshot":
            raise CheckpointError(f"{name} of session '{session_id}' is not a snapshot")
        owner = rec.get("session")
        if owner != session_id:
            raise CheckpointError(
                f"snapshot {name} in the directory of session '{session_id}' belongs to session "
                f"'{owner}'; refusing to load another session's checkpoints"
            )
        return SessionState.from_json(session_id, rec.get("state"))

    def _view(self, session_id: str) -> SessionState | None:
        w = self._writers.get(session_id)
        if w is not None:
            return w.state
        loaded = self.read_state(session_id)
        return None if loaded is None else loaded.state

    # -- opening and writing -------------------------------------------------------------------

    def acquire(self, session_id: str) -> None:
        """Open ``session_id`` for writing now: claim the lease (fencing older epochs at once)
        and write the takeover snapshot. Idempotent. Raises ``FencedError`` if a higher epoch
        owns the session. Writes call this implicitly; a session pod calls it at start-up."""
        with self._lock:
            self._writer(session_id)

    def _writer(self, session_id: str) -> _Writer:
        w = self._writers.get(session_id)
        if w is not None:
            return w
        d = self.session_dir(session_id)
        try:
            d.mkdir(parents=True, exist_ok=True, mode=0o700)
            fence.claim(d, session_id, self.epoch, writer=self._writer_id, fsync=self._fsync)
            listing = layout.scan(d)
            for epoch, tmp in listing.temps:  # left by a writer that died mid atomic write
                if epoch <= self.epoch:  # never a newer epoch's write in progress
                    (d / tmp).unlink(missing_ok=True)
        except OSError as exc:
            raise StoreError(f"cannot open session '{session_id}' in {d}: {exc}") from exc
        loaded = self.read_state(session_id)
        state = loaded.state if loaded is not None else SessionState(session_id=session_id)
        w = _Writer(state=state, seq=listing.next_seq(self.epoch), path=str(d))
        self._rotate(session_id, w, w.seq)
        self._writers[session_id] = w
        return w

    def _rotate(self, session_id: str, w: _Writer, seq: int) -> None:
        """Write the state as snapshot ``seq``, start journal ``seq``, delete what it replaces."""
        d = self.session_dir(session_id)
        payload = shapes.encode(
            {
                "t": "snapshot",
                "session": session_id,
                "epoch": self.epoch,
                "seq": seq,
                "state": w.state.to_json(),
            }
        )
        try:
            atomic_write(
                d / layout.snapshot_name(self.epoch, seq),
                journal.frame(payload),
                sync_dir=False,
                fsync=self._fsync,
            )
            new = journal.JournalWriter(d / layout.journal_name(self.epoch, seq), fsync=self._fsync)
        except OSError as exc:
            w.broken = True
            # A newer epoch that took the session over meanwhile clears what older epochs left
            # half-written, this temp file included: that is being fenced, not an I/O failure.
            self._check_fence(w, session_id)
            raise StoreError(f"cannot write a snapshot of session '{session_id}': {exc}") from exc
        if w.journal is not None:
            w.journal.close()
        w.journal, w.seq, w.broken = new, seq, False
        w.since_snapshot, w.snapshot_bytes = 0, len(payload)
        self._collect_garbage(d)

    def _collect_garbage(self, d: Path) -> None:
        """Delete this epoch's superseded files and every epoch older than the newest older one
        (the predecessor's files are kept for forensics and for its readers)."""
        try:
            listing = layout.scan(d)
            older = [e for e, _ in listing.snapshots | listing.journals if e < self.epoch]
            keep_from = max(older) if older else self.epoch
            current = max(s for e, s in listing.snapshots if e == self.epoch)
            for kind, keys in (("snapshot", listing.snapshots), ("journal", listing.journals)):
                for e, s in keys:
                    if e < keep_from or (e == self.epoch and s < current):
                        name = (
                            layout.snapshot_name(e, s)
                            if kind == "snapshot"
                            else (layout.journal_name(e, s))
                        )
                        (d / name).unlink(missing_ok=True)
        except (OSError, ValueError) as exc:  # garbage stays; correctness does not depend on it
            log.warning("store: cannot remove old files in %s: %s", d, exc)

    def _write(self, session_id: str, rec: dict[str, Any]) -> None:
        """Append ``rec``, apply it to the writer's state, compact if due; the lease is checked
        before and after each durability point.

        The append is synced (durable on return: a durability point), except for the result
        that completes its round (``SessionState.completes_round``): that one is only written,
        and made durable by the round's commit, the next write (see ``record_tool_result``).
        A durable append is fenced on both sides: the lease is checked before it and again
        once it is durable (a write that returns was seen by any newer epoch's takeover read).
        The deferred result is not checked by itself: no tool runs and no checkpoint is
        published on it until the commit, whose checks cover it (a writer that lost the lease
        before or while writing the result has its commit refused; the newer epoch never reads
        what it wrote after the takeover).
        Compaction runs only after a durable append, never while a result awaits its commit.

        The state applies the record decoded from the journaled bytes, so it never shares an
        object with the caller and always equals what a load from disk rebuilds.
        """
        payload = shapes.encode(rec)
        with self._lock:
            w = self._writer(session_id)
            if w.fenced is not None:
                raise w.fenced
            defer = rec["t"] == "result" and w.state.completes_round(rec)
            if not defer:
                self._check_fence(w, session_id)
            w.state.precheck(rec)
            if w.broken or w.journal is None:
                self._rotate(session_id, w, w.seq + 1)
            if w.journal is None:  # pragma: no cover - _rotate sets it or raises
                raise StoreError(f"no journal open for session '{session_id}'")
            try:
                if defer:
                    w.since_snapshot += w.journal.append_unsynced(payload)
                else:
                    w.since_snapshot += w.journal.append(payload)
            except OSError as exc:
                w.broken = True  # the segment may now end in a torn record: rotate first
                raise StoreError(f"cannot append to the journal of '{session_id}': {exc}") from exc
            w.state.apply(shapes.decode(payload))
            if defer:
                return  # the commit, next, is the durability point (and may compact)
            # Check again now that the record is durable: if a newer epoch claimed the session
            # meanwhile, it may have read the journal before this record, so the caller must not
            # act on it (no tool may run on an intent the new owner has not seen).
            self._check_fence(w, session_id)
            if w.since_snapshot >= max(self.snapshot_min_bytes, w.snapshot_bytes):
                try:
                    self._rotate(session_id, w, w.seq + 1)
                except StoreError as exc:  # the record is durable; compact on the next write
                    log.warning("store: compaction of '%s' failed: %s", session_id, exc)

    def _check_fence(self, w: _Writer, session_id: str) -> None:
        try:
            fence.check(w.path, session_id, self.epoch, self._writer_id)
        except FencedError as exc:
            w.fenced = exc
            raise

    # -- SessionStore ------------------------------------------------------------------------

    def save_session(self, session_id: str, data: dict[str, Any]) -> None:
        """Journal ``data`` (credentials stripped, see :mod:`.redact`) as the session record."""
        self._write(session_id, session_record(strip_secrets(data)))

    def load_session(self, session_id: str) -> dict[str, Any] | None:
        """A copy of the last ``save_session`` data, or None."""
        with self._lock:
            state = self._view(session_id)
            if state is None or state.session is None:
                return None
            return dict(copy_json(state.session))

    def begin_round(
        self, session_id: str, run_id: str, turn: int, assistant_message: dict[str, Any]
    ) -> None:
        """Durably journal the intent of round ``turn`` of ``run_id`` before its tools run."""
        check_id("run id", run_id)
        self._write(session_id, begin_record(run_id, turn, assistant_message))

    def record_tool_result(
        self, session_id: str, run_id: str, turn: int, tool_call_id: str, result: dict[str, Any]
    ) -> None:
        """Journal one tool result (credentials in its text masked, see :mod:`.redact`);
        ``CheckpointError`` if the round was never begun.

        A result is durable when this returns, except the round's last missing result: that
        one is only written (a crash of this process keeps it; the kernel writes it out) and
        becomes durable with the round's commit, which the agent loop writes right after it (one
        ``fdatasync`` covers both), so a one-call round costs two durability points, not three.
        Only if the machine (or, on a network file system, this client) dies between the two
        can the result be lost; the intent is durable, so the call is then reported as
        interrupted on resume, as for a tool that was still running, and never re-run blindly.
        That result is not fenced by itself: no tool runs and no checkpoint is published on
        it before the commit, and a writer that lost the lease meanwhile has that commit
        refused with ``FencedError``. (The agent loop still emits the result's ``tool_end``
        event before committing; from a writer that lost the lease, that event may announce a
        result the new owner never reads and reports as interrupted.)"""
        check_id("run id", run_id)
        rec = result_record(run_id, turn, tool_call_id, redact_tool_result(result))
        self._write(session_id, rec)

    def commit_round(self, checkpoint: LoopCheckpoint) -> None:
        """Durably journal ``checkpoint`` as a delta against the run's previous checkpoint.

        The record carries only the messages after the kept prefix (``SessionState.delta``):
        O(new messages) when ``checkpoint.known_prefix`` vouches for the prefix, else the
        history is compared first. Nothing of ``checkpoint`` is kept by reference. Credentials
        in the new tool messages are masked (:mod:`.redact`). Raises ``CheckpointError`` for a
        schema version this build cannot load (it would write a checkpoint nobody can resume).
        """
        check_id("run id", checkpoint.run_id)
        checkpoint.ensure_loadable()
        sid = checkpoint.session_id
        with self._lock:
            keep, base = self._writer(sid).state.delta(checkpoint)
            append = redact_messages(checkpoint.messages[keep:])
            self._write(sid, commit_record(checkpoint, keep, base, append))

    def load_checkpoint(self, session_id: str, run_id: str) -> LoopCheckpoint | None:
        """The run's last checkpoint, or None. ``CheckpointError`` if it cannot be used."""
        check_id("run id", run_id)
        with self._lock:
            state = self._view(session_id)
            return None if state is None else state.checkpoint(run_id)

    def load_pending_round(self, session_id: str, run_id: str) -> PendingRound | None:
        """The run's uncommitted round, or None."""
        check_id("run id", run_id)
        with self._lock:
            state = self._view(session_id)
            return None if state is None else state.pending_round(run_id)

    def save_workflow_checkpoint(self, session_id: str, checkpoint: WorkflowCheckpoint) -> None:
        """Durably journal ``checkpoint`` under its ``workflow_id``."""
        check_id("workflow id", checkpoint.workflow_id)
        self._write(session_id, workflow_record(checkpoint))

    def load_workflow_checkpoint(
        self, session_id: str, workflow_id: str
    ) -> WorkflowCheckpoint | None:
        """The workflow's checkpoint (``ensure_loadable`` applied), or None."""
        check_id("workflow id", workflow_id)
        with self._lock:
            state = self._view(session_id)
            return None if state is None else state.workflow(workflow_id)

    def delete_workflow_checkpoint(self, session_id: str, workflow_id: str) -> None:
        """Forget the workflow's checkpoint."""
        check_id("workflow id", workflow_id)
        self._write(session_id, workflow_delete_record(workflow_id))

    # -- extras ----------------------------------------------------------------------------------

    def delete_loop_checkpoint(self, session_id: str, run_id: str) -> None:
        """Forget the run's checkpoint and pending round (A3S ``delete_loop_checkpoint``)."""
        check_id("run id", run_id)
        self._write(session_id, checkpoint_delete_record(run_id))

    def run_ids(self, session_id: str) -> list[str]:
        """Runs with a checkpoint or a pending round, oldest first."""
        with self._lock:
            state = self._view(session_id)
            return [] if state is None else state.run_ids()

    def list_sessions(self) -> list[str]:
        """Ids of the sessions under the root that have a snapshot this epoch may read, sorted."""
        try:
            names = sorted(os.listdir(self.root))
        except FileNotFoundError:
            return []
        out = []
        for name in names:
            if not layout_safe(name):
                continue
            with contextlib.suppress(OSError):
                if layout.scan(self.root / name).newest_snapshot(self.epoch) is not None:
                    out.append(name)
        return out

    def highest_epoch(self, session_id: str) -> int | None:
        """The epoch that holds the session's lease, or None if no writer ever claimed it."""
        return fence.highest_epoch(self.session_dir(session_id))

    def is_fenced(self, session_id: str) -> bool:
        """True if a higher epoch than this store's holds the session's lease."""
        owner = self.highest_epoch(session_id)
        return owner is not None and owner > self.epoch

    def close(self) -> None:
        """Close journal files and give up this writer id (another store of this process may then
        take the epoch over); a later write reopens the session under a new id."""
        with self._lock:
            for w in self._writers.values():
                if w.journal is not None:
                    w.journal.close()
            self._writers.clear()
            fence.release_writer_id(self._writer_id)
            self._writer_id = fence.new_writer_id(self)

    def __enter__(self) -> FileSessionStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def layout_safe(name: str) -> bool:
    """True if ``name`` is a safe session id (directory entries that are not are skipped)."""
    try:
        check_id("session id", name)
    except StoreError:
        return False
    return True


def _decode(session_id: str, payload: bytes) -> Any:
    try:
        return shapes.decode(payload)
    except ValueError as exc:  # checksum matched but not JSON: written by something else
        raise CheckpointError(
            f"store of session '{session_id}' holds a record that is not JSON: {exc}"
        ) from exc
