"""``python -m tests.chaos``: run the crash campaign and print its report.

Usage::

    python -m tests.chaos --scenarios 10000 --jobs 2        # seeds 1..10000 (--first-seed)
    python -m tests.chaos --replay 4711 [--replay 4712]      # exactly these scenarios
    python -m tests.chaos --report-from DIR --wall-seconds S  # report of a stopped campaign

Scenario ``i`` of a campaign has seed ``first_seed + i``. With ``--jobs J`` the seeds are split
over ``J`` processes (each with its own zygote, model, ledger and Redis); results stream to
``<out>/results-<j>.jsonl`` and progress lines are printed every ``--progress`` scenarios. The
report (:mod:`tests.chaos.report`) is printed at the end and written to ``<out>/report.txt``; it
ends with ``chaos: N scenarios, V violations``. Exit status 1 if any violation was found.
"""

from __future__ import annotations

import argparse
import ctypes
import json
import logging
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from tests.chaos.report import render


def _die_with_parent() -> None:
    """In a shard, before exec: receive SIGTERM when the campaign process dies, however it
    dies (Linux ``PR_SET_PDEATHSIG``), so a killed campaign leaves no shard running."""
    ctypes.CDLL(None).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG = 1


def _stop(signum: int, frame: object) -> None:
    raise SystemExit(128 + signum)


def _shard(seeds: list[int], root: Path, results: Path) -> None:
    from tests.chaos.runner import Campaign
    from tests.chaos.scenario import generate

    # SIGTERM (and SIGINT, ignored by shells for background jobs) stop the shard cleanly: the
    # campaign's close() stops the model, the zygote (which kills its children) and Redis.
    signal.signal(signal.SIGTERM, _stop)
    signal.signal(signal.SIGINT, _stop)
    logging.basicConfig(level=logging.ERROR)  # the checker's loads log every torn tail
    campaign = Campaign(root)
    try:
        with results.open("a") as out:
            for seed in seeds:
                result = campaign.run(generate(seed))
                out.write(json.dumps(result) + "\n")
                out.flush()
    finally:
        campaign.close()


def _read(paths: list[Path]) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    for p in paths:
        if p.exists():
            rows.extend(json.loads(line) for line in p.read_text().splitlines() if line.strip())
    return rows


def main(argv: list[str] | None = None) -> int:
    """Entry point (module docstring); returns the exit status."""
    p = argparse.ArgumentParser(prog="python -m tests.chaos", description=__doc__.split("\n")[0])
    p.add_argument("--scenarios", type=int, default=int(os.environ.get("CHAOS_SCENARIOS", "100")))
    p.add_argument("--first-seed", type=int, default=1)
    p.add_argument("--replay", type=int, action="append", default=[])
    p.add_argument("--jobs", type=int, default=1)
    p.add_argument("--progress", type=int, default=100, help="scenarios between progress lines")
    p.add_argument("--out", type=Path, default=None, help="results and kept scenario files")
    p.add_argument(
        "--report-from",
        type=Path,
        help="print the report of the results already in this --out directory (a campaign "
        "stopped early); its wall time is taken from --wall-seconds",
    )
    p.add_argument("--wall-seconds", type=float, default=0.0)
    p.add_argument("--shard", help=argparse.SUPPRESS)  # internal: "<seeds file>:<results file>"
    a = p.parse_args(argv)
    if a.shard:
        seeds_file, results = a.shard.split(":", 1)
        seeds = [int(s) for s in Path(seeds_file).read_text().split()]
        _shard(seeds, Path(results).parent / Path(results).stem, Path(results))
        return 0
    if a.report_from:
        rows = _read(sorted(a.report_from.glob("results-*.jsonl")))
        jobs = len(list(a.report_from.glob("results-*.jsonl")))
        print(render(rows, a.wall_seconds, jobs))
        return 1 if any(r["violations"] for r in rows) else 0
    seeds = a.replay or list(range(a.first_seed, a.first_seed + a.scenarios))
    out = a.out or Path(tempfile.mkdtemp(prefix="berth-chaos-"))
    out.mkdir(parents=True, exist_ok=True)
    jobs = max(1, min(a.jobs, len(seeds)))
    t0 = time.monotonic()
    procs, paths = [], []
    for j in range(jobs):
        seeds_file = out / f"seeds-{j}.txt"
        seeds_file.write_text(" ".join(str(s) for s in seeds[j::jobs]))
        results = out / f"results-{j}.jsonl"
        results.unlink(missing_ok=True)
        paths.append(results)
        procs.append(
            subprocess.Popen(
                [sys.executable, "-m", "tests.chaos", "--shard", f"{seeds_file}:{results}"],
                preexec_fn=_die_with_parent,
            )
        )

    def stop_shards(signum: int, frame: object) -> None:
        for proc in procs:
            proc.terminate()

    for sig in (signal.SIGTERM, signal.SIGINT):  # stopping the campaign stops its shards
        signal.signal(sig, stop_shards)
    shown = 0
    while any(proc.poll() is None for proc in procs):
        time.sleep(1)
        rows = _read(paths)
        if len(rows) - shown >= a.progress:
            shown = len(rows)
            bad = sum(len(r["violations"]) for r in rows)
            print(
                f"[chaos] {len(rows)}/{len(seeds)} scenarios, {bad} violations, "
                f"{time.monotonic() - t0:.0f} s",
                flush=True,
            )
    rows = _read(paths)
    failed = [proc.returncode for proc in procs if proc.returncode != 0]
    problems = []
    if failed or len(rows) != len(seeds):
        problems.append(f"incomplete: {len(rows)}/{len(seeds)} results, job exits {failed}")
    text = render(rows, time.monotonic() - t0, jobs, problems)
    (out / "report.txt").write_text(text + "\n")
    print(text)
    print(f"(results and kept scenario files under {out})")
    bad = any(r["violations"] for r in rows)
    return 1 if bad or failed or len(rows) != len(seeds) else 0


if __name__ == "__main__":
    sys.exit(main())
