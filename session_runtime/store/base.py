"""The persistence seam of ``session_runtime``: what the agent loop asks of a session store.

Owned by ``session_runtime.store``; called by ``session_runtime.agent``. Two implementations:
``FileSessionStore`` (append-only journal + snapshots + epoch fencing on a shared volume,
docs/architecture.md §6) and ``MemorySessionStore`` (tests).

Write protocol of one tool round (intent before action):

1. ``begin_round``: the assistant message that asks for tools is durable *before* any tool runs;
2. ``record_tool_result``: each result is kept as it arrives (``FileSessionStore`` makes it
   durable at once, except the round's last result, which becomes durable with the commit);
3. ``commit_round``: the round's ``LoopCheckpoint`` (A3S shape) is durable; the round is complete.

On resume the loop reads ``load_checkpoint`` (last completed round) and ``load_pending_round``
(the intent of an unfinished round and the results recorded for it).

The checkpoint shapes and their refusal messages come from the A3S contract
(docs/architecture.md §10, "Persistence"): ``LoopCheckpoint`` and ``WorkflowCheckpoint`` carry a
``schema_version``; ``ensure_loadable`` refuses versions this build cannot read.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol

from pydantic import ValidationError

from session_runtime.errors import CheckpointError
from session_runtime.store import shapes

#: A3S LoopCheckpoint schema version this build writes and the newest it can load.
LOOP_CHECKPOINT_SCHEMA_VERSION = 1

#: A3S WorkflowCheckpoint schema version this build writes and the newest it can load.
WORKFLOW_CHECKPOINT_SCHEMA_VERSION = 1


def _check_schema(what: str, version: object, supported: int) -> None:
    """Raise ``CheckpointError`` unless ``version`` is an int in ``1..supported``."""
    if isinstance(version, bool) or not isinstance(version, int) or version < 1:
        raise CheckpointError(
            f"{what} has invalid schema version {version!r}; this build supports 1 to {supported}"
        )
    if version > supported:
        raise CheckpointError(
            f"{what} has schema version {version} but this build supports at most {supported}; "
            "it was written by a newer session_runtime: upgrade this build to load it"
        )


@dataclass(slots=True)
class LoopCheckpoint:
    """A3S ``LoopCheckpoint``: the state after ``turn`` completed tool rounds of run ``run_id``.

    ``messages`` are OpenAI chat-format dicts (role/content/tool_calls/tool_call_id);
    ``total_usage`` has ``prompt_tokens``, ``completion_tokens``, ``total_tokens``;
    ``checkpoint_ms`` is epoch milliseconds from the session's ``HostEnv`` clock.

    ``known_prefix`` is not part of the A3S shape (``to_dict`` leaves it out, equality ignores
    it): a writer's promise that ``messages[:known_prefix]`` are, unmodified, the messages of
    this run's previous checkpoint, so a store may journal only ``messages[known_prefix:]``
    without comparing the history (a round then costs the same at round 10,000 as at round 10).
    0 (the default) promises nothing and the store compares. ``messages`` may be the writer's
    own live list: a store copies what it keeps before ``commit_round`` returns.
    """

    run_id: str
    session_id: str
    turn: int
    messages: list[dict[str, Any]]
    total_usage: dict[str, int]
    tool_calls_count: int
    checkpoint_ms: int
    schema_version: int = LOOP_CHECKPOINT_SCHEMA_VERSION
    known_prefix: int = field(default=0, compare=False)

    def ensure_loadable(self) -> None:
        """Refuse a checkpoint this build cannot read (A3S ``LoopCheckpoint::ensure_loadable``).

        Raises ``CheckpointError`` with the contract's message
        ``loop checkpoint for run <id> has schema version <v> but this build supports at most 1;
        ...`` when ``schema_version`` is newer than :data:`LOOP_CHECKPOINT_SCHEMA_VERSION`, or a
        similar message when it is not a positive int. Stores call it right after deserializing.
        """
        _check_schema(
            f"loop checkpoint for run {self.run_id}",
            self.schema_version,
            LOOP_CHECKPOINT_SCHEMA_VERSION,
        )

    def ensure_session(self, session_id: str) -> None:
        """Refuse a checkpoint that belongs to another session (docs/architecture.md §10,
        resume_run).

        Raises ``CheckpointError``: ``loop checkpoint for run <id> belongs to session '<a>', not
        '<b>'``.
        """
        if self.session_id != session_id:
            raise CheckpointError(
                f"loop checkpoint for run {self.run_id} belongs to session "
                f"'{self.session_id}', not '{session_id}'"
            )

    def to_dict(self) -> dict[str, Any]:
        """The A3S JSON shape: every field under its contract name (``schema_version`` first)."""
        return {
            "schema_version": self.schema_version,
            "run_id": self.run_id,
            "session_id": self.session_id,
            "turn": self.turn,
            "messages": self.messages,
            "total_usage": self.total_usage,
            "tool_calls_count": self.tool_calls_count,
            "checkpoint_ms": self.checkpoint_ms,
        }

    @classmethod
    def from_dict(cls, data: object) -> LoopCheckpoint:
        """Parse the A3S JSON shape, then ``ensure_loadable``.

        Raises ``CheckpointError`` (never a bare ``KeyError``/``TypeError``) when ``data`` is not
        a mapping, a field is missing or has the wrong type, or the schema is too new.
        """
        if not isinstance(data, dict):
            raise CheckpointError(
                f"loop checkpoint is unreadable: expected an object, got {data!r:.80}"
            )
        what = f"loop checkpoint for run {data.get('run_id', '?')}"
        _check_schema(what, data.get("schema_version"), LOOP_CHECKPOINT_SCHEMA_VERSION)
        try:
            m = shapes.LoopCheckpointModel.model_validate(data)
        except ValidationError as exc:
            raise CheckpointError(f"{what} is unreadable: {shapes.describe(exc)}") from exc
        return cls(
            run_id=m.run_id,
            session_id=m.session_id,
            turn=m.turn,
            messages=m.messages,
            total_usage=m.total_usage,
            tool_calls_count=m.tool_calls_count,
            checkpoint_ms=m.checkpoint_ms,
            schema_version=m.schema_version,
        )


@dataclass(slots=True)
class WorkflowCheckpoint:
    """A3S ``WorkflowCheckpoint``: the completed steps of an orchestration workflow.

    ``steps`` is the journal of completed steps in completion order (each a JSON-able dict the
    orchestrator defines); a resuming workflow skips the longest completed prefix and dispatches
    only the rest. ``checkpoint_ms`` is epoch milliseconds from the session's ``HostEnv`` clock.
    """

    workflow_id: str
    steps: list[dict[str, Any]]
    checkpoint_ms: int
    schema_version: int = WORKFLOW_CHECKPOINT_SCHEMA_VERSION

    def ensure_loadable(self) -> None:
        """Refuse a newer schema (A3S ``WorkflowCheckpoint::ensure_loadable``).

        Raises ``CheckpointError``: ``workflow checkpoint for workflow <id> has schema version
        <v> but this build supports at most 1; ...``.
        """
        _check_schema(
            f"workflow checkpoint for workflow {self.workflow_id}",
            self.schema_version,
            WORKFLOW_CHECKPOINT_SCHEMA_VERSION,
        )

    def to_dict(self) -> dict[str, Any]:
        """The A3S JSON shape: ``schema_version``, ``workflow_id``, ``steps``, ``checkpoint_ms``."""
        return {
            "schema_version": self.schema_version,
            "workflow_id": self.workflow_id,
            "steps": self.steps,
            "checkpoint_ms": self.checkpoint_ms,
        }

    @classmethod
    def from_dict(cls, data: object) -> WorkflowCheckpoint:
        """Parse the A3S JSON shape, then ``ensure_loadable``; bad input → ``CheckpointError``."""
        if not isinstance(data, dict):
            raise CheckpointError(
                f"workflow checkpoint is unreadable: expected an object, got {data!r:.80}"
            )
        what = f"workflow checkpoint for workflow {data.get('workflow_id', '?')}"
        _check_schema(what, data.get("schema_version"), WORKFLOW_CHECKPOINT_SCHEMA_VERSION)
        try:
            m = shapes.WorkflowCheckpointModel.model_validate(data)
        except ValidationError as exc:
            raise CheckpointError(f"{what} is unreadable: {shapes.describe(exc)}") from exc
        return cls(
            workflow_id=m.workflow_id,
            steps=m.steps,
            checkpoint_ms=m.checkpoint_ms,
            schema_version=m.schema_version,
        )


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
    ``FencedError`` when a newer epoch owns the session) on write failures, and
    ``CheckpointError`` when a stored checkpoint cannot be used (newer schema, other session,
    corrupt). Ids that could escape a directory are refused with ``InvalidIdError``.
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
        """Make the round's checkpoint durable; the round is complete after this returns.

        ``checkpoint.messages`` may be the caller's live list (it keeps growing after the call):
        copy what you keep. ``checkpoint.known_prefix`` may be used to skip comparing the
        history (see ``LoopCheckpoint``)."""
        ...

    def load_checkpoint(self, session_id: str, run_id: str) -> LoopCheckpoint | None:
        """The last committed checkpoint of ``run_id``, or None if the run has none."""
        ...

    def load_pending_round(self, session_id: str, run_id: str) -> PendingRound | None:
        """The uncommitted round of ``run_id`` (intent journaled, no commit), or None."""
        ...

    def save_workflow_checkpoint(self, session_id: str, checkpoint: WorkflowCheckpoint) -> None:
        """Persist ``checkpoint`` under its ``workflow_id`` (replaces the previous one)."""
        ...

    def load_workflow_checkpoint(
        self, session_id: str, workflow_id: str
    ) -> WorkflowCheckpoint | None:
        """The last saved checkpoint of ``workflow_id`` (``ensure_loadable`` applied), or None."""
        ...

    def delete_workflow_checkpoint(self, session_id: str, workflow_id: str) -> None:
        """Forget ``workflow_id``'s checkpoint (no error if there is none)."""
        ...
