"""Settings of the session lane queue: ``SessionQueueConfig`` and its parts.

Owned by ``session_runtime.lanes``; built by the caller of ``SessionOptions(queue_config=...)``
(user code, or the session pod from the rendered ``AgentSession.spec.lanes``) and read by
:class:`session_runtime.lanes.queue.LaneQueue`.

Field names, defaults and meanings follow the A3S lane-queue contract (``SessionQueueConfig``,
``LaneHandlerConfig``, ``RetryPolicyConfig``, ``RateLimitConfig``, ``PriorityBoostConfig``; see
docs/architecture.md §10 "Lane queue"). Berth adds three settings the framework does not have:

- ``retry_lanes``: the lanes whose commands are idempotent and may be retried (default
  ``{"query"}``); a failed ``bash`` on the execute lane is never re-run unless listed here.
- ``max_total_concurrency``: an optional cap over all lanes; when set, the scheduler hands the free
  slot to the highest-priority waiting command, so lane priority (and priority boost) decides order.
- ``alert_warning_depth`` / ``alert_critical_depth``: the depth-alert thresholds (A3S: 50 / 100).

Every setting is applied by the queue, not only declared (the framework declares retry, rate
limit and priority boost without applying them).

Errors: invalid values raise :class:`session_runtime.errors.ConfigError` at construction.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, get_args

from session_runtime.errors import ConfigError
from session_runtime.tools.base import Lane

HandlerMode = Literal["internal", "external", "hybrid"]
RetryStrategy = Literal["exponential", "fixed", "none"]
RateLimitType = Literal["per_second", "per_minute", "per_hour", "unlimited"]
BoostStrategy = Literal["standard", "aggressive", "disabled"]

LANES: tuple[Lane, ...] = ("control", "query", "execute", "generate")
#: Lane -> base priority; a lower number is scheduled first (A3S: control 0 > ... > generate 3).
LANE_PRIORITY: dict[Lane, int] = {"control": 0, "query": 1, "execute": 2, "generate": 3}
#: A3S default when the queue's default timeout is enabled by ``with_lane_features()``.
DEFAULT_TIMEOUT_MS = 60_000
DEFAULT_DLQ_MAX_SIZE = 1000

_MODES = frozenset(get_args(HandlerMode))
_RETRY = frozenset(get_args(RetryStrategy))
_RATE = frozenset(get_args(RateLimitType))
_BOOST = frozenset(get_args(BoostStrategy))


def _check_lane(lane: str) -> Lane:
    if lane not in LANE_PRIORITY:
        raise ConfigError(f"unknown lane {lane!r}; expected one of {', '.join(LANES)}")
    return lane


@dataclass(frozen=True, slots=True)
class LaneHandlerConfig:
    """How one lane runs its commands (A3S ``LaneHandlerConfig``).

    ``mode``: ``internal`` runs here, ``external`` turns each command into an ``ExternalTask`` and
    waits for ``complete_external_task`` (or a LaneWorker reply), ``hybrid`` runs here and still
    announces the task. ``timeout_ms``: how long an external/hybrid task may take
    (ms, default 60000).
    """

    mode: HandlerMode = "internal"
    timeout_ms: int = DEFAULT_TIMEOUT_MS

    def __post_init__(self) -> None:
        if self.mode not in _MODES:
            raise ConfigError(
                f"unknown handler mode {self.mode!r}; expected internal|external|hybrid"
            )
        if self.timeout_ms <= 0:
            raise ConfigError(f"handler timeout_ms must be > 0, got {self.timeout_ms}")


@dataclass(frozen=True, slots=True)
class RetryPolicyConfig:
    """Retry policy (A3S ``RetryPolicyConfig``).

    ``exponential``: ``initial_delay_ms * 2**(attempt-1)`` (100 -> 200 -> 400 ms by default), capped
    at ``max_delay_ms``; ``fixed``: ``fixed_delay_ms`` (required) between attempts; ``none``: no
    retries. ``max_retries`` counts retries, not attempts (3 retries = up to 4 attempts).
    """

    strategy: RetryStrategy = "exponential"
    max_retries: int = 3
    initial_delay_ms: int = 100
    fixed_delay_ms: int | None = None
    max_delay_ms: int = 30_000

    def __post_init__(self) -> None:
        if self.strategy not in _RETRY:
            raise ConfigError(f"unknown retry strategy {self.strategy!r}")
        if self.max_retries < 0 or self.initial_delay_ms < 0 or self.max_delay_ms < 0:
            raise ConfigError("retry max_retries and delays must be >= 0")
        if self.strategy == "fixed" and (self.fixed_delay_ms is None or self.fixed_delay_ms < 0):
            raise ConfigError("retry strategy 'fixed' requires fixed_delay_ms >= 0")


@dataclass(frozen=True, slots=True)
class RateLimitConfig:
    """Queue-wide rate limit on command starts (A3S ``RateLimitConfig``).

    ``limit_type`` picks the window (1 s, 60 s, 3600 s, or none); at most ``max_operations``
    commands (attempts, including retries) start in any sliding window of that length.
    """

    limit_type: RateLimitType = "unlimited"
    max_operations: int | None = None

    def __post_init__(self) -> None:
        if self.limit_type not in _RATE:
            raise ConfigError(f"unknown rate limit type {self.limit_type!r}")
        if self.limit_type != "unlimited" and (
            self.max_operations is None or self.max_operations < 1
        ):
            raise ConfigError(f"rate limit {self.limit_type!r} requires max_operations >= 1")

    @property
    def window_ms(self) -> int | None:
        """Window length in ms, or None for ``unlimited``."""
        return {"per_second": 1_000, "per_minute": 60_000, "per_hour": 3_600_000}.get(
            self.limit_type
        )


@dataclass(frozen=True, slots=True)
class PriorityBoostConfig:
    """Priority boost as a command's deadline approaches (A3S ``PriorityBoostConfig``).

    ``deadline_ms`` is measured from submission (default 300000 = 5 min). ``standard`` raises the
    priority by 1/2/3 levels when 75/50/25 % of the deadline is left; ``aggressive`` by 1/2/3/4
    levels at 90/75/50/25 %; ``disabled`` never. See :mod:`session_runtime.lanes.boost`.
    """

    strategy: BoostStrategy = "standard"
    deadline_ms: int | None = 300_000

    def __post_init__(self) -> None:
        if self.strategy not in _BOOST:
            raise ConfigError(f"unknown priority boost strategy {self.strategy!r}")
        if self.deadline_ms is not None and self.deadline_ms <= 0:
            raise ConfigError("priority boost deadline_ms must be > 0")


@dataclass(slots=True)
class SessionQueueConfig:
    """The lane queue settings of one session (A3S ``SessionQueueConfig`` plus Berth's extras).

    Concurrency values are commands running at once per lane. Timeouts are ms. ``lane_handlers``
    and ``lane_timeouts`` are keyed by lane name. ``default_timeout_ms`` None = internal commands
    have no queue timeout (the tool's own timeout still applies).
    """

    control_max_concurrency: int = 2
    query_max_concurrency: int = 4
    execute_max_concurrency: int = 2
    generate_max_concurrency: int = 1
    lane_handlers: dict[Lane, LaneHandlerConfig] = field(default_factory=dict)
    enable_dlq: bool = False
    dlq_max_size: int | None = None
    enable_metrics: bool = False
    enable_alerts: bool = False
    default_timeout_ms: int | None = None
    storage_path: str | None = None
    retry_policy: RetryPolicyConfig | None = None
    rate_limit: RateLimitConfig | None = None
    priority_boost: PriorityBoostConfig | None = None
    pressure_threshold: int | None = None
    lane_timeouts: dict[Lane, int] = field(default_factory=dict)
    # Berth extensions (see module docstring).
    retry_lanes: frozenset[Lane] = frozenset({"query"})
    max_total_concurrency: int | None = None
    alert_warning_depth: int = 50
    alert_critical_depth: int = 100

    def __post_init__(self) -> None:
        self.validate()

    # -- builders (the A3S SDKs mutate in place in Python and chain in Rust; both work here) --

    def with_lane_features(self) -> SessionQueueConfig:
        """Turn on DLQ (max 1000), metrics, alerts and the 60 s default timeout; returns self."""
        self.enable_dlq = True
        self.enable_metrics = True
        self.enable_alerts = True
        if self.dlq_max_size is None:
            self.dlq_max_size = DEFAULT_DLQ_MAX_SIZE
        if self.default_timeout_ms is None:
            self.default_timeout_ms = DEFAULT_TIMEOUT_MS
        return self

    def with_timeout(self, timeout_ms: int) -> SessionQueueConfig:
        """Set the default timeout (ms) of every lane without its own; returns self."""
        self.set_default_timeout(timeout_ms)
        return self

    def set_default_timeout(self, timeout_ms: int) -> None:
        """Python SDK spelling of :meth:`with_timeout`."""
        if timeout_ms <= 0:
            raise ConfigError(f"default_timeout_ms must be > 0, got {timeout_ms}")
        self.default_timeout_ms = timeout_ms

    def set_lane_handler(self, lane: str, mode: str, timeout_ms: int = DEFAULT_TIMEOUT_MS) -> None:
        """Pre-configure a lane's handler (same as ``LaneQueue.set_lane_handler`` at run time)."""
        self.lane_handlers[_check_lane(lane)] = LaneHandlerConfig(mode, timeout_ms)  # type: ignore[arg-type]

    # -- lookups used by the queue --

    def max_concurrency(self, lane: Lane) -> int:
        """Commands of ``lane`` allowed to run at once."""
        return {
            "control": self.control_max_concurrency,
            "query": self.query_max_concurrency,
            "execute": self.execute_max_concurrency,
            "generate": self.generate_max_concurrency,
        }[lane]

    def handler(self, lane: Lane) -> LaneHandlerConfig:
        """The lane's handler config (internal with a 60 s timeout when not configured)."""
        return self.lane_handlers.get(lane) or LaneHandlerConfig()

    def effective_dlq_max_size(self) -> int:
        """The DLQ capacity (entries): ``dlq_max_size``, else the A3S default of 1000."""
        return self.dlq_max_size if self.dlq_max_size is not None else DEFAULT_DLQ_MAX_SIZE

    def validate(self) -> None:  # noqa: C901
        """Raise :class:`ConfigError` if any value is out of range."""
        for lane in LANES:
            if self.max_concurrency(lane) < 1:
                raise ConfigError(f"{lane}_max_concurrency must be >= 1")
        for lane in self.lane_handlers:
            _check_lane(lane)
        for lane, ms in self.lane_timeouts.items():
            _check_lane(lane)
            if ms <= 0:
                raise ConfigError(f"lane timeout for {lane} must be > 0, got {ms}")
        for lane in self.retry_lanes:
            _check_lane(lane)
        if self.default_timeout_ms is not None and self.default_timeout_ms <= 0:
            raise ConfigError("default_timeout_ms must be > 0")
        if self.dlq_max_size is not None and self.dlq_max_size < 1:
            raise ConfigError("dlq_max_size must be >= 1")
        if self.pressure_threshold is not None and self.pressure_threshold < 1:
            raise ConfigError("pressure_threshold must be >= 1")
        if self.max_total_concurrency is not None and self.max_total_concurrency < 1:
            raise ConfigError("max_total_concurrency must be >= 1")
        if not 0 < self.alert_warning_depth <= self.alert_critical_depth:
            raise ConfigError("alert depths must satisfy 0 < warning <= critical")

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> SessionQueueConfig:
        """Build from a JSON-shaped dict (snake_case keys as in the A3S config reference).

        Unknown keys raise :class:`ConfigError` so a typo in the rendered options is not silently
        ignored. ``enable_all_features: true`` is the TypeScript SDK spelling of
        ``with_lane_features()``.
        """
        data = dict(data)
        enable_all = bool(data.pop("enable_all_features", False))
        known = set(cls.__dataclass_fields__)
        unknown = set(data) - known
        if unknown:
            raise ConfigError(f"unknown queue_config keys: {', '.join(sorted(unknown))}")
        try:
            if "lane_handlers" in data:
                data["lane_handlers"] = {
                    _check_lane(k): v
                    if isinstance(v, LaneHandlerConfig)
                    else LaneHandlerConfig(**v)
                    for k, v in data["lane_handlers"].items()
                }
            if "lane_timeouts" in data:
                data["lane_timeouts"] = {
                    _check_lane(k): int(v) for k, v in data["lane_timeouts"].items()
                }
            if "retry_lanes" in data:
                data["retry_lanes"] = frozenset(_check_lane(x) for x in data["retry_lanes"])
            for key, typ in (
                ("retry_policy", RetryPolicyConfig),
                ("rate_limit", RateLimitConfig),
                ("priority_boost", PriorityBoostConfig),
            ):
                if isinstance(data.get(key), Mapping):
                    data[key] = typ(**data[key])
            cfg = cls(**data)
        except TypeError as exc:
            raise ConfigError(f"invalid queue_config: {exc}") from exc
        return cfg.with_lane_features() if enable_all else cfg
