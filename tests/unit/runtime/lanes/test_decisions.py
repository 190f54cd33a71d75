"""Table tests of the lane queue's pure decisions: retry delay, rate-limit admit, boost, next pick,
alerts and pressure edges."""

from __future__ import annotations

import pytest

from session_runtime.errors import ConfigError
from session_runtime.lanes.alerts import alert_level, alert_to_emit, idle_edge, pressure_edge
from session_runtime.lanes.boost import boost_levels, effective_priority
from session_runtime.lanes.config import (
    PriorityBoostConfig,
    RateLimitConfig,
    RetryPolicyConfig,
    SessionQueueConfig,
)
from session_runtime.lanes.metrics import percentile
from session_runtime.lanes.ratelimit import RateLimiter, rate_limit_wait_ms
from session_runtime.lanes.retry import retry_delay_ms, should_retry
from session_runtime.lanes.scheduling import Waiting, pick_next

EXP = RetryPolicyConfig("exponential", max_retries=3, initial_delay_ms=100)
FIXED = RetryPolicyConfig("fixed", max_retries=2, fixed_delay_ms=1000)
NONE = RetryPolicyConfig("none")
CAPPED = RetryPolicyConfig("exponential", max_retries=10, initial_delay_ms=100, max_delay_ms=500)


@pytest.mark.parametrize(
    ("policy", "attempt", "expected"),
    [
        (EXP, 1, 100),
        (EXP, 2, 200),
        (EXP, 3, 400),
        (EXP, 4, None),
        (FIXED, 1, 1000),
        (FIXED, 2, 1000),
        (FIXED, 3, None),
        (NONE, 1, None),
        (None, 1, None),
        (CAPPED, 4, 500),
        (EXP, 0, None),
    ],
)
def test_retry_delay(policy: RetryPolicyConfig | None, attempt: int, expected: int | None) -> None:
    assert retry_delay_ms(policy, attempt) == expected


@pytest.mark.parametrize(
    ("lane", "retry_lanes", "expected"),
    [
        ("query", frozenset({"query"}), 100),
        ("execute", frozenset({"query"}), None),  # not idempotent: never re-run by default
        ("execute", frozenset({"query", "execute"}), 100),  # unless configured
        ("control", frozenset(), None),
    ],
)
def test_retry_only_idempotent_lanes(
    lane: str, retry_lanes: frozenset[str], expected: int | None
) -> None:
    assert should_retry(EXP, lane, retry_lanes, 1) == expected  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("starts", "now", "window", "max_ops", "wait"),
    [
        ([], 1000, 1000, 2, 0),
        ([500], 1000, 1000, 2, 0),
        ([500, 900], 1000, 1000, 2, 500),  # 500 leaves the window at 1500
        ([0, 900], 1000, 1000, 2, 0),  # 0 already left (window is (0, 1000])
        ([100, 200, 300], 1000, 1000, 2, 200),  # the 2nd newest (200) must leave first
        ([999], 1000, 1000, 1, 999),
        ([999], 1000, None, None, 0),  # unlimited
    ],
)
def test_rate_limit_admit(
    starts: list[int], now: int, window: int | None, max_ops: int | None, wait: int
) -> None:
    assert rate_limit_wait_ms(starts, now, window, max_ops) == wait


def test_rate_limiter_keeps_a_bounded_log() -> None:
    limiter = RateLimiter(RateLimitConfig("per_second", 2))
    assert limiter.wait_ms(0) == 0
    limiter.record(0)
    limiter.record(10)
    assert limiter.wait_ms(20) == 980
    assert limiter.wait_ms(1000) == 0
    limiter.record(1000)
    assert limiter.wait_ms(1005) == 5  # the start at 10 leaves at 1010
    assert not RateLimiter(RateLimitConfig("unlimited")).limited


STD = PriorityBoostConfig("standard", 1000)
AGG = PriorityBoostConfig("aggressive", 1000)
OFF = PriorityBoostConfig("disabled", 1000)


@pytest.mark.parametrize(
    ("config", "waited", "levels"),
    [
        (STD, 0, 0),
        (STD, 249, 0),
        (STD, 250, 1),  # 75 % left
        (STD, 500, 2),  # 50 % left
        (STD, 750, 3),  # 25 % left
        (STD, 5000, 3),
        (AGG, 100, 1),  # 90 % left
        (AGG, 250, 2),
        (AGG, 750, 4),
        (OFF, 900, 0),
        (None, 900, 0),
    ],
)
def test_boost_levels(config: PriorityBoostConfig | None, waited: int, levels: int) -> None:
    assert boost_levels(config, waited) == levels


def test_boost_never_passes_control() -> None:
    assert effective_priority(3, STD, 750) == 0
    assert effective_priority(2, STD, 900) == 0
    assert effective_priority(1, None, 900) == 1


LIMITS = {"control": 2, "query": 4, "execute": 1, "generate": 1}
ZERO = {"control": 0, "query": 0, "execute": 0, "generate": 0}


def w(lane: str, seq: int, at: int = 0) -> Waiting:
    return Waiting(lane, seq, at)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("waiting", "active", "now", "boost", "total", "expected"),
    [
        ([], ZERO, 0, None, None, None),
        ([w("execute", 1), w("execute", 2), w("query", 3)], ZERO, 0, None, None, 2),
        ([w("execute", 1), w("execute", 2)], ZERO, 0, None, None, 0),  # FIFO within a lane
        ([w("execute", 1), w("query", 2)], {**ZERO, "query": 4}, 0, None, None, 0),  # query full
        ([w("execute", 1)], {**ZERO, "execute": 1}, 0, None, None, None),  # execute full
        ([w("generate", 1), w("control", 2)], ZERO, 0, None, None, 1),
        ([w("execute", 1)], {**ZERO, "query": 1}, 0, None, 1, None),  # queue-wide cap
        # boost: a generate command near its deadline beats a fresh query command
        ([w("query", 2, at=990), w("generate", 1, at=0)], ZERO, 1000, STD, None, 1),
        ([w("query", 2, at=990), w("generate", 1, at=0)], ZERO, 1000, None, None, 0),
    ],
)
def test_pick_next(
    waiting: list[Waiting],
    active: dict[str, int],
    now: int,
    boost: PriorityBoostConfig | None,
    total: int | None,
    expected: int | None,
) -> None:
    assert pick_next(waiting, active, LIMITS, now, boost, total) == expected  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("depth", "level"),
    [(0, None), (50, None), (51, "warning"), (100, "warning"), (101, "critical")],
)
def test_alert_level(depth: int, level: str | None) -> None:
    assert alert_level(depth, 50, 100) == level


@pytest.mark.parametrize(
    ("prev", "cur", "emit"),
    [
        (None, "warning", "warning"),
        ("warning", "warning", None),
        ("warning", "critical", "critical"),
        ("critical", "warning", None),
        ("warning", None, None),
    ],
)
def test_alert_edges(prev: str | None, cur: str | None, emit: str | None) -> None:
    assert alert_to_emit(prev, cur) == emit  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("was", "pending", "threshold", "edge"),
    [
        (False, 4, 5, None),
        (False, 5, 5, True),
        (True, 9, 5, None),
        (True, 4, 5, False),
        (False, 9, None, None),
    ],
)
def test_pressure_edges(was: bool, pending: int, threshold: int | None, edge: bool | None) -> None:
    assert pressure_edge(was, pending, threshold) == edge


@pytest.mark.parametrize(
    ("was_busy", "pending", "active", "idle"),
    [(True, 0, 0, True), (True, 0, 1, False), (False, 0, 0, False), (True, 1, 0, False)],
)
def test_idle_edge(was_busy: bool, pending: int, active: int, idle: bool) -> None:
    assert idle_edge(was_busy, pending, active) is idle


@pytest.mark.parametrize(("q", "expected"), [(50, 2.0), (90, 4.0), (99, 4.0), (0, 1.0)])
def test_percentile(q: float, expected: float) -> None:
    assert percentile([1.0, 2.0, 3.0, 4.0], q) == expected


def test_with_lane_features_and_validation() -> None:
    cfg = SessionQueueConfig()
    assert cfg.with_lane_features() is cfg
    assert (cfg.enable_dlq, cfg.enable_metrics, cfg.enable_alerts) == (True, True, True)
    assert (cfg.dlq_max_size, cfg.default_timeout_ms) == (1000, 60_000)
    assert cfg.max_concurrency("query") == 4 and cfg.handler("execute").mode == "internal"
    parsed = SessionQueueConfig.from_dict(
        {
            "enable_all_features": True,
            "lane_handlers": {"execute": {"mode": "external", "timeout_ms": 5000}},
            "retry_policy": {"strategy": "fixed", "fixed_delay_ms": 10},
            "lane_timeouts": {"query": 30000},
        }
    )
    assert parsed.handler("execute").mode == "external" and parsed.enable_dlq
    with pytest.raises(ConfigError):
        SessionQueueConfig.from_dict({"query_max_concurency": 3})
    with pytest.raises(ConfigError):
        SessionQueueConfig(execute_max_concurrency=0)
    with pytest.raises(ConfigError):
        RetryPolicyConfig("fixed")
    with pytest.raises(ConfigError):
        RateLimitConfig("per_second")
    with pytest.raises(ConfigError):
        cfg.set_lane_handler("execute", "remote")
