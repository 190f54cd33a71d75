"""Retry decisions of the lane queue (pure functions, tested as tables).

Owned by ``session_runtime.lanes``; called by :class:`~session_runtime.lanes.queue.LaneQueue`
after a failed attempt. Strategies and the 100 -> 200 -> 400 ms sequence come from the A3S
``RetryPolicyConfig``; the rule that only idempotent lanes are retried (unless configured) is
Berth's, so that an execute-lane tool (bash, write, edit) is never re-run behind the model's back
(docs/architecture.md §6/§7).

What counts as a failure: the runner raised, the attempt timed out, or an external task came back
with ``success=false`` (worker lost, refused, deadline). A tool that ran and reported an error
(file not found, non-zero exit) is a *result*, not a failure, and is never retried.
"""

from __future__ import annotations

from session_runtime.lanes.config import RetryPolicyConfig
from session_runtime.tools.base import Lane


def retry_delay_ms(policy: RetryPolicyConfig | None, attempt: int) -> int | None:
    """Delay in ms before attempt ``attempt + 1`` after attempt ``attempt`` (1-based) failed.

    Returns None when no retry is left (no policy, strategy ``none``, or ``attempt > max_retries``).
    ``exponential``: ``initial_delay_ms * 2**(attempt-1)`` capped at ``max_delay_ms``;
    ``fixed``: ``fixed_delay_ms``.
    """
    if policy is None or policy.strategy == "none" or attempt < 1:
        return None
    if attempt > policy.max_retries:
        return None
    if policy.strategy == "fixed":
        return policy.fixed_delay_ms or 0
    return int(min(policy.initial_delay_ms * (2 ** (attempt - 1)), policy.max_delay_ms))


def should_retry(
    policy: RetryPolicyConfig | None,
    lane: Lane,
    retry_lanes: frozenset[Lane],
    attempt: int,
) -> int | None:
    """Delay (ms) before the next attempt of a failed command of ``lane``, or None to give up.

    Only lanes in ``retry_lanes`` (idempotent by configuration; default query) are retried.
    """
    if lane not in retry_lanes:
        return None
    return retry_delay_ms(policy, attempt)
