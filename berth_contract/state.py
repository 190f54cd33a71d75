"""HTTP bodies of the session pod API (docs/architecture.md §5) and the lifecycle states behind
them.

Part of the contract (:mod:`berth_contract`): the session runtime validates requests with these
models and answers ``GET /v1/state`` with :func:`state_body`; the operator, the front door and the
kubectl plugin send :class:`PassivateRequest` and :class:`MessageRequest` bodies and read the state
with :class:`RuntimeState` (lenient: unknown keys ignored, both casings accepted, because a newer
runtime may add fields). Pure.

Lifecycle (:data:`Phase`), also the ``state`` label of ``berth_session_state``::

    starting ─► running ─► completed                       (task done, keepAlive false)
                   │  └──► idle ◄─► running                (keepAlive: wait for /v1/messages)
                   └─────► passivating ─► passivated       (POST /v1/passivate or SIGTERM)
    any ─► failed (error) | fenced (a newer epoch owns the session)
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final, Literal

from pydantic import AliasChoices, BaseModel, ConfigDict, Field

from berth_contract.options import IdentityOptions
from berth_contract.termination import Outcome, Usage

HTTP_PORT: Final = 8080
"""The session pod's HTTP port (``BERTH_HTTP_PORT`` may move it; the operator never does)."""

API_TOKEN_HEADER: Final = "X-Berth-Token"
"""Carries the session's API token, as ``Authorization: Bearer`` does (the apiserver's pod proxy
keeps this header, not that one)."""

Phase = Literal[
    "starting", "running", "idle", "passivating", "completed", "passivated", "failed", "fenced"
]

#: Phases after which the process exits; equal to the termination outcomes.
TERMINAL_PHASES: frozenset[Phase] = frozenset({"completed", "passivated", "failed", "fenced"})


def outcome_of(phase: Phase) -> Outcome | None:
    """The termination outcome for a terminal phase, else None."""
    if phase == "completed" or phase == "passivated" or phase == "failed" or phase == "fenced":
        return phase
    return None


class PassivateRequest(BaseModel):
    """``POST /v1/passivate`` body: ``{"reason": str, "deadlineMs": int?}``.

    ``deadlineMs`` is an absolute deadline in epoch milliseconds (the A3S ``passivation_requested``
    field); absent = now + ``passivation.deadlineSeconds`` of the options.
    """

    model_config = ConfigDict(extra="ignore", populate_by_name=True)

    reason: str = Field(min_length=1, max_length=256)
    deadline_ms: int | None = Field(default=None, alias="deadlineMs", ge=0)

    def wire(self) -> dict[str, Any]:
        """The body as sent: ``{"reason", "deadlineMs"}`` (``deadlineMs`` omitted when unset)."""
        return self.model_dump(by_alias=True, exclude_none=True)


#: A message id: what the front door generates (or a caller supplies) to deliver exactly once.
MESSAGE_ID_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$"


class PeerInvocation(BaseModel):
    """The A3S ``peer_invocation`` event's fields: who asked for this run (camelCase on the
    wire, snake_case in the event and the run record)."""

    model_config = ConfigDict(extra="ignore", populate_by_name=True)

    from_session_id: str = Field(alias="fromSessionId", min_length=1, max_length=320)
    from_tenant_id: str | None = Field(default=None, alias="fromTenantId", max_length=256)
    correlation_id: str | None = Field(default=None, alias="correlationId", max_length=256)

    def event_fields(self) -> dict[str, Any]:
        """``{from_session_id, from_tenant_id, correlation_id}`` (the event and record shape)."""
        return self.model_dump(by_alias=False)


class MessageRequest(BaseModel):
    """``POST /v1/messages`` body: ``{"prompt": str, "messageId": str?, "peer":
    {fromSessionId, fromTenantId?, correlationId?}?}`` (keepAlive sessions only).

    With ``messageId`` (the front door always sends one) the message is accepted at most once:
    a run started by it (or resumed from such a run) is found in the store and answered again
    instead of starting a second run. ``peer`` marks a run another session asked for; the run's
    hooks see a ``peer_invocation`` event with these fields.
    """

    model_config = ConfigDict(extra="ignore", populate_by_name=True)

    prompt: str = Field(min_length=1)
    message_id: str | None = Field(default=None, alias="messageId", pattern=MESSAGE_ID_PATTERN)
    peer: PeerInvocation | None = None


def message_body(message_id: str, runs: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """The ``GET /v1/messages/{id}`` answer from the runs the message started (oldest first,
    non-empty; the last continues the others): ``{"messageId", "runId", "status", "resultText",
    "error", "invokedBy", "runs": [run ids]}``; ``status`` is the last run's (running,
    completed, failed, cancelled, passivated, interrupted)."""
    last = runs[-1]
    return {
        "messageId": message_id,
        "runId": last.get("id"),
        "status": last.get("status"),
        "resultText": last.get("result_text"),
        "error": last.get("error"),
        "invokedBy": last.get("invoked_by"),
        "runs": [r.get("id") for r in runs],
    }


@dataclass(frozen=True, slots=True)
class Passivation:
    """An accepted passivation request. Times are epoch milliseconds."""

    reason: str
    deadline_ms: int
    requested_ms: int

    def to_json(self) -> dict[str, Any]:
        """``{"reason", "deadlineMs", "requestedMs"}`` (epoch ms), as ``/v1/state`` and the
        ``POST /v1/passivate`` answer carry it; a fresh dict each call."""
        return {
            "reason": self.reason,
            "deadlineMs": self.deadline_ms,
            "requestedMs": self.requested_ms,
        }


def checkpoint_json(checkpoint: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """The runtime's checkpoint summary ``{run_id, turn, tool_calls_count, at_ms}`` in the shape
    the operator reads (``CheckpointView``): ``{runId, turn, toolCallsCount, checkpointMs}``."""
    if not checkpoint:
        return None
    at = checkpoint.get("at_ms", checkpoint.get("checkpoint_ms"))
    return {
        "runId": checkpoint.get("run_id"),
        "turn": checkpoint.get("turn"),
        "toolCallsCount": checkpoint.get("tool_calls_count"),
        "checkpointMs": at,
    }


def state_body(
    phase: Phase,
    runtime: Mapping[str, Any] | None,
    *,
    session: str,
    epoch: int,
    identity: IdentityOptions,
    pod_name: str | None = None,
    node_name: str | None = None,
    passivation: Passivation | None = None,
    resumed_from: str | None = None,
    result_text: str | None = None,
    idle_since_ms: int | None = None,
    run_started_ms: int | None = None,
    traceparent: str | None = None,
) -> dict[str, Any]:
    """The ``GET /v1/state`` answer.

    ``runtime`` is ``Session.state()`` (``{state, run_id, turn, usage, tool_calls_count,
    last_checkpoint, last_error}``) or None before the session exists. Shape::

        {"state": Phase, "runtimeState": str | null, "runId": str | null,
         "resumedFrom": str | null, "turn": int, "toolCallsCount": int,  # resumedFrom: lineage
         "usage": {"promptTokens", "completionTokens", "totalTokens"},   # session cumulative
         "lastCheckpoint": {"runId", "turn", "toolCallsCount", "checkpointMs"} | null,
         "lastError": str | null, "epoch": int, "session": "<ns>/<name>",
         "identity": {"tenantId", "principal", "agentTemplateId", "correlationId"},
         "podName": str | null, "nodeName": str | null,
         "resultText": str | null,    # final text of the last finished run
         "idleSinceMs": int | null,   # when the pod became idle (keepAlive), else null
         "runStartedMs": int | null,  # when the pod started its latest run, else null
         "traceparent": str | null,   # W3C, of the span of run ``runId`` (tracing on)
         "passivation": {"reason", "deadlineMs", "requestedMs"} | null}
    """
    rt = runtime or {}
    turn = rt.get("turn")
    calls = rt.get("tool_calls_count")
    last_error = rt.get("last_error")
    passivation_json = passivation.to_json() if passivation else None
    return {
        "state": phase,
        "runtimeState": rt.get("state"),
        "runId": rt.get("run_id"),
        "resumedFrom": resumed_from,
        "turn": turn if isinstance(turn, int) else 0,
        "toolCallsCount": calls if isinstance(calls, int) else 0,
        "usage": Usage.from_mapping(rt.get("usage")).to_json(),
        "lastCheckpoint": checkpoint_json(rt.get("last_checkpoint")),
        "lastError": None if last_error is None else str(last_error),
        "epoch": epoch,
        "session": session,
        "identity": identity.model_dump(by_alias=True),
        "podName": pod_name,
        "nodeName": node_name,
        "resultText": result_text,
        "idleSinceMs": idle_since_ms,
        "runStartedMs": run_started_ms,
        "passivation": passivation_json,
        "traceparent": traceparent,
    }


class _Lenient(BaseModel):
    model_config = ConfigDict(extra="ignore", populate_by_name=True)


class CheckpointView(_Lenient):
    """``lastCheckpoint`` of ``/v1/state`` as read back: the last checkpoint's run, turn, tool
    calls and time (epoch ms)."""

    run_id: str | None = Field(None, validation_alias=AliasChoices("runId", "run_id"))
    turn: int | None = None
    tool_calls_count: int | None = Field(
        None, validation_alias=AliasChoices("toolCallsCount", "tool_calls_count")
    )
    checkpoint_ms: int | None = Field(
        None, validation_alias=AliasChoices("checkpointMs", "checkpoint_ms", "at_ms")
    )


class PassivationView(_Lenient):
    """``passivation`` of ``/v1/state`` as read back (:meth:`Passivation.to_json`; epoch ms)."""

    reason: str = ""
    deadline_ms: int | None = Field(
        None, validation_alias=AliasChoices("deadlineMs", "deadline_ms")
    )
    requested_ms: int | None = Field(
        None, validation_alias=AliasChoices("requestedMs", "requested_ms")
    )


class RuntimeState(_Lenient):
    """``GET /v1/state`` as the operator and the plugin read it (written by :func:`state_body`):
    state, runId, turn, usage, checkpoint, error, idle and run-start times (epoch ms)."""

    state: str | None = None
    """The :data:`Phase` word (starting, running, idle, passivating, completed, ...)."""
    run_id: str | None = Field(None, validation_alias=AliasChoices("runId", "run_id"))
    resumed_from: str | None = Field(
        None, validation_alias=AliasChoices("resumedFrom", "resumed_from")
    )
    turn: int | None = None
    tool_calls_count: int | None = Field(
        None, validation_alias=AliasChoices("toolCallsCount", "tool_calls_count")
    )
    usage: Usage | None = None
    checkpoint: CheckpointView | None = Field(
        None, validation_alias=AliasChoices("checkpoint", "lastCheckpoint", "last_checkpoint")
    )
    last_error: str | None = Field(
        None, max_length=100000, validation_alias=AliasChoices("lastError", "last_error", "error")
    )
    idle_since_ms: int | None = Field(
        None, validation_alias=AliasChoices("idleSinceMs", "idle_since_ms")
    )
    """When the pod became idle (no run, no message) in epoch ms; None while not idle."""
    run_started_ms: int | None = Field(
        None, validation_alias=AliasChoices("runStartedMs", "run_started_ms")
    )
    """When the pod started its latest run in epoch ms; None before any run (and from runtimes
    that do not report it)."""
    result_text: str | None = Field(
        None, validation_alias=AliasChoices("resultText", "text", "result", "result_text")
    )
    passivation: PassivationView | None = None
    """The passivation request the runtime accepted, if any (also ``kubectl berth passivate``)."""
    traceparent: str | None = Field(None, max_length=128)
    """W3C traceparent of run ``run_id``'s span (the parent of the operator's spans about it)."""
