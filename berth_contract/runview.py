"""``GET /v1/runs/{runId}/events``: one run's tool calls and conversation, as the session pod
serves them (docs/architecture.md §5) and ``kubectl berth ui`` reads them.

Part of the contract (:mod:`berth_contract`): the runtime answers with :func:`run_events_body`;
the plugin reads the answer with :class:`RunEvents` (lenient: unknown keys ignored, because a
newer runtime may add fields). Pure.

Query: ``after`` (an event ``seq``; only tool calls that started after it, default: from the
first), ``limit`` (1..:data:`MAX_LIMIT`, default :data:`DEFAULT_LIMIT`: at most this many tool
calls, and the last this many messages of the conversation). Answer::

    {"runId": str, "status": str,            # the run record's status (running, completed, ...)
     "eventCount": int,                      # events the run emitted (cumulative)
     "eventsRetained": int,                  # of those still held (the runtime's retention)
     "toolCalls": [{"id", "name", "lane", "seq", "startedMs", "endedMs" | null,
                    "durationMs" | null, "outcome", "exitCode" | null}, ...],   # by start
     "next": int | null,                     # pass as ``after`` for the following page
     "messagesTotal": int, "messagesFrom": int,   # conversation length, index of the first sent
     "conversation": [{"index", "role", "content", "toolCalls": [{"id", "name", "arguments"}],
                       "toolCallId" | null, "truncated": bool}, ...]}

Times are epoch milliseconds (the session's ``HostEnv`` clock). ``outcome`` is one of
:data:`TOOL_OUTCOMES`. Texts are masked as the store masks what it writes (credentials replaced
by ``[REDACTED]``) and cut to :data:`TEXT_LIMIT` characters (``truncated`` then true).
"""

from __future__ import annotations

from typing import Any, Final, Literal

from pydantic import BaseModel, ConfigDict, Field

RUN_EVENTS_PATH: Final = "/v1/runs/{run_id}/events"
"""The route; ``run_id`` must match :data:`RUN_ID_PATTERN`."""

RUN_ID_PATTERN: Final = r"^[A-Za-z0-9_][A-Za-z0-9_.:@+=-]{0,199}$"
"""A run id the route accepts: no ``/``, ``\\``, NUL or leading dot, so it can never name a path
outside the session's directory of the store (the store refuses the same ids)."""

DEFAULT_LIMIT: Final = 100
MAX_LIMIT: Final = 500
TEXT_LIMIT: Final = 2000
"""Characters kept of a message's content or a tool call's arguments."""

ToolOutcome = Literal["ok", "error", "running", "unfinished"]
TOOL_OUTCOMES: Final[tuple[ToolOutcome, ...]] = ("ok", "error", "running", "unfinished")
"""``ok``: exit code 0; ``error``: another exit code; ``running``: started, not ended, in a
running run; ``unfinished``: never ended (the run ended first: passivated, cancelled, ...)."""


def run_events_path(run_id: str, after: int | None = None, limit: int | None = None) -> str:
    """The route's path for ``run_id`` with its query (``after``, ``limit`` when given)."""
    query = [f"{k}={v}" for k, v in (("after", after), ("limit", limit)) if v is not None]
    return RUN_EVENTS_PATH.format(run_id=run_id) + ("?" + "&".join(query) if query else "")


class _Lenient(BaseModel):
    model_config = ConfigDict(extra="ignore", populate_by_name=True)


class ToolCallView(_Lenient):
    """One tool call of the run: lane (A3S: ``query`` or ``execute``), times in epoch ms."""

    id: str
    name: str
    lane: str = ""
    seq: int = 0
    started_ms: int | None = Field(None, alias="startedMs")
    ended_ms: int | None = Field(None, alias="endedMs")
    duration_ms: int | None = Field(None, alias="durationMs")
    outcome: str = "unfinished"
    exit_code: int | None = Field(None, alias="exitCode")


class MessageCall(_Lenient):
    """A tool call an assistant message asked for (arguments masked and cut)."""

    id: str = ""
    name: str = ""
    arguments: str = ""


class MessageView(_Lenient):
    """One message of the conversation (OpenAI chat roles; content masked and cut)."""

    index: int
    role: str
    content: str = ""
    tool_calls: list[MessageCall] = Field(default_factory=list, alias="toolCalls")
    tool_call_id: str | None = Field(None, alias="toolCallId")
    truncated: bool = False


class RunEvents(_Lenient):
    """The ``GET /v1/runs/{runId}/events`` answer (see the module docstring); the runtime
    builds it, :func:`run_events_body` puts it on the wire, the plugin validates it back."""

    run_id: str = Field(alias="runId")
    status: str = ""
    event_count: int = Field(0, alias="eventCount")
    events_retained: int = Field(0, alias="eventsRetained")
    tool_calls: list[ToolCallView] = Field(default_factory=list, alias="toolCalls")
    next: int | None = None
    messages_total: int = Field(0, alias="messagesTotal")
    messages_from: int = Field(0, alias="messagesFrom")
    conversation: list[MessageView] = Field(default_factory=list)


def run_events_body(view: RunEvents) -> dict[str, Any]:
    """The route's answer: ``view`` in its wire shape (camelCase keys, as the docstring)."""
    return view.model_dump(by_alias=True)
