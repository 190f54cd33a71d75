"""``SessionOptions`` and ``SessionRetentionLimits`` (A3S Python SDK names and defaults).

Owned by ``session_runtime.agent``; built by callers (the session pod renders them from the
AgentSession spec) and read by the session and its loop. Fields marked *Berth* go beyond the
framework's option surface; every other field and default comes from docs/architecture.md §10.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, fields
from typing import TYPE_CHECKING, Any, Literal

from session_runtime.agent.budget import BudgetGuard
from session_runtime.hostenv import HostEnv
from session_runtime.store.base import SessionStore
from session_runtime.tools.host import HostTool

if TYPE_CHECKING:
    from session_runtime.lanes.config import SessionQueueConfig  # lanes load lazily

FailureMode = Literal["fail_open", "fail_closed"]


@dataclass(slots=True)
class SessionRetentionLimits:
    """FIFO caps on the session's in-memory stores; None = unbounded (the default).

    ``max_runs_retained``: run records (a running run is never dropped);
    ``max_events_per_run``: events kept per run (``event_count`` stays cumulative);
    ``max_trace_events``: the session-wide trace of all events;
    ``max_terminal_subagent_tasks``: accepted for A3S parity; Berth runs no subagents.
    """

    max_runs_retained: int | None = None
    max_events_per_run: int | None = None
    max_trace_events: int | None = None
    max_terminal_subagent_tasks: int | None = None

    @classmethod
    def from_value(
        cls, value: SessionRetentionLimits | dict[str, Any] | None
    ) -> SessionRetentionLimits:
        """Accept an instance, a dict of the field names, or None (all unbounded)."""
        if value is None:
            return cls()
        if isinstance(value, cls):
            return value
        if isinstance(value, dict):
            known = {f.name for f in fields(cls)}
            unknown = set(value) - known
            if unknown:
                raise ValueError(f"unknown retention limit(s): {', '.join(sorted(unknown))}")
            return cls(**value)
        raise TypeError("retention_limits must be SessionRetentionLimits, a dict or None")


@dataclass(slots=True)
class SessionOptions:
    """Options of one session. Defaults are the framework's.

    Limits: ``max_tool_rounds`` (50) tool rounds per run; ``max_parse_retries`` (2) malformed
    tool-argument replies fed back to the model per run; ``tool_timeout_ms`` (None) per tool call;
    ``circuit_breaker_threshold`` (3) consecutive transient LLM failures; ``auto_compact`` (False)
    above ``auto_compact_threshold`` (0.80) of ``context_window_tokens``; ``continuation_enabled``
    (True) for up to ``max_continuation_turns`` (3) replies cut at the output limit.
    """

    model: str | None = None
    session_id: str | None = None
    #: None = no persistence.
    session_store: SessionStore | None = None
    #: A3S ``auto_save``. With a store, Berth always saves the session record (metadata, run
    #: records) at run start and run end, because run records must survive a crash
    #: (docs/architecture.md §10 "Persistence"); this flag is kept and persisted for parity.
    auto_save: bool = False
    tenant_id: str | None = None
    principal: str | None = None
    agent_template_id: str | None = None
    correlation_id: str | None = None
    max_tool_rounds: int = 50
    max_parse_retries: int = 2
    tool_timeout_ms: int | None = None
    circuit_breaker_threshold: int = 3
    auto_compact: bool = False
    auto_compact_threshold: float = 0.80
    continuation_enabled: bool = True
    max_continuation_turns: int = 3
    #: A guard with any of check_before_llm / record_after_llm / check_before_tool (sync or
    #: async; a missing method allows); None = no budget.
    budget_guard: BudgetGuard | None = None
    retention_limits: SessionRetentionLimits | dict[str, Any] | None = None
    host_env: HostEnv | None = None
    #: None = tools run directly; else the session builds a ``LaneQueue`` from it.
    queue_config: SessionQueueConfig | None = None
    #: *Berth*: system prompt (None = the built-in coding-agent prompt).
    system_prompt: str | None = None
    #: *Berth*: context window of the model, in tokens (for auto-compaction).
    context_window_tokens: int = 128_000
    #: *Berth*: what a raising or stalled budget guard means (A3S Python: fail_open).
    budget_failure_mode: FailureMode = "fail_open"
    #: *Berth*: how long a guard callback may take, in ms, before the failure mode applies.
    budget_guard_timeout_ms: int = 5000
    #: *Berth*: first backoff after a transient LLM failure, in ms (doubles, capped at 30 s).
    llm_backoff_ms: int = 500
    #: *Berth*: how long an open circuit breaker fails calls fast before one trial call, in ms.
    llm_circuit_cooldown_ms: int = 30_000
    #: *Berth*: per-request LLM timeout in seconds.
    llm_timeout_s: float = 600.0
    #: *Berth*: tools the host provides (``session_runtime.tools.host.HostTool``), advertised
    #: next to the built-in ones and always run in this process, never on a LaneWorker.
    host_tools: Sequence[HostTool] = ()

    #: Fields that hold live objects, never persisted with the session.
    LIVE_FIELDS = ("session_store", "budget_guard", "host_env", "queue_config", "host_tools")

    def identity(self) -> dict[str, str | None]:
        """The four identity labels as a dict."""
        return {
            "tenant_id": self.tenant_id,
            "principal": self.principal,
            "agent_template_id": self.agent_template_id,
            "correlation_id": self.correlation_id,
        }

    def to_persisted(self) -> dict[str, Any]:
        """The JSON-able options stored with the session (no live objects, no secrets)."""
        out: dict[str, Any] = {}
        for f in fields(self):
            if f.name in self.LIVE_FIELDS:
                continue
            value = getattr(self, f.name)
            if isinstance(value, SessionRetentionLimits):
                value = {g.name: getattr(value, g.name) for g in fields(value)}
            out[f.name] = value
        return out

    def validate(self) -> None:
        """Raise ValueError for out-of-range limits."""
        if self.max_tool_rounds < 1:
            raise ValueError("max_tool_rounds must be >= 1")
        if self.max_parse_retries < 0:
            raise ValueError("max_parse_retries must be >= 0")
        if self.tool_timeout_ms is not None and self.tool_timeout_ms <= 0:
            raise ValueError("tool_timeout_ms must be > 0")
        if self.circuit_breaker_threshold < 1:
            raise ValueError("circuit_breaker_threshold must be >= 1")
        if not 0 < self.auto_compact_threshold <= 1:
            raise ValueError("auto_compact_threshold must be in (0, 1]")
        if self.max_continuation_turns < 0:
            raise ValueError("max_continuation_turns must be >= 0")
        if self.budget_failure_mode not in ("fail_open", "fail_closed"):
            raise ValueError("budget_failure_mode must be 'fail_open' or 'fail_closed'")


def merge_options(stored: dict[str, Any], caller: SessionOptions | None) -> SessionOptions:
    """Options for a resumed session: caller-set fields win over stored ones (A3S resume rule).

    A caller field counts as set when it differs from the default; live objects always come from
    the caller (they are never stored).
    """
    defaults = SessionOptions()
    merged = SessionOptions()
    known = {f.name for f in fields(SessionOptions)}
    for name, value in stored.items():
        if name in known and name not in SessionOptions.LIVE_FIELDS:
            setattr(merged, name, value)
    if caller is not None:
        for f in fields(SessionOptions):
            value = getattr(caller, f.name)
            if f.name in SessionOptions.LIVE_FIELDS or value != getattr(defaults, f.name):
                setattr(merged, f.name, value)
    return merged
