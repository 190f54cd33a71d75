"""Priority boost as a command's deadline approaches (pure function, tested as a table).

Owned by ``session_runtime.lanes``; used by :mod:`session_runtime.lanes.scheduling`. The A3S
``PriorityBoostConfig`` declares the strategies (``standard`` boosts at 75/50/25 % of the deadline
left: +1/+2/+3); Berth applies them: the boosted level is subtracted from the lane priority
(lower = sooner), never going above the control lane (0).
"""

from __future__ import annotations

from session_runtime.lanes.config import PriorityBoostConfig

#: (fraction of the deadline left at or below which the boost applies, boost levels)
_STEPS: dict[str, tuple[tuple[float, int], ...]] = {
    "standard": ((0.25, 3), (0.50, 2), (0.75, 1)),
    "aggressive": ((0.25, 4), (0.50, 3), (0.75, 2), (0.90, 1)),
    "disabled": (),
}


def boost_levels(config: PriorityBoostConfig | None, waited_ms: int) -> int:
    """Boost levels for a command that has waited ``waited_ms`` since submission."""
    if config is None or config.deadline_ms is None:
        return 0
    left = max(0.0, 1.0 - max(0, waited_ms) / config.deadline_ms)
    for threshold, levels in _STEPS[config.strategy]:
        if left <= threshold:
            return levels
    return 0


def effective_priority(base: int, config: PriorityBoostConfig | None, waited_ms: int) -> int:
    """Lane priority after boost; 0 (control) is the ceiling."""
    return max(0, base - boost_levels(config, waited_ms))
