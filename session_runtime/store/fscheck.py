"""A filesystem that proves itself: probe the mounted shared volume for what the store needs
before anything is written to it (docs/architecture.md §6, "The shared volume").

Owned by the store; called at start-up by the session pod (:mod:`session_runtime.pod.lifecycle`,
in its own ``BERTH_STORE_DIR/<ns>/<name>``) and by ``berth-worker``
(:mod:`session_runtime.worker.entry`, on ``BERTH_WORKSPACES_ROOT``). A filesystem that lacks
a property would not fail at once: it would corrupt a store later (a torn lease, a run resumed
twice). So the process refuses to run, naming
the property, and the operator shows it (termination code ``StoreUnavailable``, or ``StoreFull``
for space; :mod:`berth_contract.termination`).

Properties, in the order checked (each is what a store operation relies on):

================  ==========================================================================
``space``         at least ``min_free_bytes`` usable (statvfs ``f_bavail``); the probes below
                  write a few hundred bytes
``o_excl``        ``open(O_CREAT|O_EXCL)`` fails with ``EEXIST`` on an existing name (the
                  lease claim, temp files)
``fsync``         ``fsync`` of a file and of a directory succeeds (crash-atomic writes; some
                  FUSE and SMB mounts answer ``EINVAL`` for a directory)
``atomic_rename`` ``rename`` within a directory replaces the target in one step: the new bytes
                  under the target name, the source name gone (snapshots, the lease takeover)
``hard_links``    ``link`` works and ``st_nlink`` counts it (2, then 1 after an unlink): the
                  lease is published by ``link`` so that two claims never overwrite each other
``o_nofollow``    ``open(O_NOFOLLOW)`` on a symlink fails with ``ELOOP`` (the worker and the
                  store never follow a link a tool planted); a filesystem without symlinks
                  (``symlink`` refused) passes, as no link can be planted on it
================  ==========================================================================

The probe works in a fresh directory ``.berth-fscheck-<random>`` under the root and removes it
(and any such directory a process killed during its check left behind).
System calls go through :class:`Ops` (the ``os`` functions by default) so a test can play a
filesystem that breaks one promise.
"""

from __future__ import annotations

import contextlib
import errno
import os
import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from session_runtime.errors import StoreError
from session_runtime.store.health import FULL_ERRNOS, volume_usage

#: Default free space demanded at start-up (bytes): a few rounds' journal and a snapshot.
MIN_FREE_BYTES: Final = 16 * 1024 * 1024

#: Name prefix of the probe directories (one per check; a leftover is removed by the next).
PROBE_PREFIX: Final = ".berth-fscheck-"

#: Age (seconds) after which a probe directory is a leftover, not a check in progress.
STALE_PROBE_SECONDS: Final = 300

PROPERTIES: Final = ("space", "o_excl", "fsync", "atomic_rename", "hard_links", "o_nofollow")


class FilesystemCheckError(StoreError):
    """The shared volume lacks ``prop`` (one of :data:`PROPERTIES`): ``detail`` says how."""

    def __init__(self, root: str | os.PathLike[str], prop: str, detail: str) -> None:
        super().__init__(
            f"filesystem check of {os.fspath(root)} failed: {prop}: {detail}; the store needs "
            "it (docs/architecture.md, 'The shared volume')"
        )
        self.prop = prop


@dataclass
class Ops:
    """The system calls the probe makes (``os``'s by default)."""

    open: Callable[..., int] = os.open
    write: Callable[[int, bytes], int] = os.write
    read: Callable[[int, int], bytes] = os.read
    close: Callable[[int], None] = os.close
    fsync: Callable[[int], None] = os.fsync
    replace: Callable[[Any, Any], None] = os.replace
    link: Callable[[Any, Any], None] = os.link
    symlink: Callable[[Any, Any], None] = os.symlink
    lstat: Callable[[Any], os.stat_result] = os.lstat
    unlink: Callable[[Any], None] = os.unlink


def check_volume(
    root: str | os.PathLike[str], *, min_free_bytes: int = MIN_FREE_BYTES, ops: Ops | None = None
) -> None:
    """Probe the filesystem of directory ``root`` (module docstring). Returns None when every
    property holds; raises :class:`FilesystemCheckError` naming the first that does not (an
    ``ENOSPC``/``EDQUOT`` during a probe is ``space``)."""
    ops = ops or Ops()
    root = Path(root)
    try:
        free = volume_usage(root).free
    except OSError as exc:
        raise FilesystemCheckError(root, "space", f"statvfs failed: {exc}") from exc
    if free < min_free_bytes:
        raise FilesystemCheckError(
            root, "space", f"{free} bytes free, {min_free_bytes} needed to start"
        )
    _remove_stale_probes(root)
    probe = root / f"{PROBE_PREFIX}{secrets.token_hex(6)}"
    current = ["o_excl"]
    try:
        os.mkdir(probe, 0o700)
        for prop, step in _STEPS:
            current[0] = prop
            step(probe, ops)
    except FilesystemCheckError:
        raise
    except OSError as exc:
        name = "space" if exc.errno in FULL_ERRNOS else current[0]
        raise FilesystemCheckError(root, name, f"{type(exc).__name__}: {exc}") from exc
    finally:
        _remove(probe)


def checked_store_dir(session_dir: Path) -> Path:
    """Create ``session_dir`` (mode 0700, parents as needed; a session pod may write only
    there) and :func:`check_volume` it; returns it. Raises OSError or FilesystemCheckError."""
    session_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
    check_volume(session_dir)
    return session_dir


def _write(ops: Ops, path: Path, data: bytes, flags: int = 0, *, sync: bool = False) -> None:
    """Write ``data`` to a new file (fsync only with ``sync``: each is a round trip on NFS)."""
    fd = ops.open(path, os.O_WRONLY | os.O_CREAT | flags | os.O_CLOEXEC, 0o600)
    try:
        view = memoryview(data)
        while view:
            view = view[ops.write(fd, bytes(view)) :]
        if sync:
            ops.fsync(fd)
    finally:
        ops.close(fd)


def _read(ops: Ops, path: Path) -> bytes:
    fd = ops.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        return ops.read(fd, 4096)
    finally:
        ops.close(fd)


def _o_excl(probe: Path, ops: Ops) -> None:
    _write(ops, probe / "excl", b"first", os.O_EXCL)
    try:
        fd = ops.open(probe / "excl", os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        return
    ops.close(fd)
    raise FilesystemCheckError(probe.parent, "o_excl", "O_EXCL created an existing file")


def _fsync(probe: Path, ops: Ops) -> None:
    _write(ops, probe / "synced", b"data", sync=True)
    fd = ops.open(probe, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        ops.fsync(fd)
    finally:
        ops.close(fd)


def _atomic_rename(probe: Path, ops: Ops) -> None:
    _write(ops, probe / "target", b"old")
    _write(ops, probe / "source", b"new")
    ops.replace(probe / "source", probe / "target")
    got = _read(ops, probe / "target")
    gone = not os.path.lexists(probe / "source")
    if got != b"new" or not gone:
        source = "is gone" if gone else "remains"
        detail = f"after rename the target holds {got!r} and the source {source}"
        raise FilesystemCheckError(probe.parent, "atomic_rename", detail)


def _hard_links(probe: Path, ops: Ops) -> None:
    _write(ops, probe / "one", b"linked")
    ops.link(probe / "one", probe / "two")
    counts = (ops.lstat(probe / "one").st_nlink, ops.lstat(probe / "two").st_nlink)
    ops.unlink(probe / "two")
    after = ops.lstat(probe / "one").st_nlink
    if counts != (2, 2) or after != 1:
        detail = f"link counts {counts[0]}, {counts[1]} after link, {after} after unlink (2, 2, 1)"
        raise FilesystemCheckError(probe.parent, "hard_links", detail)


def _o_nofollow(probe: Path, ops: Ops) -> None:
    try:
        ops.symlink(probe / "one", probe / "link")
    except OSError as exc:
        if exc.errno in (errno.EPERM, errno.EOPNOTSUPP, errno.ENOSYS):
            return  # no symlinks on this filesystem: none can be planted
        raise
    try:
        fd = ops.open(probe / "link", os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            return
        raise
    ops.close(fd)
    raise FilesystemCheckError(probe.parent, "o_nofollow", "O_NOFOLLOW opened a symlink")


_STEPS: Final = (
    ("o_excl", _o_excl),
    ("fsync", _fsync),
    ("atomic_rename", _atomic_rename),
    ("hard_links", _hard_links),
    ("o_nofollow", _o_nofollow),
)


def _remove_stale_probes(root: Path) -> None:
    """Remove probe directories older than :data:`STALE_PROBE_SECONDS` (a process killed during
    its check); a younger one may be another process's check in progress."""
    now = time.time()
    for name in os.listdir(root):
        if name.startswith(PROBE_PREFIX):
            with contextlib.suppress(OSError):
                if now - os.lstat(root / name).st_mtime > STALE_PROBE_SECONDS:
                    _remove(root / name)


def _remove(probe: Path) -> None:
    """Remove the probe directory and what is in it (best effort: a failing volume may refuse)."""
    try:
        names = os.listdir(probe)
    except OSError:
        return
    for name in names:
        with contextlib.suppress(OSError):
            os.unlink(probe / name)
    with contextlib.suppress(OSError):
        os.rmdir(probe)
