"""Where a benchmark's CPU went: the machine's busy time and each process's, from ``/proc``;
and what an ``fsync`` costs meanwhile (:class:`FsyncProbe`). ``cold.py`` reads them around a
burst of new session pods, ``drain.py`` around a drain."""

from __future__ import annotations

import os
import threading
import time
from collections import Counter
from pathlib import Path

TICK = os.sysconf("SC_CLK_TCK")


def busy_seconds() -> float:
    """CPU seconds the whole machine spent outside idle and iowait so far (``/proc/stat``)."""
    values = [int(v) for v in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    return (sum(values) - values[3] - values[4]) / TICK


def cgroup_seconds(path: Path) -> float | None:
    """A cgroup v1 cpuacct counter in seconds, or None where this machine has no such cgroup."""
    try:
        return int(path.read_text()) / 1e9
    except (OSError, ValueError):
        return None


def processes() -> dict[int, tuple[str, float, float]]:
    """pid → (name, own CPU seconds, CPU seconds of the children it reaped)."""
    out: dict[int, tuple[str, float, float]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            text = stat.read_text()
        except OSError:
            continue
        name = text[text.index("(") + 1 : text.rindex(")")]
        fields = text[text.rindex(")") + 2 :].split()
        own = (int(fields[11]) + int(fields[12])) / TICK
        reaped = (int(fields[13]) + int(fields[14])) / TICK
        out[int(stat.parent.name)] = (name, own, reaped)
    return out


def by_name(
    before: dict[int, tuple[str, float, float]], after: dict[int, tuple[str, float, float]]
) -> tuple[Counter[str], Counter[str]]:
    """CPU spent between two :func:`processes` readings, summed by process name: own, reaped."""
    own: Counter[str] = Counter()
    reaped: Counter[str] = Counter()
    for pid, (name, cpu, children) in after.items():
        old = before.get(pid)
        base = old if old is not None and old[0] == name else (name, 0.0, 0.0)
        own[name] += cpu - base[1]
        reaped[name] += children - base[2]
    return own, reaped


def top(used: Counter[str], count: int = 6) -> str:
    """The ``count`` process names that spent the most CPU in ``used``, as ``name seconds``."""
    return ", ".join(f"{name} {seconds:.1f}" for name, seconds in used.most_common(count))


class FsyncProbe(threading.Thread):
    """Until ``stop`` is set: every ``every`` seconds, write 4 KiB to a file in ``directory``
    and ``fsync`` it, as a session's store does on each durable write; ``seconds`` holds how
    long each write + fsync took. The file is removed at the end."""

    def __init__(self, directory: Path, every: float = 0.05) -> None:
        super().__init__(daemon=True)
        self.path = directory / f".fsync-probe-{os.getpid()}"
        self.every = every
        self.seconds: list[float] = []
        self.stop = threading.Event()

    def run(self) -> None:
        block = b"x" * 4096
        try:
            while not self.stop.wait(self.every):
                started = time.perf_counter()
                fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
                try:
                    os.write(fd, block)
                    os.fsync(fd)
                finally:
                    os.close(fd)
                self.seconds.append(time.perf_counter() - started)
        finally:
            self.path.unlink(missing_ok=True)

    def summary(self) -> str:
        """``p50 / p99 / max`` in milliseconds over the probes made."""
        v = sorted(self.seconds)
        if not v:
            return "no probe"
        p99 = v[min(len(v) - 1, round(0.99 * (len(v) - 1)))]
        return f"p50 {v[len(v) // 2] * 1e3:.1f} / p99 {p99 * 1e3:.1f} / max {v[-1] * 1e3:.1f} ms"
