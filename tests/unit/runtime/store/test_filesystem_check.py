"""The start-up probe of the shared volume (session_runtime.store.fscheck): a real local
filesystem passes and is left clean; a filesystem that breaks one promise — played through the
probe's system-call seam the way a real one answers (NFSv2 without O_EXCL, SMB without hard
links, a FUSE mount refusing directory fsync, an object-store mount whose rename copies) — is
refused with that property named, and the session's termination code follows."""

from __future__ import annotations

import errno
import os
import time
from pathlib import Path
from typing import Any

import pytest

from session_runtime.store.fscheck import (
    PROPERTIES,
    FilesystemCheckError,
    Ops,
    check_volume,
)
from session_runtime.store.health import store_failure_code


def test_a_local_filesystem_keeps_every_promise_and_is_left_clean(tmp_path: Path) -> None:
    check_volume(tmp_path)
    assert list(tmp_path.iterdir()) == []


def no_excl() -> Ops:
    def open_(path: Any, flags: int, mode: int = 0o777) -> int:
        return os.open(path, flags & ~os.O_EXCL, mode)

    return Ops(open=open_)


def no_dir_fsync() -> Ops:
    def fsync(fd: int) -> None:
        if os.path.isdir(f"/proc/self/fd/{fd}"):
            raise OSError(errno.EINVAL, os.strerror(errno.EINVAL))
        os.fsync(fd)

    return Ops(fsync=fsync)


def copying_rename() -> Ops:
    def replace(src: Any, dst: Any) -> None:
        Path(dst).write_bytes(Path(src).read_bytes())  # the source is left behind

    return Ops(replace=replace)


def no_links() -> Ops:
    def link(src: Any, dst: Any) -> None:
        raise OSError(errno.EPERM, os.strerror(errno.EPERM))

    return Ops(link=link)


def uncounted_links() -> Ops:
    def lstat(path: Any) -> os.stat_result:
        st = os.lstat(path)
        fields = list(st)
        fields[3] = 1  # st_nlink always 1
        return os.stat_result(fields)

    return Ops(lstat=lstat)


def following() -> Ops:
    def open_(path: Any, flags: int, mode: int = 0o777) -> int:
        return os.open(path, flags & ~os.O_NOFOLLOW, mode)

    return Ops(open=open_)


@pytest.mark.parametrize(
    ("ops", "prop"),
    [
        (no_excl, "o_excl"),
        (no_dir_fsync, "fsync"),
        (copying_rename, "atomic_rename"),
        (no_links, "hard_links"),
        (uncounted_links, "hard_links"),
        (following, "o_nofollow"),
    ],
)
def test_a_broken_promise_is_refused_by_name(tmp_path: Path, ops: Any, prop: str) -> None:
    with pytest.raises(FilesystemCheckError) as caught:
        check_volume(tmp_path, ops=ops())
    assert caught.value.prop == prop
    assert f"failed: {prop}:" in str(caught.value)
    assert store_failure_code(caught.value) == "StoreUnavailable"
    assert list(tmp_path.iterdir()) == []  # the probe cleaned up after itself


def test_too_little_space_is_refused_as_store_full(tmp_path: Path) -> None:
    with pytest.raises(FilesystemCheckError) as caught:
        check_volume(tmp_path, min_free_bytes=2**62)
    assert caught.value.prop == "space"
    assert store_failure_code(caught.value) == "StoreFull"


def test_enospc_during_a_probe_is_space(tmp_path: Path) -> None:
    def write(fd: int, data: bytes) -> int:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    with pytest.raises(FilesystemCheckError) as caught:
        check_volume(tmp_path, ops=Ops(write=write))
    assert caught.value.prop == "space"


def test_a_filesystem_without_symlinks_passes_o_nofollow(tmp_path: Path) -> None:
    def symlink(src: Any, dst: Any) -> None:
        raise OSError(errno.EPERM, os.strerror(errno.EPERM))

    check_volume(tmp_path, ops=Ops(symlink=symlink))


def test_every_property_is_covered() -> None:
    assert set(PROPERTIES) == {
        "space",
        "o_excl",
        "fsync",
        "atomic_rename",
        "hard_links",
        "o_nofollow",
    }


def test_a_session_pod_refuses_to_start_naming_the_property(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The pod's build runs the probe before it claims the lease: on a volume without hard
    links it ends ``failed``, code ``StoreUnavailable``, the reason naming ``hard_links`` (the
    operator's Ready/Degraded message), and it wrote no store."""
    from functools import partial

    from berth_contract.options import parse_options
    from session_runtime.metrics import SessionMetrics
    from session_runtime.pod import lifecycle
    from session_runtime.pod.config import parse_env
    from session_runtime.store import fscheck

    monkeypatch.setattr(fscheck, "check_volume", partial(check_volume, ops=no_links()))
    token = tmp_path / "api-token"
    token.write_text("t" * 32)
    env = {
        "BERTH_SESSION": "ns/s",
        "BERTH_SESSION_UID": "u",
        "BERTH_EPOCH": "1",
        "BERTH_STORE_DIR": str(tmp_path / "store"),
        "BERTH_WORKSPACE": str(tmp_path / "ws"),
        "BERTH_OPTIONS_FILE": str(tmp_path / "o.json"),
        "BERTH_API_TOKEN_FILE": str(token),
    }
    options = parse_options({"prompt": "p", "model": "openai/m"})
    pod = lifecycle.SessionPod(parse_env(env), options, SessionMetrics())
    with pytest.raises(FilesystemCheckError) as caught:
        pod.build()
    message = pod.build_failed(caught.value)
    assert (message.outcome, message.code, message.exit_code) == ("failed", "StoreUnavailable", 1)
    assert message.reason is not None and "hard_links" in message.reason
    assert list((tmp_path / "store" / "ns" / "s").iterdir()) == []  # no lease, no owner record


def test_a_worker_refuses_to_start_naming_the_property(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``berth-worker`` probes ``BERTH_WORKSPACES_ROOT`` before it serves: on a volume without
    hard links it exits 1 and its termination log (where the kubelet shows it) names
    ``hard_links``; it never connects to Redis (the URL here leads nowhere)."""
    from functools import partial

    from session_runtime.worker import entry

    root = tmp_path / "workspaces"
    root.mkdir()
    (tmp_path / "key").write_bytes(b"k" * 32)
    env = {
        "BERTH_REDIS_URL": "redis://127.0.0.1:1/0",
        "BERTH_NAMESPACE": "ns",
        "BERTH_LANEWORKER": "pool",
        "POD_NAME": "pool-0",
        "BERTH_WORKSPACES_ROOT": str(root),
        "BERTH_TASK_MASTER_KEY_FILE": str(tmp_path / "key"),
        "BERTH_TOOL_SANDBOX": "best-effort",
    }
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    log = tmp_path / "termination-log"
    monkeypatch.setattr(entry, "TERMINATION_LOG", str(log))
    monkeypatch.setattr(entry, "check_volume", partial(check_volume, ops=no_links()))
    assert entry.main([]) == 1
    assert "hard_links" in log.read_text()
    assert list(root.iterdir()) == []


def test_a_probe_left_by_a_killed_process_is_removed_by_the_next_check(tmp_path: Path) -> None:
    left = tmp_path / ".berth-fscheck-0123456789ab"
    left.mkdir()
    (left / "excl").write_text("first")
    young = tmp_path / ".berth-fscheck-ba9876543210"  # another process's check in progress
    young.mkdir()
    long_ago = time.time() - 3600
    os.utime(left, (long_ago, long_ago))
    (tmp_path / "journal-1-0.rec").write_text("kept")
    check_volume(tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir()) == [young.name, "journal-1-0.rec"]
