"""Benchmark: what one tool round costs the FileSessionStore, young vs. old session, and against
the cheapest durable write of the same bytes (ARCHITECTURE §6: per-round cost stays flat).

    .venv/bin/python bench/checkpoint.py [--dir DIR] [--samples 50] [--old-round 1000]

A "round" is what the agent loop writes for one tool round with one bash call: ``begin_round``
(the assistant message), ``record_tool_result`` (a ~200-byte output) and ``commit_round`` (the
LoopCheckpoint, built like the loop builds it: shallow copies of every message). Each is one
appended, fdatasync'ed journal record, so a round has three durability points.

Printed figures (medians of ``--samples`` interleaved samples, same directory, same run):

1. the write time of round 10 of a fresh session and of round ``--old-round`` of an old one,
   and their ratio (flat cost => about 1);
2. the write time of a round against a bare ``write + fsync + rename`` of the same bytes
   (one temp file, no directory fsync), and their ratio;
3. amortised means that include snapshots/compaction, for the record.

Timing is printed, never asserted.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from session_runtime.store import FileSessionStore, LoopCheckpoint


class Session:
    """Drives the store the way the agent loop does, for one session and one run."""

    def __init__(self, store: FileSessionStore, session_id: str) -> None:
        self.store = store
        self.sid = session_id
        self.messages: list[dict[str, Any]] = [
            {"role": "system", "content": "You are a coding agent." * 20},
            {"role": "user", "content": "Fix the failing test in the repository."},
        ]
        self.turn = 0
        store.acquire(session_id)

    def round(self) -> float:
        """Write one round; returns the seconds spent in store calls (the loop's own work of
        building the checkpoint, a shallow copy of every message, is not counted)."""
        self.turn += 1
        t = self.turn
        call = f"call_{t}_0"
        amsg = {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": call,
                    "type": "function",
                    "function": {
                        "name": "bash",
                        "arguments": f'{{"command": "pytest -q tests/test_{t % 97}.py"}}',
                    },
                }
            ],
        }
        output = f"round {t}: " + "." * 180
        t0 = time.perf_counter()
        self.store.begin_round(self.sid, "run-1", t, amsg)
        self.store.record_tool_result(
            self.sid, "run-1", t, call, {"output": output, "exit_code": 0, "is_error": False}
        )
        spent = time.perf_counter() - t0
        self.messages.append(amsg)
        self.messages.append({"role": "tool", "tool_call_id": call, "content": output})
        cp = LoopCheckpoint(
            run_id="run-1",
            session_id=self.sid,
            turn=t,
            messages=[dict(m) for m in self.messages],
            total_usage={
                "prompt_tokens": 900 * t,
                "completion_tokens": 40 * t,
                "total_tokens": 940 * t,
            },
            tool_calls_count=t,
            checkpoint_ms=1_700_000_000_000 + t,
        )
        t0 = time.perf_counter()
        self.store.commit_round(cp)
        return spent + time.perf_counter() - t0

    def journal_size(self) -> int:
        d = self.store.session_dir(self.sid)
        return sum(p.stat().st_size for p in d.glob("journal-*.rec"))


def timed(fn: Any) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def young_round_10(store: FileSessionStore, name: str) -> float:
    young = Session(store, name)
    for _ in range(9):
        young.round()
    return young.round()


def bare_write(directory: Path, data: bytes) -> None:
    """The baseline: write a temp file, fsync it, rename it over the target."""
    tmp = directory / "bare.tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        os.write(fd, data)
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, directory / "bare.dat")


def ms(x: float) -> str:
    return f"{x * 1000:.3f} ms"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--dir", default=None, help="directory to benchmark in (default: a temp dir)")
    ap.add_argument("--samples", type=int, default=100)
    ap.add_argument("--old-round", type=int, default=1000)
    args = ap.parse_args()

    base = Path(tempfile.mkdtemp(prefix="berth-bench-", dir=args.dir))
    try:
        store = FileSessionStore(base / "store", epoch=1)
        old = Session(store, "old")
        setup = [old.round() for _ in range(args.old_round - 1)]  # rounds 1 .. N-1

        young_t: list[float] = []
        old_t: list[float] = []
        bare_t: list[float] = []
        sizes: list[int] = []
        for i in range(args.samples):
            young_t.append(young_round_10(store, f"young-{i}"))
            before = old.journal_size()
            old_t.append(old.round())  # round N + i
            grown = old.journal_size() - before
            if grown > 0:  # no compaction inside this round
                sizes.append(grown)
            data = b"x" * (sizes[-1] if sizes else 1024)
            bare_t.append(timed(lambda d=data: bare_write(base, d)))

        more = [old.round() for _ in range(args.old_round // 2)]
        y, o, b = (statistics.median(v) for v in (young_t, old_t, bare_t))
        print(f"checkpoint bench in {base} ({args.samples} interleaved samples, medians)")
        print("one round = begin_round + record_tool_result + commit_round = 3 fdatasync appends")
        print(f"  round 10 of a fresh session:       {ms(y)}")
        print(f"  round {args.old_round} of an old session:     {ms(o)}")
        print(f"  RATIO round {args.old_round} / round 10:        {o / y:.2f}")
        print(f"  bytes appended by one old round:   {statistics.median(sizes):.0f}")
        print(f"  bare write+fsync+rename of those bytes: {ms(b)}")
        print(
            f"  RATIO round {args.old_round} / bare write:      {o / b:.2f}"
            f"  (round 10: {y / b:.2f}; per durability point: {o / b / 3:.2f})"
        )
        # The same rounds without fsync: the store's CPU share (encode, prefix check, reducer).
        cpu_store = FileSessionStore(base / "cpu", epoch=1, fsync=False)
        cpu_old = Session(cpu_store, "old")
        for _ in range(args.old_round - 1):
            cpu_old.round()
        cpu_y = statistics.median(young_round_10(cpu_store, f"y{i}") for i in range(args.samples))
        cpu_o = statistics.median(cpu_old.round() for _ in range(args.samples))
        print(
            f"  without fsync (CPU only): round 10 {ms(cpu_y)}, round {args.old_round} "
            f"{ms(cpu_o)}, ratio {cpu_o / cpu_y:.2f}"
        )
        amort_young = statistics.fmean(setup[:100])
        amort_old = statistics.fmean(more + old_t)
        print(
            f"  amortised mean incl. snapshots: rounds 1-100 {ms(amort_young)}, "
            f"rounds {args.old_round}-{args.old_round + len(more) + len(old_t)} {ms(amort_old)}"
        )
    finally:
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
