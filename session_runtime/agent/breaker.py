"""The LLM circuit breaker (A3S ``circuit_breaker_threshold``), a pure state machine.

Owned by ``session_runtime.agent``; the loop asks it before each LLM attempt and reports every
outcome. Closed: transient failures back off exponentially (``base_ms``, doubling, capped at
30 s) and retry. After ``threshold`` consecutive failures it opens: the run fails with
``CircuitOpenError`` and later calls fail fast until ``cooldown_ms`` passed; then one trial call
is let through (half-open) and a success closes it again (a failure re-opens it). Times are
monotonic seconds supplied by the caller, so tests drive it without sleeping.
"""

from __future__ import annotations

from dataclasses import dataclass

MAX_BACKOFF_MS = 30_000


@dataclass(slots=True)
class CircuitBreaker:
    """Consecutive-failure breaker. ``failures`` resets on success."""

    threshold: int
    base_ms: int = 500
    cooldown_ms: int = 30_000
    failures: int = 0
    opened_at: float | None = None
    last_error: str = ""

    def allows(self, now: float) -> bool:
        """May a call go out at monotonic time ``now``?"""
        if self.opened_at is None:
            return True
        return (now - self.opened_at) * 1000 >= self.cooldown_ms

    def record_success(self) -> None:
        """A call succeeded: close."""
        self.failures = 0
        self.opened_at = None
        self.last_error = ""

    def record_failure(self, now: float, error: str) -> int | None:
        """A transient failure. Returns the backoff in ms before the next attempt, or None when
        the breaker is now open (stop retrying)."""
        self.failures += 1
        self.last_error = error
        if self.failures >= self.threshold:
            self.opened_at = now
            return None
        return min(self.base_ms * (1 << (self.failures - 1)), MAX_BACKOFF_MS)
