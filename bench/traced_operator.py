"""The operator under ``tracemalloc``, for ``bench/placement.py --memory``: where its memory goes.

    python bench/traced_operator.py OUT_DIR

Runs the operator (``berth_operator.launch.main()``, as ``berth-operator`` does) with tracemalloc
tracing (4 frames). On SIGUSR1 it writes
``OUT_DIR/snapshot-<k>.txt``: the traced total and the 25 largest allocation sites grouped by
file and line; the traced memory grouped by the innermost frame inside a package (kopf,
kubernetes, berth_operator/<subpackage>, ...; a block made by the standard library, ``json`` or
``copy``, is counted to the package that called it); the live objects the garbage collector
tracks, counted by type; and the Kubernetes objects held, by kind and by what holds them (what
grows with the number of sessions shows in the last two first); then the RSS, after a full
collection and after glibc's ``malloc_trim`` (the last two steps hand memory back, so a second
report of one run reads lower). ``BERTH_BENCH_TRACE=0`` skips tracemalloc (and the first two
parts): the RSS figures of an untraced operator. Tracing slows the operator several times
over (importing the Kubernetes client's API classes alone takes minutes): figures of a traced
run are for memory only, not time.
"""

from __future__ import annotations

import ctypes
import gc
import os
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


def _by_type() -> list[str]:
    """The ``TOP`` types with the most live gc-tracked objects: count and shallow MiB."""
    counts: dict[str, list[int]] = {}
    for obj in gc.get_objects():
        kind = type(obj)
        entry = counts.setdefault(f"{kind.__module__}.{kind.__qualname__}", [0, 0])
        entry[0] += 1
        entry[1] += sys.getsizeof(obj, 0)
    ranked = sorted(counts.items(), key=lambda kv: -kv[1][0])[:TOP]
    return [f"{count:8d} {size / 2**20:8.2f} MiB  {name}" for name, (count, size) in ranked]


def _holder(obj: object) -> str:
    """A name for a referrer: an instance's ``__dict__`` is named by nothing here, so dicts are
    described by a few of their keys."""
    if isinstance(obj, dict):
        keys = sorted(str(k) for k in list(obj)[:4])
        return "dict{" + ",".join(keys) + "}"
    kind = type(obj)
    return f"{kind.__module__}.{kind.__qualname__}"


def _k8s_objects() -> list[str]:
    """Count the live top-level Kubernetes objects by kind and by the types that refer to them."""
    everything = gc.get_objects()
    wanted = {
        id(o): str(o.get("kind"))
        for o in everything
        if isinstance(o, dict) and "apiVersion" in o and "metadata" in o and "kind" in o
    }
    holders: dict[tuple[str, str], int] = {}
    for obj in everything:
        if isinstance(obj, dict) and id(obj) in wanted:
            continue
        for ref in gc.get_referents(obj):
            kind = wanted.get(id(ref))
            if kind is not None:
                key = (kind, _holder(obj))
                holders[key] = holders.get(key, 0) + 1
    by_kind: dict[str, int] = {}
    for kind in wanted.values():
        by_kind[kind] = by_kind.get(kind, 0) + 1
    lines = [
        f"{count:8d}  {kind}" for kind, count in sorted(by_kind.items(), key=lambda kv: -kv[1])
    ]
    ranked = sorted(holders.items(), key=lambda kv: -kv[1])[:TOP]
    lines += [f"{count:8d}  {kind} held by {holder}" for (kind, holder), count in ranked]
    return lines


def _rss_mib() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def _released() -> list[str]:
    """RSS now, after a full ``gc.collect()``, and after glibc's ``malloc_trim(0)`` (freed heap
    pages handed back): how much of the RSS is garbage or memory the allocator keeps."""
    lines = [f"RSS {_rss_mib():.1f} MiB"]
    gc.collect()
    lines.append(f"RSS after gc.collect(): {_rss_mib():.1f} MiB")
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
        lines.append(f"RSS after malloc_trim(0): {_rss_mib():.1f} MiB")
    except OSError:
        lines.append("no glibc: malloc_trim not tried")
    return lines


def write_snapshot(out: Path, index: int) -> Path:
    """Write one report (module docstring) as ``out/snapshot-<index>.txt``; its path."""
    released = _released()  # first: what follows allocates (a list of every object)
    lines: list[str] = []
    if tracemalloc.is_tracing():
        snapshot = tracemalloc.take_snapshot().filter_traces(
            (tracemalloc.Filter(False, tracemalloc.__file__),)
        )
        total = sum(t.size for t in snapshot.traces)
        lines += [f"traced: {total / 2**20:.1f} MiB in {len(snapshot.traces)} blocks", ""]
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
        lines.append("")
    lines += ["objects the garbage collector tracks, by type (count, shallow size):"]
    lines += _by_type()
    lines += [
        "",
        "Kubernetes objects held (parsed JSON with apiVersion, kind, metadata), by kind and",
    ]
    lines += ["what holds them (the type of each referrer):"]
    lines += _k8s_objects()
    lines += ["", *released]
    path = out / f"snapshot-{index}.txt"
    path.write_text("\n".join(lines) + "\n")
    return path


def main() -> int:
    out = Path(sys.argv[1])
    out.mkdir(parents=True, exist_ok=True)
    if os.environ.get("BERTH_BENCH_TRACE", "1") != "0":
        tracemalloc.start(FRAMES)
    count = 0

    def on_signal(signum: int, frame: FrameType | None) -> None:
        nonlocal count
        del signum, frame
        count += 1
        write_snapshot(out, count)

    signal.signal(signal.SIGUSR1, on_signal)
    from berth_operator.launch import main as operator_main

    return operator_main()


if __name__ == "__main__":
    raise SystemExit(main())
