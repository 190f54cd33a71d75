"""Benchmark: what one tool round costs the FileSessionStore as a session ages, and against the
cheapest durable write of the same bytes (docs/architecture.md §6: per-round cost stays flat).

    .venv/bin/python bench/checkpoint.py [--dir DIR] [--samples 60] [--rounds 10,100,1000,10000]
                                         [--baseline-src REF] [--profile] [--copy-history]
                                         [--profile-rounds 500] [--json FILE]

A "round" is what the agent loop does for persistence in one tool round with one bash call:
``begin_round`` (the assistant message), ``record_tool_result`` (a ~200-byte output), building
the ``LoopCheckpoint`` the way ``AgentLoop.commit`` builds it (the live message list and
``known_prefix``, the length of the previous checkpoint) and ``commit_round``. The whole round is
timed, the checkpoint's construction included. ``--copy-history`` builds the checkpoint as the
loop did before ``known_prefix`` existed (a shallow copy of every message, no promise, so the
store compares the history).

For every age N of ``--rounds`` the samples are rounds N .. N + N/10 of sessions that are N - 1
rounds old (round 10 of ``--samples`` fresh sessions; rounds 100..109 of samples/10 sessions;
rounds 1,000.. and 10,000.. of one session each). Samples of every age and the floor writes are
interleaved (ages in a shuffled order each time), so the shared machine's noise falls on all of
them alike.

Printed figures (medians, same directory, same run), per age:

1. the round's wall time and its ratio to round ``N0`` (the smallest age; flat cost => about 1);
2. the bytes a round appended, the *floor* (a bare ``write + fsync + rename`` of that many bytes:
   one temp file, no directory fsync) and the round / floor ratio;
3. the same rounds on a store with ``fsync=False`` (CPU only) and their ratio to round ``N0``;
4. amortised means that include snapshots (compaction), for the record.

Each store is measured in a worker process of this script that builds its sessions once, then
runs one round per request. ``--baseline-src REF`` (e.g. ``main``) adds a worker that imports the
``session_runtime`` package of git ref ``REF`` (extracted with ``git archive`` into a temp dir,
first on ``PYTHONPATH``); the two stores' rounds alternate sample by sample (and share the
floor writes), so the disk's mood of the moment falls on both, and one run gives the ratio this
tree / REF per age. ``--profile`` adds, per store, where a round's time goes (µs per round and
part, from ``cProfile`` over ``--profile-rounds`` further rounds of the oldest session,
alternated in chunks; the profiler's overhead inflates the CPU parts alike).

Timing is printed, never asserted. ``--json FILE`` also writes the figures (``bench/curves.py``
plots them).
"""

from __future__ import annotations

import argparse
import cProfile
import json
import os
import pstats
import random
import shutil
import statistics
import subprocess
import sys
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
    """The floor: write a temp file, fsync it, rename it over the target; returns seconds."""
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
    """``x`` seconds as right-aligned milliseconds."""
    return f"{x * 1000:7.3f} ms"


#: Parts of a round for ``--profile``: label, (file suffix, function) and the callers counted
#: (None: every call). ``other`` is the round's total minus these.
PARTS: tuple[tuple[str, tuple[str, str], tuple[str, ...] | None], ...] = (
    ("fdatasync (journal)", ("~", "<built-in method posix.fdatasync>"), None),
    ("lease checks (fence.check)", ("store/fence.py", "check"), ("_check_fence",)),
    ("JSON encode of the record", ("store/shapes.py", "encode"), ("_write",)),
    ("JSON decode of the record", ("store/shapes.py", "decode"), ("_write",)),
    ("state apply", ("store/state.py", "apply"), ("_write",)),
    ("masking (result + commit)", ("store/redact.py", "redact_tool_result"), None),
    ("masking (result + commit)", ("store/redact.py", "redact_messages"), ("commit_round",)),
    ("delta / prefix check", ("store/state.py", "delta"), None),
    ("frame + write(2)", ("store/journal.py", "frame"), None),
    ("frame + write(2)", ("store/atomic.py", "write_all"), ("_append",)),
    ("compaction (snapshots)", ("store/file.py", "_rotate"), ("_write",)),
)


def parts(prof: cProfile.Profile, rounds: int) -> dict[str, float]:
    """µs per round for each part of :data:`PARTS`, ``other`` and ``total`` (the round)."""
    stats: dict[Any, Any] = pstats.Stats(prof).stats  # type: ignore[attr-defined]

    def cumtime(where: tuple[str, str], callers: tuple[str, ...] | None) -> float:
        total = 0.0
        for (file, _line, name), (_cc, _nc, _tt, ct, by) in stats.items():
            if name != where[1] or not file.endswith(where[0]):
                continue
            if callers is None:
                total += ct
            else:
                total += sum(v[3] for k, v in by.items() if k[2] in callers)
        return total

    out: dict[str, float] = {}
    for label, where, callers in PARTS:
        out[label] = out.get(label, 0.0) + cumtime(where, callers) / rounds * 1e6
    total = cumtime(("bench/checkpoint.py", "round"), None) / rounds * 1e6
    out["other (checkpoint construction, store glue)"] = total - sum(out.values())
    out["total"] = total
    return out


class Worker:
    """One store under measurement, in its own process (``--serve``): the sessions of every age
    on a store with fsync (wall) and one without (CPU only), built once; then one command per
    line on stdin, one JSON answer per line on stdout:

    ``wall K I`` / ``cpu K I``: sample ``I`` of age index ``K``: ``[seconds, bytes appended]``;
    ``profile N``: ``N`` more rounds of the oldest session under ``cProfile``: ``null``;
    ``done``: ``{"source", "setup": [[seconds]] per age, "profile": parts or null}``, then exit.
    """

    def __init__(self, base: Path, ages: list[int], samples: int, copy: bool) -> None:
        self.wall_store = FileSessionStore(base / "fsync", epoch=1, fsync=True)
        self.cpu_store = FileSessionStore(base / "cpu", epoch=1, fsync=False)
        self.wall = [Age(self.wall_store, n, samples, copy) for n in ages]
        self.cpu = [Age(self.cpu_store, n, samples, copy) for n in ages]
        self.prof = cProfile.Profile()
        self.profiled = 0

    def handle(self, words: list[str]) -> Any:
        if words[0] in ("wall", "cpu"):
            age = (self.wall if words[0] == "wall" else self.cpu)[int(words[1])]
            before = len(age.grown)
            age.sample(int(words[2]), measure_bytes=words[0] == "wall")
            return [age.times[-1], age.grown[-1] if len(age.grown) > before else 0]
        if words[0] == "profile":
            s = self.wall[-1].sessions[0]
            self.prof.enable()
            for _ in range(int(words[1])):
                s.round()
            self.prof.disable()
            self.profiled += int(words[1])
            return None
        import session_runtime

        self.wall_store.close()
        self.cpu_store.close()
        return {
            "source": str(Path(session_runtime.__file__).parent),
            "setup": [a.setup[len(a.setup) // 2 :] or a.times for a in self.wall],
            "profile": parts(self.prof, self.profiled) if self.profiled else None,
        }


def serve(args: argparse.Namespace) -> None:
    """The ``--serve`` side of :class:`Worker` (this process imports the store to measure)."""
    ages = sorted(int(x) for x in args.rounds.split(","))
    base = Path(tempfile.mkdtemp(prefix="berth-bench-", dir=args.dir))
    try:
        w = Worker(base, ages, args.samples, args.copy_history)
        print("ready", flush=True)
        for line in sys.stdin:
            words = line.split()
            print(json.dumps(w.handle(words)), flush=True)
            if words[0] == "done":
                return
    finally:
        shutil.rmtree(base, ignore_errors=True)


class Client:
    """The parent's handle on a :class:`Worker` process importing ``session_runtime`` from
    ``src`` (None: this tree)."""

    def __init__(self, name: str, args: argparse.Namespace, src: Path | None) -> None:
        env = dict(os.environ)
        if src is not None:
            env["PYTHONPATH"] = os.pathsep.join(p for p in (str(src), env.get("PYTHONPATH")) if p)
        cmd = [sys.executable, __file__, "--serve", "--samples", str(args.samples)]
        cmd += ["--rounds", args.rounds]
        cmd += ["--dir", args.dir] if args.dir else []
        cmd += ["--copy-history"] if args.copy_history else []
        self.name = name
        self.proc = subprocess.Popen(
            cmd, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
        )
        self.wall: list[list[float]] = []
        self.cpu: list[list[float]] = []
        self.bytes: list[list[int]] = []

    def ask(self, command: str) -> Any:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write(command + "\n")
        self.proc.stdin.flush()
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError(f"bench worker for {self.name} exited ({self.proc.wait()})")
        return json.loads(line)

    def wait_ready(self) -> None:
        assert self.proc.stdout is not None
        if self.proc.stdout.readline().strip() != "ready":
            raise RuntimeError(f"bench worker for {self.name} did not start")


def extract(ref: str, into: Path) -> Path:
    """``session_runtime`` of git ref ``ref`` (``git archive``) under ``into``; returns ``into``.
    Raises ``subprocess.CalledProcessError`` for an unknown ref."""
    repo = Path(__file__).resolve().parent.parent
    tar = subprocess.run(
        ["git", "-C", str(repo), "archive", "--format=tar", ref, "session_runtime"],
        check=True,
        capture_output=True,
    ).stdout
    subprocess.run(["tar", "-x", "-C", str(into)], input=tar, check=True)
    return into


def measure(args: argparse.Namespace, clients: list[Client], floor_dir: Path) -> list[list[float]]:
    """Interleave the samples: for every sample index, the ages in a shuffled order, and for
    every age the clients in alternating order, each round followed by a floor write of the
    bytes it appended. Fills the clients' lists; returns the floor times per age (seconds)."""
    n_ages = len(args.rounds.split(","))
    for c in clients:
        c.wall = [[] for _ in range(n_ages)]
        c.cpu = [[] for _ in range(n_ages)]
        c.bytes = [[] for _ in range(n_ages)]
    floor: list[list[float]] = [[] for _ in range(n_ages)]
    order = list(range(n_ages))
    rng = random.Random(0)
    for i in range(args.samples):
        rng.shuffle(order)  # what one age leaves behind (garbage, cold caches) hits every age
        for k in order:
            for c in clients if i % 2 else clients[::-1]:
                t, size = c.ask(f"wall {k} {i}")
                c.wall[k].append(t)
                if size:
                    c.bytes[k].append(size)
                floor[k].append(bare_write(floor_dir, b"x" * (size or 1024)))
            for c in clients if i % 2 else clients[::-1]:
                c.cpu[k].append(c.ask(f"cpu {k} {i}")[0])
    return floor


def figures(
    c: Client, ages: list[int], floor: list[list[float]], setup: list[list[float]]
) -> list[dict[str, Any]]:
    """Medians and ratios per age (seconds; ratios to the smallest age and to the floor)."""
    med = statistics.median
    w0, c0 = med(c.wall[0]), med(c.cpu[0])
    out = []
    for k, n in enumerate(ages):
        wm, fm, cm = med(c.wall[k]), med(floor[k]), med(c.cpu[k])
        out.append(
            {
                "round": n,
                "wall_s": wm,
                "wall_ratio": wm / w0,
                "bytes": med(c.bytes[k]) if c.bytes[k] else 0,
                "bare_s": fm,
                "bare_ratio": wm / fm,
                "cpu_s": cm,
                "cpu_ratio": cm / c0,
                "amortised_s": statistics.fmean(setup[k]),
            }
        )
    return out


def table(title: str, figs: list[dict[str, Any]]) -> None:
    """Print the figures of one store (from :func:`figures`) under ``title``."""
    n0 = figs[0]["round"]
    print(title)
    print(
        f"{'round':>7} {'wall':>10} {'/r' + str(n0):>6} {'bytes':>6} {'floor':>10} {'/floor':>6}"
        f" {'cpu only':>10} {'/r' + str(n0):>6} {'amortised':>10}"
    )
    for f in figs:
        print(
            f"{f['round']:>7} {ms(f['wall_s'])} {f['wall_ratio']:6.2f} {f['bytes']:6.0f}"
            f" {ms(f['bare_s'])} {f['bare_ratio']:6.2f} {ms(f['cpu_s'])} {f['cpu_ratio']:6.2f}"
            f" {ms(f['amortised_s'])}"
        )


def main() -> None:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    ap.add_argument("--dir", default=None, help="directory to benchmark in (default: a temp dir)")
    ap.add_argument("--samples", type=int, default=60)
    ap.add_argument("--rounds", default="10,100,1000,10000", help="session ages, comma-separated")
    ap.add_argument(
        "--copy-history",
        action="store_true",
        help="build checkpoints with a copy of every message and no known_prefix",
    )
    ap.add_argument("--baseline-src", metavar="REF", help="also measure the store of git ref REF")
    ap.add_argument("--profile", action="store_true", help="where a round's time goes, per part")
    ap.add_argument("--profile-rounds", type=int, default=500)
    ap.add_argument("--json", default=None, help="also write the figures to this file")
    ap.add_argument("--serve", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    args.rounds = ",".join(str(n) for n in sorted(int(x) for x in args.rounds.split(",")))
    if args.serve:
        serve(args)
        return

    mode = "copy of every message" if args.copy_history else "known_prefix"
    with tempfile.TemporaryDirectory(prefix="berth-bench-", dir=args.dir) as tmp:
        stores: list[tuple[str, Path | None]] = [("this tree", None)]
        if args.baseline_src:
            stores.append((f"baseline {args.baseline_src}", extract(args.baseline_src, Path(tmp))))
        clients: list[Client] = []
        try:
            for name, src in stores:  # one at a time, so each builds its sessions undisturbed
                clients.append(Client(name, args, src))
                clients[-1].wait_ready()
            floor = measure(args, clients, Path(tmp))
            if args.profile:
                chunk = 50
                for j in range(0, args.profile_rounds, chunk):
                    for c in clients if (j // chunk) % 2 else clients[::-1]:
                        c.ask(f"profile {min(chunk, args.profile_rounds - j)}")
            done = [c.ask("done") for c in clients]
        finally:
            for c in clients:  # end of input ends a worker that is still waiting for commands
                if c.proc.stdin is not None and not c.proc.stdin.closed:
                    c.proc.stdin.close()
                c.proc.wait()

    print(f"checkpoint bench, {args.samples} samples per age, stores and ages interleaved, medians")
    print("one round = begin_round + record_tool_result + build LoopCheckpoint + commit_round")
    print(f"checkpoint built with: {mode}; floor = bare write + fsync + rename of the same bytes")
    out: dict[str, Any] = {"mode": mode, "samples": args.samples}
    for c, d in zip(clients, done, strict=True):
        figs = figures(c, [int(x) for x in args.rounds.split(",")], floor, d["setup"])
        table(f"\n{c.name} (session_runtime from {d['source']}):", figs)
        key = "ages" if c is clients[0] else "baseline"
        out[key], out[key + "_profile"] = figs, d["profile"]
    print(
        "  (amortised: mean wall time of rounds N/2 .. N-1 of the age's first session, "
        "snapshots included)"
    )
    if args.baseline_src:
        out["baseline_ref"] = args.baseline_src
        print(f"\nthis tree / {args.baseline_src}, per age (medians):")
        print(f"{'round':>7} {'wall':>6} {'cpu':>6}")
        for a, b in zip(out["ages"], out["baseline"], strict=True):
            wall, cpu = a["wall_s"] / b["wall_s"], a["cpu_s"] / b["cpu_s"]
            print(f"{a['round']:>7} {wall:6.2f} {cpu:6.2f}")
    if args.profile:
        profs = [(c.name, d["profile"]) for c, d in zip(clients, done, strict=True)]
        print(
            f"\nwhere a round goes at round {out['ages'][-1]['round']}+ "
            f"(µs per round, cProfile over {args.profile_rounds} rounds):"
        )
        print(f"{'part':<46}" + "".join(f"{name:>18}" for name, _ in profs))
        for part in profs[0][1]:
            print(f"{part:<46}" + "".join(f"{p[part]:18.1f}" for _, p in profs))
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=1) + "\n")


if __name__ == "__main__":
    main()
