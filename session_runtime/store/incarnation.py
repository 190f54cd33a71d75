"""Which AgentSession object owns a kept session directory, and from which store epoch on.

Owned by ``session_runtime.store``; used by the session pod before it opens the store.

A session's store is keyed by its name, and it outlives its AgentSession object when that object
is deleted without ``berth.dev/delete-store``. A new object of the same name (a new
``metadata.uid``) then finds the kept conversation. Each object is an *incarnation* of the
session, recorded in ``<session dir>/owners/<uid>.json``::

    {"uid": "...", "baseEpoch": 7, "inheritedRuns": ["run-1", "run-2"] | null, "sinceMs": ...}

- ``baseEpoch``: when this incarnation first arrived, the highest store epoch (lease) any
  earlier one had claimed, and always above every earlier incarnation's ``baseEpoch`` (so
  incarnations are ordered by it; a pod of an older one is refused with ``FencedError``).
  Placement epochs (``BERTH_EPOCH``) start at 1 for every object, but the store's fencing
  (:mod:`.fence`) needs epochs that only move up, so a pod writes with store epoch
  ``baseEpoch + BERTH_EPOCH``: any pod of an earlier incarnation still running is fenced out at
  once, and the new object's own epochs keep their order.
- ``inheritedRuns``: the run ids the store held when this incarnation first claimed it (after
  the claim, so no earlier writer can add one). They belong to the deleted object: the new
  object's start plan never treats them as its own, so it never reports their result; its prompt
  starts a new run in the kept conversation (the A3S model: one session, one run per send).
  ``null`` until the first pod of the incarnation has claimed the store.

The file is created with ``link`` (exclusive): two pods of one incarnation agree on one
``baseEpoch``. The first incarnation (no other record) has ``baseEpoch`` 0 and inherits nothing;
this includes a store written before incarnations were recorded, which its first opener adopts
as before.

Errors: ``StoreError`` when the record cannot be read or written (I/O, or not the JSON above).
"""

from __future__ import annotations

import json
import os
import secrets
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from session_runtime.errors import FencedError, StoreError
from session_runtime.store import fence
from session_runtime.store.atomic import fsync_dir
from session_runtime.store.ids import check_id

OWNERS_DIR = "owners"


@dataclass(frozen=True, slots=True)
class Incarnation:
    """One AgentSession object's claim on a session directory (module docstring)."""

    uid: str
    base_epoch: int
    inherited_runs: tuple[str, ...] | None
    earlier: bool
    """True when an earlier incarnation (another uid) was recorded: this object continues a kept
    conversation."""

    def store_epoch(self, placement_epoch: int) -> int:
        """The store epoch of this object's pod of ``placement_epoch`` (``BERTH_EPOCH``)."""
        return self.base_epoch + placement_epoch

    def own_runs(self, runs: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """``runs`` without the inherited ones (all of them while the list is not yet known)."""
        if self.inherited_runs is None:
            return []
        inherited = set(self.inherited_runs)
        return [r for r in runs if r.get("id") not in inherited]


def _record_path(session_dir: Path, uid: str) -> Path:
    return session_dir / OWNERS_DIR / f"{check_id('session uid', uid)}.json"


def _read(path: Path) -> dict[str, Any] | None:
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as exc:
        raise StoreError(f"cannot read incarnation record {path}: {exc}") from exc
    if not isinstance(data, dict) or not isinstance(data.get("baseEpoch"), int):
        raise StoreError(f"incarnation record {path} is not an incarnation record")
    return data


def _write(path: Path, data: dict[str, Any], *, exclusive: bool) -> bool:
    """Write ``data`` atomically; with ``exclusive`` only if ``path`` does not exist yet
    (returns False then). fsyncs the file and the directory."""
    tmp = path.with_name(f".tmp-{path.name}-{secrets.token_hex(4)}")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        os.write(fd, json.dumps(data, sort_keys=True).encode())
        os.fsync(fd)
    finally:
        os.close(fd)
    try:
        if exclusive:
            os.link(tmp, path)
        else:
            os.replace(tmp, path)
    except FileExistsError:
        return False
    finally:
        tmp.unlink(missing_ok=True)
    fsync_dir(path.parent)
    return True


def _from(data: dict[str, Any], earlier: bool) -> Incarnation:
    runs = data.get("inheritedRuns")
    return Incarnation(
        uid=str(data["uid"]),
        base_epoch=int(data["baseEpoch"]),
        inherited_runs=None if runs is None else tuple(str(r) for r in runs),
        earlier=earlier,
    )


def open_incarnation(session_dir: Path, uid: str) -> Incarnation:
    """This object's incarnation record, created when absent (module docstring). Call before the
    store is opened for writing.

    Raises ``FencedError`` when a newer incarnation (a later object of the same name) exists: a
    pod of a deleted object never writes again. ``StoreError`` for I/O or a damaged record,
    ``InvalidIdError`` for a uid that is not a safe file name."""
    path = _record_path(session_dir, uid)
    owners = session_dir / OWNERS_DIR
    try:
        names = [n for n in os.listdir(owners) if n.endswith(".json") and n != path.name]
    except FileNotFoundError:
        names = []
    other_bases = [int(rec["baseEpoch"]) for n in names if (rec := _read(owners / n))]
    newest_other = max(other_bases, default=-1)
    found = _read(path)
    if found is not None:
        if newest_other > int(found["baseEpoch"]):
            raise FencedError(
                f"session '{session_dir.name}' belongs to a newer AgentSession of the same name "
                f"(this pod's object {uid} was deleted); this process must not write"
            )
        return _from(found, bool(names))
    # A later object starts above every epoch an earlier one used; the first starts at 0.
    base = max(fence.highest_epoch(session_dir) or 0, newest_other + 1) if names else 0
    data = {
        "uid": uid,
        "baseEpoch": base,
        "inheritedRuns": None if names else [],
        "sinceMs": int(time.time() * 1000),
    }
    try:
        owners.mkdir(parents=True, exist_ok=True, mode=0o700)
        if not _write(path, data, exclusive=True):
            found = _read(path)  # another pod of this object won the race: use its record
            if found is None:
                raise StoreError(f"incarnation record {path} vanished")
            return _from(found, bool(names))
    except OSError as exc:
        raise StoreError(f"cannot record incarnation {uid} in {owners}: {exc}") from exc
    return _from(data, bool(names))


def record_inherited(session_dir: Path, inc: Incarnation, run_ids: list[str]) -> Incarnation:
    """Record the runs this incarnation inherited (the store's run ids, read *after* this pod
    claimed the store, so no earlier writer can still add one). Idempotent: a record that
    already lists them wins. Raises ``StoreError``."""
    if inc.inherited_runs is not None:
        return inc
    path = _record_path(session_dir, inc.uid)
    data = _read(path)
    if data is None:
        raise StoreError(f"incarnation record {path} vanished")
    if data.get("inheritedRuns") is not None:
        return _from(data, inc.earlier)
    data["inheritedRuns"] = list(run_ids)
    try:
        _write(path, data, exclusive=False)
    except OSError as exc:
        raise StoreError(f"cannot update incarnation record {path}: {exc}") from exc
    return _from(data, inc.earlier)
