"""Benchmark: the start-up cost of the shared-volume check (session_runtime.store.fscheck)
against what a session pod already does with the store at start, in the same run and directory.

    .venv/bin/python bench/filesystem_check.py [--dir DIR] [--samples 200]

Baseline (*store start*): what ``SessionPod.build`` does with the store before a run — a fresh
session's ``open_incarnation`` (its owner record), ``FileSessionStore.acquire`` (the lease claim,
takeover snapshot, journal) and ``load_session``. *Check*: one ``check_volume`` of the same
directory. Samples alternate (check, store start, check, ...) so the disk's mood falls on both.
``--dir`` should be on the volume to judge (an NFS mount: every fsync is a round trip there).

Printed: medians and p90 in milliseconds, and the ratio check / store start. Timing is printed,
never asserted.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

from session_runtime.store import FileSessionStore
from session_runtime.store.fscheck import check_volume
from session_runtime.store.incarnation import open_incarnation


def store_start(root: Path, n: int) -> None:
    """A fresh session's store start-up, as a session pod does it."""
    name = f"bench-{n}"
    open_incarnation(root / name, f"uid-{n}")
    store = FileSessionStore(str(root), epoch=1)
    store.acquire(name)
    store.load_session(name)
    store.close()


def timed(fn: object, *args: object) -> float:
    start = time.perf_counter()
    fn(*args)  # type: ignore[operator]
    return (time.perf_counter() - start) * 1000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dir", type=Path, default=None)
    parser.add_argument("--samples", type=int, default=200)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(dir=args.dir, prefix="berth-bench-fscheck-") as tmp:
        root = Path(tmp)
        checks: list[float] = []
        starts: list[float] = []
        for n in range(args.samples):
            checks.append(timed(check_volume, root))
            starts.append(timed(store_start, root, n))
    for label, xs in (("check_volume", checks), ("store start", starts)):
        xs.sort()
        print(
            f"{label:<13} median {statistics.median(xs):7.3f} ms  "
            f"p90 {xs[int(len(xs) * 0.9)]:7.3f} ms  ({len(xs)} samples)"
        )
    ratio = statistics.median(checks) / statistics.median(starts)
    print(f"FSCHECK ratio check / store start (medians): {ratio:.2f}  dir {args.dir or 'tmp'}")


if __name__ == "__main__":
    main()
