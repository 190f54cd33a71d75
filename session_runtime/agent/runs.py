"""Run records and their bounded event buffers (A3S run replay + ``SessionRetentionLimits``).

Owned by ``session_runtime.agent``; the session appends a :class:`RunRecord` per send/stream/
resume_run and every event of a run to it. Retention is FIFO on insert and never an error:
past ``max_runs_retained`` the oldest *finished* run (and its events) goes; past
``max_events_per_run`` a run's oldest event goes while ``event_count`` stays cumulative; the
session trace is capped by ``max_trace_events``.
"""

from __future__ import annotations

from collections import OrderedDict, deque
from dataclasses import dataclass, field
from typing import Any, Literal

from session_runtime.agent.options import SessionRetentionLimits
from session_runtime.events import Event

RunStatus = Literal["running", "completed", "failed", "cancelled", "passivated", "interrupted"]
TERMINAL: frozenset[str] = frozenset(
    {"completed", "failed", "cancelled", "passivated", "interrupted"}
)


@dataclass(slots=True)
class RunRecord:
    """One run: ``id`` (``run-<id>``), ``status``, ``prompt``, epoch-ms times, ``result_text`` or
    ``error``, cumulative ``event_count``, ``usage``, ``tool_calls_count``, ``turn`` (completed
    tool rounds) and ``resumed_from`` (the run id this one continues, Berth lineage).

    *Berth* front door: ``message_id`` is the id of the message (``POST /v1/messages``) that
    started the run, inherited by every run resumed from it, so a message delivered twice is
    recognised; ``invoked_by`` is the A3S ``peer_invocation`` of a run another session asked for
    (``{from_session_id, from_tenant_id, correlation_id}``), else None."""

    id: str
    prompt: str
    started_ms: int
    status: RunStatus = "running"
    ended_ms: int | None = None
    result_text: str | None = None
    error: str | None = None
    event_count: int = 0
    usage: dict[str, int] = field(
        default_factory=lambda: {"prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0}
    )
    tool_calls_count: int = 0
    turn: int = 0
    resumed_from: str | None = None
    message_id: str | None = None
    invoked_by: dict[str, Any] | None = None
    #: *Berth*: W3C traceparent of the run's span; a run resumed from this one is its child.
    traceparent: str | None = None

    def snapshot(self) -> dict[str, Any]:
        """A JSON-able copy (the shape of ``run_snapshot`` and of persisted run records)."""
        return {
            "id": self.id,
            "status": self.status,
            "prompt": self.prompt,
            "started_ms": self.started_ms,
            "ended_ms": self.ended_ms,
            "result_text": self.result_text,
            "error": self.error,
            "event_count": self.event_count,
            "usage": dict(self.usage),
            "tool_calls_count": self.tool_calls_count,
            "turn": self.turn,
            "resumed_from": self.resumed_from,
            "message_id": self.message_id,
            "invoked_by": dict(self.invoked_by) if self.invoked_by else None,
            "traceparent": self.traceparent,
        }

    @classmethod
    def from_snapshot(cls, data: dict[str, Any]) -> RunRecord:
        """Rebuild from :meth:`snapshot` output."""
        return cls(
            id=str(data["id"]),
            prompt=str(data.get("prompt", "")),
            started_ms=int(data.get("started_ms", 0)),
            status=data.get("status", "interrupted"),
            ended_ms=data.get("ended_ms"),
            result_text=data.get("result_text"),
            error=data.get("error"),
            event_count=int(data.get("event_count", 0)),
            usage=dict(data.get("usage") or {}),
            tool_calls_count=int(data.get("tool_calls_count", 0)),
            turn=int(data.get("turn", 0)),
            resumed_from=data.get("resumed_from"),
            message_id=data.get("message_id"),
            invoked_by=data.get("invoked_by") or None,
            traceparent=data.get("traceparent") or None,
        )


class RunLog:
    """The session's run records, per-run event buffers and trace, under retention limits."""

    def __init__(self, limits: SessionRetentionLimits) -> None:
        self.limits = limits
        self._runs: OrderedDict[str, RunRecord] = OrderedDict()
        self._events: dict[str, deque[Event]] = {}
        self.trace: deque[Event] = deque(maxlen=limits.max_trace_events)

    def add(self, record: RunRecord) -> None:
        """Insert a run, then drop the oldest finished runs past ``max_runs_retained``."""
        self._runs[record.id] = record
        self._events[record.id] = deque(maxlen=self.limits.max_events_per_run)
        cap = self.limits.max_runs_retained
        if cap is None:
            return
        while len(self._runs) > cap:
            victim = next((r for r in self._runs.values() if r.status in TERMINAL), None)
            if victim is None:
                return
            del self._runs[victim.id]
            self._events.pop(victim.id, None)

    def record_event(self, event: Event) -> None:
        """Append ``event`` to the trace and, if it names a retained run, to that run."""
        self.trace.append(event)
        run_id = event.get("run_id")
        if run_id is None:
            return
        record = self._runs.get(str(run_id))
        if record is not None:
            record.event_count += 1
            self._events[record.id].append(event)

    def get(self, run_id: str) -> RunRecord | None:
        """The record of ``run_id`` if retained."""
        return self._runs.get(run_id)

    def events(self, run_id: str) -> list[Event]:
        """The retained events of ``run_id`` (oldest first); [] if unknown."""
        return list(self._events.get(run_id, ()))

    def records(self) -> list[RunRecord]:
        """All retained runs, oldest first."""
        return list(self._runs.values())

    def load(self, snapshots: list[dict[str, Any]]) -> None:
        """Restore persisted run records; a stored ``running`` run is now ``interrupted``."""
        for snap in snapshots:
            rec = RunRecord.from_snapshot(snap)
            if rec.status == "running":
                rec.status = "interrupted"
            self.add(rec)
