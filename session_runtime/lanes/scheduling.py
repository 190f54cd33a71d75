"""Which waiting command starts next (pure function, tested as a table).

Owned by ``session_runtime.lanes``; called by the queue every time a slot frees up or a command
arrives. Rules (A3S lane queue, docs/architecture.md §10 "Lane queue"): a command may start only if
its lane has a free slot (per-lane ``max_concurrency``) and, when Berth's ``max_total_concurrency``
is set, a queue-wide slot is free. Among the startable ones, the lowest effective priority wins
(control 0 > query 1 > execute 2 > generate 3, minus priority boost); ties go to the earliest
submission, so commands of one lane start in FIFO order.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from session_runtime.lanes.boost import effective_priority
from session_runtime.lanes.config import LANE_PRIORITY, PriorityBoostConfig
from session_runtime.tools.base import Lane


@dataclass(frozen=True, slots=True)
class Waiting:
    """A command waiting for a slot: its lane, submission order and submission time (epoch ms)."""

    lane: Lane
    seq: int
    submitted_ms: int


def pick_next(
    waiting: Sequence[Waiting],
    active: Mapping[Lane, int],
    limits: Mapping[Lane, int],
    now_ms: int,
    boost: PriorityBoostConfig | None = None,
    total_limit: int | None = None,
) -> int | None:
    """Index into ``waiting`` of the command to start now, or None if none may start."""
    if total_limit is not None and sum(active.values()) >= total_limit:
        return None
    best: tuple[int, int] | None = None
    best_index: int | None = None
    for index, w in enumerate(waiting):
        if active.get(w.lane, 0) >= limits[w.lane]:
            continue
        key = (
            effective_priority(LANE_PRIORITY[w.lane], boost, now_ms - w.submitted_ms),
            w.seq,
        )
        if best is None or key < best:
            best, best_index = key, index
    return best_index
