"""A full store volume (a real, tiny tmpfs) at the moment a run ends: the run is not reported
completed, the failure names itself ``StoreFull``, the store still holds the run as unfinished,
and once space is back a new placement resumes it to completion with no tool run twice.

Needs to mount a tmpfs (root, as the dev cluster's CI runs); skipped where that is refused.
"""

from __future__ import annotations

import errno
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from session_runtime import SessionOptions
from session_runtime.errors import RunNotDurableError, StoreError
from session_runtime.pod.start import plan_start
from session_runtime.store import FileSessionStore
from session_runtime.store.health import store_failure_code, volume_usage

SCRIPT: list[dict[str, Any]] = [
    {"tool_calls": [{"name": "bash", "arguments": {"command": "echo ran >> count.txt"}}]},
    {"tool_calls": [{"name": "bash", "arguments": {"command": "echo ran >> count2.txt"}}]},
    {"text": "finished"},
    {"text": "finished"},  # asked again by the resumed run: the first answer was never saved
]
SID = "s1"


@pytest.fixture
def volume(tmp_path: Path) -> Iterator[Path]:
    """A 2 MiB tmpfs: a real filesystem that fills up."""
    mnt = tmp_path / "vol"
    mnt.mkdir()
    proc = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", str(mnt)],
        capture_output=True,
        text=True,
        check=False,
    )
    if proc.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {proc.stderr.strip()}")
    try:
        yield mnt
    finally:
        subprocess.run(["umount", "-l", str(mnt)], check=False)


def fill(volume: Path) -> Path:
    """Write zeros to ``volume/filler`` until the filesystem says ENOSPC; the file's path."""
    filler = volume / "filler"
    fd = os.open(filler, os.O_WRONLY | os.O_CREAT, 0o600)
    try:
        block = b"\0" * 65536
        while True:
            try:
                os.write(fd, block)
            except OSError as exc:
                assert exc.errno == errno.ENOSPC
                block = block[: len(block) // 2]
                if not block:
                    break
    finally:
        os.close(fd)
    assert volume_usage(volume).free == 0
    return filler


def options(store: FileSessionStore) -> SessionOptions:
    return SessionOptions(
        model="openai/scripted", session_id=SID, session_store=store, llm_backoff_ms=1
    )


async def test_a_run_whose_end_cannot_be_saved_is_not_completed_and_resumes_once(
    scripted: Any, agent_for: Any, workspace: Path, volume: Path
) -> None:
    srv = await scripted(SCRIPT)
    store = FileSessionStore(volume / "store", epoch=1)
    store.acquire(SID)
    session = agent_for(srv).session(str(workspace), options(store))
    filled: list[Path] = []

    def on_turn_end(event: Any) -> None:
        if event.get("turn") == 2 and not filled:  # the last round is durable; now it fills
            filled.append(fill(volume))

    session.register_hook("fill", "turn_end", on_turn_end)
    with pytest.raises(RunNotDurableError) as caught:
        await session.send_async("go")
    assert store_failure_code(caught.value) == "StoreFull"
    assert session.runs()[-1]["status"] != "completed"

    # What a replacement pod finds: the run unfinished, so it resumes it.
    os.unlink(filled[0])  # space is back
    store2 = FileSessionStore(volume / "store", epoch=2)
    store2.acquire(SID)
    saved = store2.load_session(SID)
    assert saved is not None and saved["runs"][-1]["status"] != "completed"
    resumed = agent_for(srv).resume_session(SID, options(store2), workspace=str(workspace))
    plan = plan_start(None, True, resumed.runs(), False)
    assert plan.action == "resume"
    assert plan.run_id is not None
    result = await resumed.resume_run_async(plan.run_id)
    assert result.text == "finished"
    final = FileSessionStore(volume / "store", epoch=3).load_session(SID)
    assert final is not None and final["runs"][-1]["status"] == "completed"
    # No tool ran twice: each bash call appended exactly one line.
    assert (workspace / "count.txt").read_text() == "ran\n"
    assert (workspace / "count2.txt").read_text() == "ran\n"


def test_store_failure_codes_follow_the_errno_of_the_cause() -> None:
    from session_runtime.errors import CheckpointError, FencedError, StoreError

    def caused(err: int) -> StoreError:
        try:
            try:
                raise OSError(err, os.strerror(err))
            except OSError as exc:
                raise StoreError(f"cannot write: {exc}") from exc
        except StoreError as outer:
            return outer

    assert store_failure_code(caused(errno.ENOSPC)) == "StoreFull"
    assert store_failure_code(caused(errno.EDQUOT)) == "StoreFull"
    assert store_failure_code(caused(errno.EIO)) == "StoreUnavailable"
    assert store_failure_code(caused(errno.ESTALE)) == "StoreUnavailable"
    assert store_failure_code(OSError(errno.EROFS, "read-only")) == "StoreUnavailable"
    assert store_failure_code(FencedError("newer epoch")) is None
    assert store_failure_code(CheckpointError("newer schema")) is None
    assert store_failure_code(ValueError("not the store")) is None


def test_a_session_pod_on_a_full_volume_ends_failed_naming_store_full(volume: Path) -> None:
    """What the operator reads: a pod that cannot even claim its store on a full volume ends
    ``failed`` with code ``StoreFull`` (exit 1), not as bad input and not as a crash."""
    from berth_contract.options import parse_options
    from session_runtime.metrics import SessionMetrics
    from session_runtime.pod.config import parse_env
    from session_runtime.pod.lifecycle import SessionPod

    (volume / "store").mkdir()
    fill(volume)
    token = volume.parent / "api-token"
    token.write_text("t" * 32)
    env = {
        "BERTH_SESSION": "ns/s",
        "BERTH_SESSION_UID": "u",
        "BERTH_EPOCH": "1",
        "BERTH_STORE_DIR": str(volume / "store"),
        "BERTH_WORKSPACE": str(volume.parent / "ws"),
        "BERTH_OPTIONS_FILE": str(volume.parent / "o.json"),
        "BERTH_API_TOKEN_FILE": str(token),
    }
    pod = SessionPod(
        parse_env(env), parse_options({"prompt": "p", "model": "openai/m"}), SessionMetrics()
    )
    with pytest.raises((OSError, StoreError)) as caught:
        pod.build()
    message = pod.build_failed(caught.value)
    assert (message.outcome, message.code, message.exit_code) == ("failed", "StoreFull", 1)
