"""In-process metrics of the lane queue: per-lane counters, gauges and latency percentiles.

Owned by ``session_runtime.lanes``; updated by the queue, read through ``LaneQueue.queue_metrics()``
(A3S ``session.queue_metrics()``: "per-lane counters, gauges, and histograms (latency
percentiles)"). Latencies are kept in a bounded reservoir (the last 1024 samples per lane and kind),
so memory stays flat as a session ages. Units: milliseconds.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable
from typing import Any

from session_runtime.tools.base import Lane

COUNTERS = (
    "submitted",
    "started",
    "completed",
    "failed",
    "retried",
    "dead_lettered",
    "timed_out",
    "rate_limited",
    "boosted",
)
_RESERVOIR = 1024


def percentile(sorted_values: list[float], q: float) -> float:
    """Nearest-rank percentile ``q`` in [0, 100] of ascending ``sorted_values`` (0.0 if empty)."""
    if not sorted_values:
        return 0.0
    rank = max(1, -(-int(q * len(sorted_values)) // 100))  # ceil(q/100 * n), at least 1
    return sorted_values[min(rank, len(sorted_values)) - 1]


def summarize(samples: Iterable[float]) -> dict[str, float]:
    """``{count, p50, p90, p99, max}`` of latency samples (ms)."""
    values = sorted(samples)
    return {
        "count": float(len(values)),
        "p50": percentile(values, 50),
        "p90": percentile(values, 90),
        "p99": percentile(values, 99),
        "max": values[-1] if values else 0.0,
    }


class LaneMetrics:
    """Counters and latency reservoirs of all lanes."""

    def __init__(self, lanes: Iterable[Lane]) -> None:
        self._counters: dict[Lane, dict[str, int]] = {
            lane: dict.fromkeys(COUNTERS, 0) for lane in lanes
        }
        self._wait: dict[Lane, deque[float]] = {
            lane: deque(maxlen=_RESERVOIR) for lane in self._counters
        }
        self._run: dict[Lane, deque[float]] = {
            lane: deque(maxlen=_RESERVOIR) for lane in self._counters
        }

    def inc(self, lane: Lane, counter: str, by: int = 1) -> None:
        """Add ``by`` to ``counter`` (one of ``COUNTERS``) of ``lane``; KeyError if unknown."""
        self._counters[lane][counter] += by

    def observe_wait(self, lane: Lane, ms: float) -> None:
        """Record a queue wait of ``ms`` (submission to slot) in ``lane``'s reservoir."""
        self._wait[lane].append(ms)

    def observe_run(self, lane: Lane, ms: float) -> None:
        """Record one attempt's run time of ``ms`` (slot held) in ``lane``'s reservoir."""
        self._run[lane].append(ms)

    def count(self, lane: Lane, counter: str) -> int:
        """The value of ``counter`` (one of ``COUNTERS``) of ``lane``; KeyError if unknown."""
        return self._counters[lane][counter]

    def snapshot(self, gauges: dict[Lane, dict[str, int]]) -> dict[str, Any]:
        """``{"lanes": {lane: {"counters", "gauges", "latency_ms": {"wait", "run"}}}}``."""
        return {
            "lanes": {
                lane: {
                    "counters": dict(counters),
                    "gauges": dict(gauges.get(lane, {})),
                    "latency_ms": {
                        "wait": summarize(self._wait[lane]),
                        "run": summarize(self._run[lane]),
                    },
                }
                for lane, counters in self._counters.items()
            }
        }
