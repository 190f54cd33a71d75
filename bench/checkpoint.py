"""Benchmark: what one tool round costs the FileSessionStore as a session ages, and against the
cheapest durable write of the same bytes (ARCHITECTURE §6: per-round cost stays flat).

    .venv/bin/python bench/checkpoint.py [--dir DIR] [--samples 60] [--rounds 10,100,1000,10000]
                                         [--copy-history] [--json FILE]

A "round" is what the agent loop does for persistence in one tool round with one bash call:
``begin_round`` (the assistant message), ``record_tool_result`` (a ~200-byte output), building
the ``LoopCheckpoint`` the way ``AgentLoop.commit`` builds it (the live message list and
``known_prefix``, the length of the previous checkpoint) and ``commit_round``. The whole round is
timed, the checkpoint's construction included. ``--copy-history`` builds the checkpoint as the
loop did before ``known_prefix`` existed (a shallow copy of every message, no promise, so the
store compares the history): the baseline this benchmark was written against.

For every age N of ``--rounds`` the samples are rounds N .. N + N/10 of sessions that are N - 1
rounds old (round 10 of ``--samples`` fresh sessions; rounds 100..109 of samples/10 sessions;
rounds 1,000.. and 10,000.. of one session each). Samples of every age and the bare writes are
interleaved (ages in a shuffled order each time), so the shared machine's noise falls on all of
them alike.

Printed figures (medians, same directory, same run):

1. per age: the round's wall time, and the ratio to round ``N0`` (the smallest age; flat cost
   => about 1);
2. per age: the bytes a round appended, a bare ``write + fsync + rename`` of that many bytes (one
   temp file, no directory fsync) and the round / bare-write ratio;
3. the same rounds on a store with ``fsync=False`` (CPU only) and their ratio to round ``N0``;
4. amortised means that include snapshots (compaction), for the record.

Timing is printed, never asserted. ``--json FILE`` also writes the figures (``bench/curves.py``
plots them).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from session_runtime.store import FileSessionStore, LoopCheckpoint


class Session:
    """Drives the store the way the agent loop does, for one session and one run."""

    def __init__(self, store: FileSessionStore, session_id: str, *, copy_history: bool) -> None:
        self.store = store
        self.sid = session_id
        self.copy_history = copy_history
        self.messages: list[dict[str, Any]] = [
            {"role": "system", "content": "You are a coding agent." * 20},
            {"role": "user", "content": "Fix the failing test in the repository."},
        ]
        self.turn = 0
        self.synced = 0
        store.acquire(session_id)

    def round(self) -> float:
        """Write one round; returns its wall time in seconds (store calls and the checkpoint's
        construction)."""
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
        output = f"{self.sid} round {t}: " + "." * 170  # unique, like real tool output
        t0 = time.perf_counter()
        self.store.begin_round(self.sid, "run-1", t, amsg)
        self.store.record_tool_result(
            self.sid, "run-1", t, call, {"output": output, "exit_code": 0, "is_error": False}
        )
        self.messages.append(amsg)
        self.messages.append({"role": "tool", "tool_call_id": call, "content": output})
        usage = {"prompt_tokens": 900 * t, "completion_tokens": 40 * t, "total_tokens": 940 * t}
        if self.copy_history:
            cp = LoopCheckpoint("run-1", self.sid, t, [dict(m) for m in self.messages], usage, t, t)
        else:
            cp = LoopCheckpoint(
                "run-1", self.sid, t, self.messages, usage, t, t, known_prefix=self.synced
            )
        self.store.commit_round(cp)
        self.synced = len(self.messages)
        return time.perf_counter() - t0

    def journal_size(self) -> int:
        d = self.store.session_dir(self.sid)
        return sum(p.stat().st_size for p in d.glob("journal-*.rec"))


def bare_write(directory: Path, data: bytes) -> float:
    """The baseline: write a temp file, fsync it, rename it over the target; returns seconds."""
    t0 = time.perf_counter()
    tmp = directory / "bare.tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        os.write(fd, data)
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, directory / "bare.dat")
    return time.perf_counter() - t0


class Age:
    """The sessions and samples of one age ``n``: sample ``i`` is round ``n + i % per`` of
    session ``i // per``, where ``per = max(1, n // 10)``."""

    def __init__(self, store: FileSessionStore, n: int, samples: int, copy: bool) -> None:
        self.n = n
        self.per = max(1, n // 10)
        count = -(-samples // self.per)
        self.sessions = [Session(store, f"age{n}-{i}", copy_history=copy) for i in range(count)]
        self.setup: list[float] = []  # round times of the first session's rounds 1 .. n - 1
        for j, s in enumerate(self.sessions):
            times = [s.round() for _ in range(n - 1)]
            if j == 0:
                self.setup = times
        self.times: list[float] = []
        self.grown: list[int] = []

    def sample(self, i: int, measure_bytes: bool) -> None:
        s = self.sessions[i // self.per]
        before = s.journal_size() if measure_bytes else 0
        self.times.append(s.round())
        if measure_bytes:
            grown = s.journal_size() - before
            if grown > 0:  # no compaction inside this round
                self.grown.append(grown)


def ms(x: float) -> str:
    return f"{x * 1000:7.3f} ms"


def run(
    base: Path, ages: list[int], samples: int, copy: bool, fsync: bool
) -> tuple[list[Age], list[list[float]]]:
    """Build the sessions of every age, then take interleaved samples of every age (and, with
    ``fsync``, a bare write of the same bytes after each). Returns the ages and, per age, the
    bare-write times."""
    store = FileSessionStore(base, epoch=1, fsync=fsync)
    built = [Age(store, n, samples, copy) for n in ages]
    bare: list[list[float]] = [[] for _ in ages]
    order = list(range(len(ages)))
    shuffle = random.Random(0).shuffle
    for i in range(samples):
        shuffle(order)  # what one age leaves behind (garbage, cold caches) hits every age alike
        for a, b in ((built[k], bare[k]) for k in order):
            a.sample(i, measure_bytes=fsync)
            if fsync:
                size = a.grown[-1] if a.grown else 1024
                b.append(bare_write(base, b"x" * size))
    store.close()
    return built, bare


def main() -> None:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    ap.add_argument("--dir", default=None, help="directory to benchmark in (default: a temp dir)")
    ap.add_argument("--samples", type=int, default=60)
    ap.add_argument("--rounds", default="10,100,1000,10000", help="session ages, comma-separated")
    ap.add_argument(
        "--copy-history",
        action="store_true",
        help="build checkpoints with a copy of every message and no known_prefix (the baseline)",
    )
    ap.add_argument("--json", default=None, help="also write the figures to this file")
    args = ap.parse_args()
    ages = sorted(int(x) for x in args.rounds.split(","))

    base = Path(tempfile.mkdtemp(prefix="berth-bench-", dir=args.dir))
    try:
        wall, bare = run(base / "fsync", ages, args.samples, args.copy_history, fsync=True)
        cpu, _ = run(base / "cpu", ages, args.samples, args.copy_history, fsync=False)
    finally:
        shutil.rmtree(base, ignore_errors=True)

    mode = "copy of every message (baseline)" if args.copy_history else "known_prefix"
    print(f"checkpoint bench in {base} ({args.samples} interleaved samples per age, medians)")
    print("one round = begin_round + record_tool_result + build LoopCheckpoint + commit_round")
    print(f"checkpoint built with: {mode}")
    w0 = statistics.median(wall[0].times)
    c0 = statistics.median(cpu[0].times)
    n0 = ages[0]
    print(
        f"{'round':>7} {'wall':>10} {'/r' + str(n0):>6} {'bytes':>6} {'bare':>10} {'/bare':>6}"
        f" {'cpu only':>10} {'/r' + str(n0):>6} {'amortised':>10}"
    )
    figures: list[dict[str, Any]] = []
    for w, b, c in zip(wall, bare, cpu, strict=True):
        wm, bm, cm = (statistics.median(v) for v in (w.times, b, c.times))
        size = statistics.median(w.grown) if w.grown else 0
        amortised = statistics.fmean(w.setup[len(w.setup) // 2 :] or w.times)
        print(
            f"{w.n:>7} {ms(wm)} {wm / w0:6.2f} {size:6.0f} {ms(bm)} {wm / bm:6.2f}"
            f" {ms(cm)} {cm / c0:6.2f} {ms(amortised)}"
        )
        figures.append(
            {
                "round": w.n,
                "wall_s": wm,
                "wall_ratio": wm / w0,
                "bytes": size,
                "bare_s": bm,
                "bare_ratio": wm / bm,
                "cpu_s": cm,
                "cpu_ratio": cm / c0,
                "amortised_s": amortised,
            }
        )
    print(
        "  (amortised: mean wall time of rounds N/2 .. N-1 of the age's first session, "
        "snapshots included)"
    )
    if args.json:
        Path(args.json).write_text(
            json.dumps({"mode": mode, "samples": args.samples, "ages": figures}, indent=1) + "\n"
        )


if __name__ == "__main__":
    main()
