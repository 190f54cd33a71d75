"""The campaign report: scenarios run, faults by kind, violations with their replay commands, and
time per scenario.

Owned by the chaos harness; :func:`render` turns the scenario results of
:meth:`tests.chaos.runner.Campaign.run` into text whose last line reads
``chaos: <N> scenarios, <V> violations ...`` (what ``make chaos`` and the CI test look for).
"""

from __future__ import annotations

import statistics
from collections import Counter
from collections.abc import Sequence
from typing import Any

from tests.chaos.scenario import FAULT_KINDS


def replay_command(seed: int) -> str:
    """The command line that replays scenario ``seed``."""
    return f".venv/bin/python -m tests.chaos --replay {seed}"


def render(
    results: Sequence[dict[str, Any]], wall_s: float, jobs: int, problems: Sequence[str] = ()
) -> str:
    """The report text (module docstring). ``wall_s``: campaign wall time in seconds;
    ``problems``: harness failures to show before the last line (each counts as a violation)."""
    planned: Counter[str] = Counter()
    landed: Counter[str] = Counter()
    stats: Counter[str] = Counter()
    kinds: Counter[str] = Counter()
    for r in results:
        planned.update(r["applied"])
        landed.update(r["landed"])
        stats.update(r["stats"])
        for v in r["violations"]:
            kinds[v["kind"]] += 1
    times = sorted(r["seconds"] for r in results) or [0.0]
    lines = [
        "== chaos campaign report",
        f"scenarios: {len(results)} ({sum(r['lanes'] for r in results)} with LaneWorkers over "
        f"Redis), sessions: {sum(r['sessions'] for r in results)}, session processes: "
        f"{sum(r['attempts'] for r in results)}",
        f"wall time: {wall_s:.1f} s with {jobs} job(s)",
        "time per scenario (s): "
        f"mean {statistics.fmean(times):.2f}, p50 {times[len(times) // 2]:.2f}, "
        f"p95 {times[min(len(times) - 1, int(len(times) * 0.95))]:.2f}, max {times[-1]:.2f}",
        "faults by kind (applied to an attempt / landed: the process was hit):",
    ]
    for kind in FAULT_KINDS:
        lines.append(f"  {kind:<14} {planned[kind]:>7} / {landed[kind]:<7} {FAULT_KINDS[kind]}")
    lines.append(
        "results in final histories: "
        + ", ".join(
            f"{k} {stats[k]}"
            for k in (
                "ran",
                "unknown",
                "not_run",
                "overlap_in_flight",
                "store_full_reported",
                "store_unavailable",
            )
        )
    )
    bad = [r for r in results if r["violations"]]
    lines.append(f"violations: {sum(kinds.values())} in {len(bad)} scenario(s) {dict(kinds)}")
    for r in bad[:50]:
        for v in r["violations"][:5]:
            lines.append(f"  seed {r['seed']}: {v['kind']} [{v['session']}] {v['detail'][:400]}")
        lines.append(f"    replay: {replay_command(r['seed'])}")
    lines.extend(f"harness problem: {p}" for p in problems)
    total = sum(kinds.values()) + len(problems)
    lines.append(f"chaos: {len(results)} scenarios, {total} violations, {wall_s:.0f} s")
    return "\n".join(lines)
