"""The persistence seam of ``session_runtime``: what the agent loop asks of a session store.

Owned by ``session_runtime.store``; called by ``session_runtime.agent``. Two implementations:
``FileSessionStore`` (append-only journal + snapshots + epoch fencing on a shared volume,
ARCHITECTURE.md §6) and ``MemorySessionStore`` (tests).

Write protocol of one tool round (intent before action):

1. ``begin_round``: the assistant message that asks for tools is durable *before* any tool runs;
2. ``record_tool_result``: each result is durable as it arrives;
3. ``commit_round``: the round's ``LoopCheckpoint`` (A3S shape) is durable; the round is complete.

On resume the loop reads ``load_checkpoint`` (last completed round) and ``load_pending_round``
(the intent of an unfinished round and the results recorded for it).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol

#: A3S LoopCheckpoint schema version this build writes and the newest it can load.
LOOP_CHECKPOINT_SCHEMA_VERSION = 1


@dataclass(slots=True)
class LoopCheckpoint:
    """A3S ``LoopCheckpoint``: the state after ``turn`` completed tool rounds of run ``run_id``.

    ``messages`` are OpenAI chat-format dicts (role/content/tool_calls/tool_call_id);
    ``total_usage`` has ``prompt_tokens``, ``completion_tokens``, ``total_tokens``;
    ``checkpoint_ms`` is epoch milliseconds from the session's ``HostEnv`` clock.
    """

    run_id: str
    session_id: str
    turn: int
    messages: list[dict[str, Any]]
    total_usage: dict[str, int]
    tool_calls_count: int
    checkpoint_ms: int
    schema_version: int = LOOP_CHECKPOINT_SCHEMA_VERSION


@dataclass(slots=True)
class PendingRound:
    """A round whose intent is durable but which was not committed (the process stopped mid-round).

    ``assistant_message`` is the OpenAI-format assistant message with ``tool_calls``;
    ``results`` maps ``tool_call_id`` to the recorded result dict
    (``{"output": str, "exit_code": int, "is_error": bool}``).
    """

    run_id: str
    turn: int
    assistant_message: dict[str, Any]
    results: dict[str, dict[str, Any]] = field(default_factory=dict)


class SessionStore(Protocol):
    """Persistence used by a session. All methods are synchronous and crash-atomic.

    Errors: implementations raise ``session_runtime.errors.StoreError`` (or its subclass
    ``FencedError`` when a newer epoch owns the session) on write failures.
    """

    def save_session(self, session_id: str, data: dict[str, Any]) -> None:
        """Persist session metadata (identity labels, options without secrets, run records)."""
        ...

    def load_session(self, session_id: str) -> dict[str, Any] | None:
        """Return what ``save_session`` last stored for ``session_id``, or None."""
        ...

    def begin_round(
        self, session_id: str, run_id: str, turn: int, assistant_message: dict[str, Any]
    ) -> None:
        """Journal the intent of round ``turn`` (1-based) before any of its tools run."""
        ...

    def record_tool_result(
        self, session_id: str, run_id: str, turn: int, tool_call_id: str, result: dict[str, Any]
    ) -> None:
        """Journal one tool result of round ``turn`` as soon as it arrives."""
        ...

    def commit_round(self, checkpoint: LoopCheckpoint) -> None:
        """Make the round's checkpoint durable; the round is complete after this returns."""
        ...

    def load_checkpoint(self, session_id: str, run_id: str) -> LoopCheckpoint | None:
        """The last committed checkpoint of ``run_id``, or None if the run has none."""
        ...

    def load_pending_round(self, session_id: str, run_id: str) -> PendingRound | None:
        """The uncommitted round of ``run_id`` (intent journaled, no commit), or None."""
        ...
