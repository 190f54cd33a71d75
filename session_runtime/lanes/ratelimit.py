"""Queue-wide rate limit on command starts: a sliding-window log.

Owned by ``session_runtime.lanes``; :class:`RateLimiter` is consulted by the queue's scheduler
before it starts a command (every attempt counts, retries included). The A3S ``RateLimitConfig``
declares per-second/minute/hour limits; Berth applies them. The decision itself is the pure
function :func:`rate_limit_wait_ms`.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence

from session_runtime.lanes.config import RateLimitConfig


def rate_limit_wait_ms(
    starts_ms: Sequence[int], now_ms: int, window_ms: int | None, max_operations: int | None
) -> int:
    """How long (ms) to wait before one more start is admitted; 0 = admit now.

    ``starts_ms`` are the start times (epoch ms, ascending) of earlier admitted commands. At most
    ``max_operations`` starts may fall in any window ``(t - window_ms, t]``. ``window_ms`` or
    ``max_operations`` None means unlimited.
    """
    if window_ms is None or max_operations is None:
        return 0
    recent = [t for t in starts_ms if t > now_ms - window_ms]
    if len(recent) < max_operations:
        return 0
    # The start that must leave the window before another may enter.
    blocking = recent[len(recent) - max_operations]
    return max(1, blocking + window_ms - now_ms)


class RateLimiter:
    """Keeps the start log for :func:`rate_limit_wait_ms` (bounded to ``max_operations`` items)."""

    def __init__(self, config: RateLimitConfig | None) -> None:
        self._window = config.window_ms if config else None
        self._max = config.max_operations if config else None
        self._starts: deque[int] = deque(maxlen=self._max or 1)

    @property
    def limited(self) -> bool:
        """Whether a limit applies (both ``window_ms`` and ``max_operations`` configured)."""
        return self._window is not None and self._max is not None

    def wait_ms(self, now_ms: int) -> int:
        """0 if a start is admitted at ``now_ms``; else ms until one is."""
        return rate_limit_wait_ms(self._starts, now_ms, self._window, self._max)

    def record(self, now_ms: int) -> None:
        """Record an admitted start at ``now_ms``."""
        if self.limited:
            self._starts.append(now_ms)
