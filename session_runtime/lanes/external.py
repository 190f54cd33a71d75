"""External tasks of the lane queue and the transport seam that carries them to LaneWorkers.

Owned by ``session_runtime.lanes``. An :class:`ExternalTask` is what a command of a lane in
``external`` (or ``hybrid``) mode becomes (A3S ``ExternalTask``); an :class:`ExternalReply` is what
comes back (A3S ``ExternalTaskResult`` plus transport details). :class:`ExternalTransport` is the
seam the queue uses to publish tasks and receive replies; Berth's implementation is
``session_runtime.transport.RedisTaskTransport`` (docs/architecture.md §7). Without a transport,
tasks wait for ``LaneQueue.complete_external_task`` as in the framework.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from session_runtime.tools.base import Lane, ToolContext


@dataclass(frozen=True, slots=True)
class ExternalTaskResult:
    """What an external handler reports for a task (A3S ``ExternalTaskResult``).

    ``result`` is ``{"output": str, "exit_code": int}``; ``success=False`` means the handler
    could not run the task (``error`` says why), not that the tool failed: a tool that ran and
    failed is ``success=True`` with its exit code."""

    success: bool
    result: dict[str, Any] | None = None
    error: str | None = None


def completion_of(
    success: bool | ExternalTaskResult | dict[str, Any],
    result: dict[str, Any] | None = None,
    error: str | None = None,
) -> ExternalTaskResult:
    """The result of a ``complete_external_task`` call, in any of its accepted forms.

    Accepts the positional form ``(success: bool, result, error)``, an
    :class:`ExternalTaskResult`, or its dict form ``{"success": bool, "result": {...},
    "error": str | None}`` (the seeds' Python). Raises ``TypeError`` for anything ambiguous: a
    non-bool ``success``, a result object or dict given together with ``result``/``error``, a
    dict with unknown keys or without a bool ``success`` — never a silently empty output."""
    if isinstance(success, bool):
        return ExternalTaskResult(success, result, error)
    if result is not None or error is not None:
        raise TypeError(
            "complete_external_task: pass either success, result, error or one "
            "ExternalTaskResult (or its dict), not both"
        )
    if isinstance(success, ExternalTaskResult):
        return success
    if isinstance(success, dict):
        unknown = set(success) - {"success", "result", "error"}
        if unknown or not isinstance(success.get("success"), bool):
            raise TypeError(
                "complete_external_task: a result dict has a bool 'success' and optional "
                f"'result' and 'error' keys, got keys {sorted(success)}"
            )
        return ExternalTaskResult(success["success"], success.get("result"), success.get("error"))
    raise TypeError(
        f"complete_external_task: success must be a bool, an ExternalTaskResult or its dict, "
        f"not {type(success).__name__}"
    )


@dataclass(frozen=True, slots=True)
class ExternalTask:
    """A command handed to an external handler.

    ``payload`` is the model's raw tool arguments; ``command_type`` the tool name; ``timeout_ms``
    how long the queue waits for completion; ``created_ms`` epoch ms; ``tool_call_id`` lets a
    resumed session find the reply of a task it published before it stopped.
    """

    task_id: str
    session_id: str
    lane: Lane
    command_type: str
    payload: dict[str, Any]
    timeout_ms: int
    created_ms: int
    tool_call_id: str

    @property
    def deadline_ms(self) -> int:
        """Epoch ms after which the task is over (``created_ms + timeout_ms``)."""
        return self.created_ms + self.timeout_ms

    def remaining_ms(self, now_ms: int) -> int:
        """ms left before the deadline (0 when timed out)."""
        return max(0, self.deadline_ms - now_ms)

    def to_dict(self, now_ms: int) -> dict[str, Any]:
        """The A3S ``ExternalTask`` fields plus ``remaining_ms`` and ``tool_call_id``."""
        return {
            "task_id": self.task_id,
            "session_id": self.session_id,
            "lane": self.lane,
            "command_type": self.command_type,
            "payload": self.payload,
            "timeout_ms": self.timeout_ms,
            "remaining_ms": self.remaining_ms(now_ms),
            "tool_call_id": self.tool_call_id,
        }


@dataclass(frozen=True, slots=True)
class ExternalReply:
    """A completion of an external task (A3S ``ExternalTaskResult`` + transport details).

    ``success`` False means an infrastructure failure (worker lost, deadline, refused path); a tool
    that ran and failed is ``success=True`` with the failure in ``result["output"]`` and a non-zero
    ``result["exit_code"]`` (docs/architecture.md §7). ``ref`` identifies the reply in its transport
    (the Redis stream entry id) so it can be dropped once the session has journaled it.
    """

    task_id: str
    tool_call_id: str
    success: bool
    result: dict[str, Any] = field(default_factory=dict)
    error: str | None = None
    worker: str | None = None
    started_ms: int | None = None
    ended_ms: int | None = None
    ref: str | None = None


ReplySink = Callable[[ExternalReply], Awaitable[None]]


class ExternalTransport(Protocol):
    """Carries external tasks to workers and their replies back (docs/architecture.md §7)."""

    #: Extra ms the queue waits past a task's timeout for the worker's own "deadline"/"worker
    #: lost" reply before it gives up with a local timeout.
    reply_grace_ms: int

    async def start(self, sink: ReplySink) -> None:
        """Begin delivering replies to ``sink`` (idempotent)."""
        ...

    async def publish(self, task: ExternalTask, ctx: ToolContext) -> None:
        """Hand ``task`` to the workers of its lane. Raises on transport failure."""
        ...

    async def settle(self, reply: ExternalReply) -> None:
        """The session has journaled ``reply``; the transport may forget it."""
        ...

    async def find_reply(self, tool_call_id: str) -> ExternalReply | None:
        """A reply for ``tool_call_id`` delivered while this process was not listening, or None."""
        ...

    async def close(self) -> None:
        """Stop delivering replies and release connections."""
        ...
