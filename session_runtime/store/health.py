"""How healthy the store's volume is: why a store write failed, and how full the volume is.

Owned by the store; used by the session pod (:mod:`session_runtime.pod.lifecycle`) to name a
failure in its termination message, and by :class:`session_runtime.metrics.SessionMetrics` for
the ``berth_session_store_*`` gauges.

A failure is a store failure when a :class:`~session_runtime.errors.StoreError` (other than
fencing or an unusable checkpoint, which are not about the volume) or an ``OSError`` ended the
work. It is :data:`~berth_contract.termination.STORE_FULL` when an ``OSError`` in its cause chain
has ``errno`` ``ENOSPC`` or ``EDQUOT`` (write(2), fsync(2): "no space left on device", "disk
quota exceeded" — NFS reports a full export as either, often only at fsync or close) or when
the start-up check (:mod:`.fscheck`) found too little ``space``, else
:data:`~berth_contract.termination.STORE_UNAVAILABLE`.
"""

from __future__ import annotations

import errno
import os
import stat
from dataclasses import dataclass
from pathlib import Path

from berth_contract.termination import STORE_FULL, STORE_UNAVAILABLE
from session_runtime.errors import CheckpointError, FencedError, StoreError

#: errno values that mean "the volume (or the quota on it) is full".
FULL_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT})


def store_failure_code(exc: BaseException) -> str | None:
    """``StoreFull``, ``StoreUnavailable`` or None (not a failure of the store's volume), for
    the error that ended a run or a start-up (module docstring). Follows ``__cause__`` and
    ``__context__`` (at most 16 links, so a cycle cannot hang it)."""
    if isinstance(exc, FencedError | CheckpointError):
        return None
    if not isinstance(exc, StoreError | OSError):
        return None
    link: BaseException | None = exc
    for _ in range(16):
        if link is None:
            break
        if isinstance(link, OSError) and link.errno in FULL_ERRNOS:
            return STORE_FULL
        if getattr(link, "prop", None) == "space":  # fscheck.FilesystemCheckError
            return STORE_FULL
        link = link.__cause__ or link.__context__
    return STORE_UNAVAILABLE


@dataclass(frozen=True, slots=True)
class VolumeUsage:
    """Space of the filesystem holding a path, in bytes (statvfs(2)): ``size`` in all,
    ``free`` for an unprivileged writer (``f_bavail``, what the store can still use)."""

    size: int
    free: int


def volume_usage(path: str | Path) -> VolumeUsage:
    """:class:`VolumeUsage` of the filesystem of ``path``. Raises OSError (path missing,
    stale mount)."""
    st = os.statvfs(path)
    return VolumeUsage(size=st.f_blocks * st.f_frsize, free=st.f_bavail * st.f_frsize)


def tree_bytes(path: str | Path) -> int:
    """Bytes of the regular files under ``path`` (``st_size``; symlinks are not followed and
    count nothing). A store holds few files (the journal compacts into snapshots), so this is
    a short walk. A missing path, or a file removed during the walk, counts 0."""
    total = 0
    for root, _dirs, files in os.walk(path):
        for name in files:
            try:
                st = os.lstat(os.path.join(root, name))
            except OSError:
                continue
            if stat.S_ISREG(st.st_mode):
                total += st.st_size
    return total
