"""Wire format of task and reply messages on Redis Streams (validated with pydantic).

Owned by ``session_runtime.transport``; used by the session side and by ``berth-worker``. Fields
are fixed by docs/architecture.md §7; every Redis field value is a string:

Task (session -> worker, on ``berth:<ns>:lw:{<lw>}:tasks``): ``task_id``, ``session`` (``ns/name``),
``session_uid``, ``epoch`` (int), ``run_id``, ``tool_call_id``, ``lane``, ``command_type`` (tool
name), ``payload`` (JSON object: the model's raw arguments), ``workspace`` (path of the session
workspace, relative to the shared volume root or absolute inside it), ``deadline_ms`` (epoch ms),
``reply_to`` (the session's reply stream); optional, left out when empty: ``traceparent`` and
``tracestate`` (W3C Trace Context of the session's tool-call span: the worker's execution span is
its child; they never name the session, which is ``session``) and ``labels`` (JSON object: the
session's identity labels, ``tenant_id``, ``principal``, ``agent_template_id``,
``correlation_id``, for the worker's spans). The MAC covers them like every other field.

Reply (worker -> session, on ``berth:<ns>:s:{<uid>}:results``): ``task_id``, ``tool_call_id``,
``success`` (``true``/``false``), ``result`` (JSON ``{"output": str, "exit_code": int,
"is_error": bool}`` — A3S ``ExternalTaskResult.result`` plus Berth's ``is_error``), ``error``
(empty = none), ``worker`` (pod name), ``started_ms``, ``ended_ms`` (epoch ms).

Errors: :class:`MalformedMessage` (a ``ValueError``) with a one-line ``reason``.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from berth_contract.tracing import IDENTITY
from session_runtime.lanes.config import LANES
from session_runtime.lanes.external import ExternalReply

Fields = Mapping[Any, Any]  # str or bytes keys and values, as redis-py returns them

#: Largest payload/result accepted, in bytes of JSON (a bigger message is malformed).
MAX_JSON_BYTES = 4 * 1024 * 1024
#: W3C Trace Context version 00 (or empty).
TRACEPARENT_PATTERN = r"^(|00-[0-9a-f]{32}-[0-9a-f]{16}-[0-9a-f]{2})$"
#: Task fields left out of the stream entry when empty.
OPTIONAL = ("traceparent", "tracestate", "labels")


class MalformedMessage(ValueError):
    """A stream entry that is not a valid task or reply. ``reason`` is a short explanation."""

    def __init__(self, reason: str, partial: Mapping[str, str] | None = None) -> None:
        super().__init__(reason)
        self.reason = reason
        #: The decoded string fields, for dead-lettering and best-effort failure replies.
        self.partial: dict[str, str] = dict(partial or {})


def as_text(value: Any) -> str:
    """A Redis reply value (``bytes`` from redis-py, or already ``str``) as text; invalid UTF-8
    is replaced, never raised (a forged entry must be dropped and counted, not crash a reader)."""
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)


def _decode(fields: Fields) -> dict[str, str]:
    return {as_text(key): as_text(value) for key, value in fields.items()}


def _json_object(raw: str, what: str) -> dict[str, Any]:
    if len(raw.encode()) > MAX_JSON_BYTES:
        raise ValueError(f"{what} larger than {MAX_JSON_BYTES} bytes")
    value = json.loads(raw)
    if not isinstance(value, dict):
        raise ValueError(f"{what} must be a JSON object")
    return value


class TaskMessage(BaseModel):
    """One task on a LaneWorker task stream."""

    model_config = ConfigDict(frozen=True, extra="ignore")

    task_id: str = Field(min_length=1, max_length=200)
    session: str = Field(min_length=3, max_length=320, pattern=r"^[a-z0-9-]+/[a-z0-9.-]+$")
    session_uid: str = Field(min_length=1, max_length=128)
    epoch: int = Field(ge=0)
    run_id: str = Field(min_length=1, max_length=200)
    tool_call_id: str = Field(min_length=1, max_length=200)
    lane: str
    command_type: str = Field(min_length=1, max_length=64)
    payload: dict[str, Any]
    workspace: str = Field(min_length=1, max_length=4096)
    deadline_ms: int = Field(ge=0)
    reply_to: str = Field(min_length=1, max_length=400)
    traceparent: str = Field(default="", pattern=TRACEPARENT_PATTERN)
    tracestate: str = Field(default="", max_length=512)
    labels: dict[str, str] = Field(default_factory=dict, max_length=len(IDENTITY))

    @field_validator("labels", mode="before")
    @classmethod
    def _labels(cls, value: Any) -> Any:
        labels = _json_object(value, "labels") if isinstance(value, str) else value
        if isinstance(labels, dict) and not set(labels) <= set(IDENTITY):
            raise ValueError(f"labels are {', '.join(IDENTITY)} only")
        return labels

    @field_validator("lane")
    @classmethod
    def _lane(cls, value: str) -> str:
        if value not in LANES:
            raise ValueError(f"unknown lane {value!r}")
        return value

    @field_validator("payload", mode="before")
    @classmethod
    def _payload(cls, value: Any) -> Any:
        return _json_object(value, "payload") if isinstance(value, str) else value

    def to_fields(self) -> dict[str, str]:
        """Redis field map (all strings)."""
        data = self.model_dump()
        data["payload"] = json.dumps(self.payload, separators=(",", ":"))
        data["labels"] = json.dumps(self.labels, separators=(",", ":")) if self.labels else ""
        return {k: str(v) for k, v in data.items() if k not in OPTIONAL or v}

    @classmethod
    def from_fields(cls, fields: Fields) -> TaskMessage:
        """Parse a stream entry; raises :class:`MalformedMessage`."""
        decoded = _decode(fields)
        try:
            return cls.model_validate(decoded)
        except (ValidationError, ValueError) as exc:
            raise MalformedMessage(_reason(exc), decoded) from exc


class ReplyMessage(BaseModel):
    """One reply on a session's reply stream."""

    model_config = ConfigDict(frozen=True, extra="ignore")

    task_id: str = Field(min_length=1)
    tool_call_id: str = ""
    success: bool
    result: dict[str, Any] = Field(default_factory=dict)
    error: str = ""
    worker: str = ""
    started_ms: int = 0
    ended_ms: int = 0

    @field_validator("result", mode="before")
    @classmethod
    def _result(cls, value: Any) -> Any:
        if isinstance(value, str):
            return _json_object(value, "result") if value else {}
        return value

    def to_fields(self) -> dict[str, str]:
        """Redis field map (all strings; ``success`` as ``true``/``false``, ``result`` as compact
        JSON), as docs/architecture.md §7 fixes it."""
        return {
            "task_id": self.task_id,
            "tool_call_id": self.tool_call_id,
            "success": "true" if self.success else "false",
            "result": json.dumps(self.result, separators=(",", ":")),
            "error": self.error,
            "worker": self.worker,
            "started_ms": str(self.started_ms),
            "ended_ms": str(self.ended_ms),
        }

    @classmethod
    def from_fields(cls, fields: Fields) -> ReplyMessage:
        """Parse a reply stream entry (str or bytes fields); raises :class:`MalformedMessage`."""
        decoded = _decode(fields)
        try:
            return cls.model_validate(decoded)
        except (ValidationError, ValueError) as exc:
            raise MalformedMessage(_reason(exc), decoded) from exc

    def to_external(self, ref: str | None = None) -> ExternalReply:
        """The lane queue's view of this reply; ``ref`` is the stream entry id."""
        return ExternalReply(
            task_id=self.task_id,
            tool_call_id=self.tool_call_id,
            success=self.success,
            result=dict(self.result),
            error=self.error or None,
            worker=self.worker or None,
            started_ms=self.started_ms or None,
            ended_ms=self.ended_ms or None,
            ref=ref,
        )


def _reason(exc: Exception) -> str:
    if isinstance(exc, ValidationError):
        parts = []
        for err in exc.errors()[:3]:
            loc = ".".join(str(x) for x in err["loc"]) or "message"
            parts.append(f"{loc}: {err['msg']}")
        return "; ".join(parts)
    return str(exc)
