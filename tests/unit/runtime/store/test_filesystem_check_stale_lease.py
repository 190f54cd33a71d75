"""The store's fencing when the lease is read stale, as an NFS client with attribute and
directory caching does (docs/architecture.md, "The shared volume": close-to-open consistency
revalidates a file at open(2), but a directory listing may be served from the cache for up to
``acdirmax`` seconds).

The staleness is played at the one call that can be served from the cache: the listing of the
lease directory (``highest_epoch``). Opening the writer's own lease file stays fresh, as
close-to-open guarantees. Two lines of defence are shown:

1. a newer epoch removes the lease files below its own: the old writer's open of its own lease
   file finds it gone, so it is fenced even while its listing still says it holds the lease;
2. when that file is still there (the newer writer died between its claim and the clean-up),
   the old writer may go on writing — but into files named by its epoch, which no newer loader
   reads: nothing it writes after the takeover is seen.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from session_runtime.errors import FencedError
from session_runtime.store import FileSessionStore
from session_runtime.store import fence as fence_mod
from session_runtime.store.layout import lease_name

SID = "s1"


@contextlib.contextmanager
def stale_lease_listing(lease_dir: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """While active, listing ``lease_dir`` answers what it held on entry (a cached readdir)."""
    cached = sorted(os.listdir(lease_dir))
    real = os.listdir

    def listdir(path: Any = ".") -> list[str]:
        if os.fspath(path) == os.fspath(lease_dir):
            return list(cached)
        return real(path)

    with monkeypatch.context() as m:
        m.setattr(fence_mod.os, "listdir", listdir)
        yield


def test_a_stale_listing_cannot_hide_the_takeover_from_a_fresh_open(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    old = FileSessionStore(tmp_path, epoch=1)
    old.acquire(SID)
    old.save_session(SID, {"v": 1})
    lease_dir = tmp_path / SID / "lease"
    with stale_lease_listing(lease_dir, monkeypatch):
        new = FileSessionStore(tmp_path, epoch=2)
        new.acquire(SID)  # claims lease/2 and removes lease/1 (its own view is cached too)
        assert fence_mod.highest_epoch(tmp_path / SID) == 1  # the stale view
        with pytest.raises(FencedError):
            old.save_session(SID, {"v": "old writer after the takeover"})
    new.save_session(SID, {"v": 2})
    assert FileSessionStore(tmp_path, epoch=3).load_session(SID) == {"v": 2}


def test_what_a_stale_writer_still_writes_is_never_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    old = FileSessionStore(tmp_path, epoch=1)
    old.acquire(SID)
    old.save_session(SID, {"v": 1})
    lease_dir = tmp_path / SID / "lease"
    mine = lease_dir / lease_name(1)
    holder = mine.read_bytes()
    with stale_lease_listing(lease_dir, monkeypatch):
        new = FileSessionStore(tmp_path, epoch=2)
        new.acquire(SID)
        # The newer writer died before its clean-up: lease/1 is still there, so the old
        # writer's own lease file opens fine and its stale listing shows no higher epoch.
        mine.write_bytes(holder)
        old.save_session(SID, {"v": "old writer after the takeover"})  # not fenced: stale
    assert FileSessionStore(tmp_path, epoch=2).load_session(SID) == {"v": 1}
    assert FileSessionStore(tmp_path, epoch=3).load_session(SID) == {"v": 1}
    # Once the cache expires the old writer sees epoch 2 and stops.
    with pytest.raises(FencedError):
        old.save_session(SID, {"v": "again"})
