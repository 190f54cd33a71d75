"""The event vocabulary shared by ``stream()`` consumers and hooks (docs/architecture.md §10
"Events").

Owned by the runtime core. Events are JSON-able dicts (:class:`AgentEvent`, which adds the A3S
SDK's attribute access) with a snake_case ``"type"`` plus the fields listed in
:data:`EVENT_FIELDS`. Every event the session emits is also stamped with
``session_id``, ``run_id`` (None outside a run), the four identity labels (``tenant_id``,
``principal``, ``agent_template_id``, ``correlation_id``), ``seq`` (a per-session counter, so a
consumer can check order) and ``ts_ms`` (epoch ms from the session's ``HostEnv``).

The three cluster events (``budget_threshold_hit``, ``passivation_requested``,
``peer_invocation``) are emitted by the host through ``Session.emit_host_event`` (or by the runtime
itself for budget decisions and passivation) and reach hooks like any other event.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, Final

Event = dict[str, Any]
#: An async sink for events (the lane queue's ``emit`` argument has this type).
EventSink = Callable[[Event], Awaitable[None]]

TURN_START: Final = "turn_start"
TEXT_DELTA: Final = "text_delta"
TOOL_START: Final = "tool_start"
TOOL_END: Final = "tool_end"
TURN_END: Final = "turn_end"
AGENT_END: Final = "agent_end"
ERROR: Final = "error"
PRE_TOOL_USE: Final = "pre_tool_use"
CONTEXT_COMPACTED: Final = "context_compacted"
CONTINUATION: Final = "continuation"
LLM_RETRY: Final = "llm_retry"
PARSE_RETRY: Final = "parse_retry"
RUN_RESUMED: Final = "run_resumed"
EXTERNAL_TASK_PENDING: Final = "external_task_pending"
EXTERNAL_TASK_COMPLETED: Final = "external_task_completed"
QUEUE_ALERT: Final = "queue_alert"
COMMAND_DEAD_LETTERED: Final = "command_dead_lettered"
COMMAND_RETRY: Final = "command_retry"
PERSISTENCE_FAILED: Final = "persistence_failed"
BUDGET_THRESHOLD_HIT: Final = "budget_threshold_hit"
PASSIVATION_REQUESTED: Final = "passivation_requested"
PEER_INVOCATION: Final = "peer_invocation"

#: Event type -> its own fields (beyond the common stamp). Berth additions are marked.
EVENT_FIELDS: Final[dict[str, tuple[str, ...]]] = {
    TURN_START: ("turn",),
    TEXT_DELTA: ("text",),
    TOOL_START: ("id", "name"),
    TOOL_END: ("id", "name", "output", "exit_code"),
    TURN_END: ("turn", "usage"),
    AGENT_END: ("text", "usage"),
    ERROR: ("message",),
    PRE_TOOL_USE: ("id", "name", "arguments"),  # hook decision point; a hook may block
    CONTEXT_COMPACTED: ("before_tokens", "after_tokens", "removed_messages"),  # Berth
    CONTINUATION: ("turn", "count"),  # Berth
    LLM_RETRY: ("attempt", "delay_ms", "message"),  # Berth
    PARSE_RETRY: ("attempt", "message"),  # Berth: malformed tool arguments fed back
    RUN_RESUMED: ("from_run_id", "turn"),  # Berth
    EXTERNAL_TASK_PENDING: (
        "task_id",
        "session_id",
        "lane",
        "command_type",
        "payload",
        "timeout_ms",
    ),
    EXTERNAL_TASK_COMPLETED: ("task_id", "session_id", "success"),
    QUEUE_ALERT: ("level", "alert_type", "message"),
    COMMAND_DEAD_LETTERED: (),
    COMMAND_RETRY: (),
    PERSISTENCE_FAILED: ("operation", "message"),
    BUDGET_THRESHOLD_HIT: ("resource", "kind", "consumed", "limit"),
    PASSIVATION_REQUESTED: ("reason",),
    PEER_INVOCATION: ("from_session_id",),
}

#: Berth event types whose A3S SDK name differs; ``AgentEvent.event_type`` gives the A3S name.
A3S_EVENT_NAMES: Final[dict[str, str]] = {AGENT_END: "end"}


class AgentEvent(dict[str, Any]):
    """One event as ``stream()`` yields it and hooks receive it: a dict (``event["type"]`` in
    Berth's names, every field by key, JSON-able as is) that also reads like the A3S SDK's
    ``AgentEvent`` object: ``event.event_type`` (the A3S name, see :data:`A3S_EVENT_NAMES`:
    ``agent_end`` is ``"end"``), ``event.text``, ``event.tool_name``, ``event.tool_id``, ...
    An attribute whose field the event does not carry is None."""

    __slots__ = ()

    @property
    def event_type(self) -> str:
        """The A3S SDK's name of this event's type (``text_delta``, ``end``, ...)."""
        etype = str(self.get("type", ""))
        return A3S_EVENT_NAMES.get(etype, etype)

    @property
    def text(self) -> str | None:
        """``text_delta`` chunk, or the final answer of ``end``."""
        return self.get("text")

    @property
    def tool_name(self) -> str | None:
        """The tool of ``tool_start``, ``tool_end``, ``pre_tool_use``."""
        return (
            self.get("name") if self.get("type") in (TOOL_START, TOOL_END, PRE_TOOL_USE) else None
        )

    @property
    def tool_id(self) -> str | None:
        """The tool call id of ``tool_start``, ``tool_end``, ``pre_tool_use``."""
        return self.get("id") if self.get("type") in (TOOL_START, TOOL_END, PRE_TOOL_USE) else None

    @property
    def output(self) -> str | None:
        """The tool's output (``tool_end``)."""
        return self.get("output")

    @property
    def exit_code(self) -> int | None:
        """The tool's exit code (``tool_end``)."""
        return self.get("exit_code")

    @property
    def turn(self) -> int | None:
        """The turn of ``turn_start``, ``turn_end``, ``run_resumed``."""
        return self.get("turn")

    @property
    def usage(self) -> dict[str, Any] | None:
        """Token usage of ``turn_end`` and ``end``."""
        return self.get("usage")

    @property
    def message(self) -> str | None:
        """The message of ``error``, ``queue_alert``, ``llm_retry``, ..."""
        return self.get("message")

    @property
    def task_id(self) -> str | None:
        """The external task of ``external_task_pending`` / ``_completed``."""
        return self.get("task_id")

    @property
    def reason(self) -> str | None:
        """The reason of ``passivation_requested``."""
        return self.get("reason")

    @property
    def session_id(self) -> str | None:
        """The session that emitted the event."""
        return self.get("session_id")

    @property
    def run_id(self) -> str | None:
        """The run the event belongs to (None outside a run)."""
        return self.get("run_id")


#: The cluster events a host may inject with ``Session.emit_host_event``.
HOST_EVENT_TYPES: Final = frozenset({BUDGET_THRESHOLD_HIT, PASSIVATION_REQUESTED, PEER_INVOCATION})

#: Reasons the contract lists for ``passivation_requested``.
PASSIVATION_REASONS: Final = frozenset(
    {"node_drain", "eviction", "idle_reaper", "migration", "manual"}
)

IDENTITY_FIELDS: Final = ("tenant_id", "principal", "agent_template_id", "correlation_id")


def validate_host_event(event: Event) -> None:
    """Raise ``ValueError`` unless ``event`` is a cluster event with its required fields."""
    etype = event.get("type")
    if etype not in HOST_EVENT_TYPES:
        raise ValueError(f"host events must be one of {sorted(HOST_EVENT_TYPES)}, got {etype!r}")
    missing = [f for f in EVENT_FIELDS[str(etype)] if f not in event]
    if missing:
        raise ValueError(f"{etype} event is missing fields: {', '.join(missing)}")


__all__ = [
    "A3S_EVENT_NAMES",
    "AGENT_END",
    "BUDGET_THRESHOLD_HIT",
    "EVENT_FIELDS",
    "HOST_EVENT_TYPES",
    "IDENTITY_FIELDS",
    "PASSIVATION_REASONS",
    "PASSIVATION_REQUESTED",
    "PEER_INVOCATION",
    "AgentEvent",
    "Event",
    "EventSink",
    "validate_host_event",
]
