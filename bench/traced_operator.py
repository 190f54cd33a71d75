"""The operator under ``tracemalloc``, for ``bench/placement.py --memory``: where its memory goes.

    python bench/traced_operator.py OUT_DIR

Runs ``berth_operator.main.main()`` with tracemalloc tracing (4 frames). On SIGUSR1 it writes
``OUT_DIR/snapshot-<k>.txt``: the traced total and the 25 largest allocation sites grouped by
file and line, plus the traced memory grouped by the innermost frame inside a package (kopf,
kubernetes, berth_operator/<subpackage>, ...): a block made by the standard library (``json``,
``copy``) is counted to the package that called it. Tracing slows the operator several times
over (importing the Kubernetes client's API classes alone takes minutes): figures of a traced run
are for memory only, not time.
"""

from __future__ import annotations

import signal
import sys
import tracemalloc
from pathlib import Path
from types import FrameType

FRAMES = 4
TOP = 25


def _owner(trace: tracemalloc.Trace) -> str:
    """The package of the innermost frame outside the standard library (``?`` when none of the
    traced frames is)."""
    for frame in reversed(trace.traceback):
        path = frame.filename
        if "site-packages/" in path:
            return path.split("site-packages/", 1)[1].split("/", 1)[0]
        if "/berth_operator/" in path:
            return "berth_operator/" + path.split("/berth_operator/", 1)[1].split("/", 1)[0]
    return "?"


def write_snapshot(out: Path, index: int) -> Path:
    """Write one report (module docstring) as ``out/snapshot-<index>.txt``; its path."""
    snapshot = tracemalloc.take_snapshot().filter_traces(
        (tracemalloc.Filter(False, tracemalloc.__file__),)
    )
    total = sum(t.size for t in snapshot.traces)
    lines = [f"traced: {total / 2**20:.1f} MiB in {len(snapshot.traces)} blocks", ""]
    for stat in snapshot.statistics("lineno")[:TOP]:
        frame = stat.traceback[0]
        lines.append(
            f"{stat.size / 2**20:8.2f} MiB {stat.count:8d}  {frame.filename}:{frame.lineno}"
        )
    owners: dict[str, int] = {}
    for trace in snapshot.traces:
        key = _owner(trace)
        owners[key] = owners.get(key, 0) + trace.size
    lines += ["", "by the innermost package on the allocating stack:"]
    for key, size in sorted(owners.items(), key=lambda kv: -kv[1])[:TOP]:
        lines.append(f"{size / 2**20:8.2f} MiB  {key}")
    path = out / f"snapshot-{index}.txt"
    path.write_text("\n".join(lines) + "\n")
    return path


def main() -> int:
    out = Path(sys.argv[1])
    out.mkdir(parents=True, exist_ok=True)
    tracemalloc.start(FRAMES)
    count = 0

    def on_signal(signum: int, frame: FrameType | None) -> None:
        nonlocal count
        del signum, frame
        count += 1
        write_snapshot(out, count)

    signal.signal(signal.SIGUSR1, on_signal)
    from berth_operator.main import main as operator_main

    return operator_main()


if __name__ == "__main__":
    raise SystemExit(main())
