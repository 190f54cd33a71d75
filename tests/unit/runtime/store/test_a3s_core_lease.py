"""Lease parity between a3s-code-core 9.x's store writer lease and Berth's placement epochs:
a real 9.x writer (Berth's binding over a3s-code-core) fenced by a newer Berth epoch stops
writing, and a Berth writer fenced by a 9.x lease acquire stops writing
(session_runtime.a3s_core.lease; docs/a3s-compatibility.md, "Lease parity")."""

from __future__ import annotations

from pathlib import Path

import pytest

from session_runtime.a3s_core.binding import CoreAgent, CoreStore
from session_runtime.a3s_core.lease import (
    CORE_DIR,
    ParityFileSessionStore,
    claim_epoch,
    read_core_lease,
)
from session_runtime.errors import FencedError
from session_runtime.store import fence
from tests.a3s_core_support import acl_config, binding

SID = "parity"


@pytest.fixture(autouse=True)
def _binding() -> None:
    binding()


def snapshot_files(core_dir: Path) -> dict[str, bytes]:
    return {str(p): p.read_bytes() for p in sorted((core_dir / "v1" / "sessions").glob("*.json"))}


def test_a_9x_writer_fenced_by_a_newer_berth_epoch_stops_writing(tmp_path: Path) -> None:
    root, workspace = tmp_path / "store", tmp_path / "ws"
    workspace.mkdir()
    core_dir = root / SID / CORE_DIR
    core = CoreStore(str(core_dir))
    assert core.acquire_writer_lease("a3s-host-1")["epoch"] == 1
    session = CoreAgent(acl_config()).session(str(workspace), session_id=SID, store=core)
    session.save()  # the 9.x writer holds the lease: its commits pass
    before = snapshot_files(core_dir)
    assert before

    berth = ParityFileSessionStore(root, epoch=2)
    berth.acquire(SID)  # Berth placement epoch 2 claims the session: both leases move to 2
    assert read_core_lease(core_dir) == (2, f"berth/{berth.writer_id}")
    assert fence.highest_epoch(root / SID) == 2

    with pytest.raises(RuntimeError, match=r"writer lease lost or taken over \(durable epoch 2\)"):
        session.save()
    snapshot = core.load_snapshot(SID)
    assert snapshot is not None
    with pytest.raises(RuntimeError, match="writer lease lost or taken over"):
        core.save_snapshot(snapshot)
    assert snapshot_files(core_dir) == before  # nothing was written after the takeover
    berth.save_session(SID, {"by": "berth"})  # while Berth's epoch 2 writes on
    berth.close()


def test_a_berth_writer_fenced_by_a_9x_acquire_stops_writing(tmp_path: Path) -> None:
    root, workspace = tmp_path / "store", tmp_path / "ws"
    workspace.mkdir()
    berth = ParityFileSessionStore(root, epoch=3)
    berth.acquire(SID)
    berth.save_session(SID, {"v": 1})
    core = CoreStore(str(root / SID / CORE_DIR))
    assert core.acquire_writer_lease("a3s-host-2")["epoch"] == 4  # one above Berth's 3
    session = CoreAgent(acl_config()).session(str(workspace), session_id=SID, store=core)
    session.save()

    with pytest.raises(FencedError, match="a3s-code-core writer lease is at epoch 4"):
        berth.save_session(SID, {"v": 2})
    with pytest.raises(FencedError):  # and it stays stopped
        berth.save_session(SID, {"v": 3})
    berth.close()
    assert ParityFileSessionStore(root, epoch=3).load_session(SID) == {"v": 1}

    with pytest.raises(FencedError):  # a Berth placement at the 9.x writer's epoch is stale
        ParityFileSessionStore(root, epoch=4).acquire(SID)
    newer = ParityFileSessionStore(root, epoch=5)
    newer.acquire(SID)  # a newer one takes it back and fences the 9.x writer in turn
    with pytest.raises(RuntimeError, match=r"lost or taken over \(durable epoch 5\)"):
        session.save()
    newer.close()


def test_a_hosted_9x_session_holds_exactly_the_berth_epoch(tmp_path: Path) -> None:
    root, workspace = tmp_path / "store", tmp_path / "ws"
    workspace.mkdir()
    berth = ParityFileSessionStore(root, epoch=7)
    core = CoreStore(str(berth.core_dir(SID)))
    lease = claim_epoch(root / SID, SID, 7, core, berth.writer_id)
    assert (lease["epoch"], lease["holderId"]) == (7, f"berth/{berth.writer_id}")
    session = CoreAgent(acl_config()).session(str(workspace), session_id=SID, store=core)
    session.save()
    berth.save_session(SID, {"both": "write under epoch 7"})  # the same epoch on both sides

    ParityFileSessionStore(root, epoch=8).acquire(SID)
    with pytest.raises(RuntimeError, match=r"durable epoch 8"):
        session.save()
    with pytest.raises(FencedError):
        berth.save_session(SID, {"late": True})
    with pytest.raises(FencedError):  # epoch 7 cannot be claimed again either
        claim_epoch(root / SID, SID, 7, core, berth.writer_id)
    berth.close()
