"""File names of the file store, one directory per session (docs/architecture.md §6)::

    <root>/<session_id>/
        lease/<epoch>                     one empty file per epoch that claimed the session;
                                          the highest name is the lease (see :mod:`.fence`)
        snapshot-<epoch>-<seq>.rec        the whole session state (one framed record)
        journal-<epoch>-<seq>.rec         records appended after snapshot <epoch>-<seq>
        .tmp-*                            temp files of atomic writes (never read)

``<epoch>`` and ``<seq>`` are zero-padded to 10 digits so names sort numerically. The state of an
epoch is its newest snapshot plus the journal with the same ``<epoch>-<seq>``; a loader with epoch
``E`` reads the state of the highest epoch ``<= E`` that has a snapshot.

Owned by ``session_runtime.store``; used by :mod:`.file` and :mod:`.fence`.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from pathlib import Path

from session_runtime.store.atomic import TMP_PREFIX

#: Largest epoch or sequence number a name can hold.
MAX_NUMBER = 9_999_999_999

LEASE_DIR = "lease"
_NAME = re.compile(r"(snapshot|journal)-(\d{10})-(\d{10})\.rec")


def snapshot_name(epoch: int, seq: int) -> str:
    """``snapshot-<epoch>-<seq>.rec``."""
    return f"snapshot-{epoch:010d}-{seq:010d}.rec"


def journal_name(epoch: int, seq: int) -> str:
    """``journal-<epoch>-<seq>.rec``."""
    return f"journal-{epoch:010d}-{seq:010d}.rec"


def lease_name(epoch: int) -> str:
    """``<epoch>`` zero-padded: the lease file of one epoch."""
    return f"{epoch:010d}"


@dataclass(slots=True)
class Listing:
    """What a session directory holds: (epoch, seq) of snapshots and journals, temp files."""

    snapshots: set[tuple[int, int]] = field(default_factory=set)
    journals: set[tuple[int, int]] = field(default_factory=set)
    #: temp files as (epoch of the file they were to become, name)
    temps: list[tuple[int, str]] = field(default_factory=list)

    def newest_snapshot(self, max_epoch: int) -> tuple[int, int] | None:
        """The newest snapshot of the highest epoch ``<= max_epoch``, or None."""
        ok = [es for es in self.snapshots if es[0] <= max_epoch]
        return max(ok) if ok else None

    def next_seq(self, epoch: int) -> int:
        """One more than the highest sequence number ``epoch`` has used (0 if none)."""
        used = [s for e, s in self.snapshots | self.journals if e == epoch]
        return max(used) + 1 if used else 0


def scan(directory: Path) -> Listing:
    """List ``directory`` (a session directory); raises ``FileNotFoundError`` if it is missing."""
    out = Listing()
    for name in os.listdir(directory):
        m = _NAME.fullmatch(name)
        if m:
            key = (int(m.group(2)), int(m.group(3)))
            (out.snapshots if m.group(1) == "snapshot" else out.journals).add(key)
        elif name.startswith(TMP_PREFIX):
            t = _NAME.match(name[len(TMP_PREFIX) :])
            if t:
                out.temps.append((int(t.group(2)), name))
    return out
