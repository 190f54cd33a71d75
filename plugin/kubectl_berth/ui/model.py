"""What the pages show, computed from the objects the cluster returns: pure functions, no I/O.

A session row and a session's story come from the AgentSession (its status as the operator's
model, ``berth_operator.api.agentsession``), its Events, the runtime's ``GET /v1/state`` and the
session pod's ``/metrics`` counters (``berth_session_tool_calls_total{lane}``), all read through
the apiserver (docs/architecture.md §5). Times are timezone-aware datetimes; ages are
kubectl-style (``views.age``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from berth_operator.api.agentsession import AgentSessionStatus, RunRecord
from berth_operator.api.laneworker import LaneWorkerStatus

from berth_contract.runview import ToolCallView
from kubectl_berth.session_api import parse_status
from kubectl_berth.views import age

TOOL_CALLS_METRIC = re.compile(
    r'^berth_session_tool_calls_total\{[^}]*lane="([^"]+)"[^}]*\}\s+(\S+)'
)
"""A ``berth_session_tool_calls_total{lane="..."} N`` sample of the session pod's /metrics."""


@dataclass(frozen=True)
class SessionRow:
    """One line of the sessions list."""

    namespace: str
    name: str
    phase: str
    ready_reason: str
    node: str
    run: str
    turn: str
    tokens: int
    budget: int | None
    tenant: str
    age: str


@dataclass(frozen=True)
class RunView:
    """One run of a session's timeline, with the gap before the next run (resume latency)."""

    run_id: str
    resumed_from: str
    pod: str
    node: str
    started: datetime | None
    ended: datetime | None
    outcome: str
    reason: str
    resume_seconds: float | None
    tool_calls: dict[str, int] = field(default_factory=dict)


def _ready_reason(st: AgentSessionStatus) -> str:
    ready = next((c for c in st.conditions or [] if c.type == "Ready"), None)
    return "" if ready is None else f"{ready.status} ({ready.reason})"


def session_row(body: dict[str, Any], now: datetime) -> SessionRow:
    """The list row of an AgentSession object. Raises PluginError for a malformed status."""
    meta = body.get("metadata") or {}
    spec = body.get("spec") or {}
    st = parse_status(body)
    created = meta.get("creationTimestamp")
    born = datetime.fromisoformat(str(created).replace("Z", "+00:00")) if created else None
    turn = None if st.checkpoint is None else st.checkpoint.turn
    return SessionRow(
        namespace=str(meta.get("namespace") or ""),
        name=str(meta.get("name") or ""),
        phase=st.phase or "Pending",
        ready_reason=_ready_reason(st),
        node=st.node_name or "",
        run=st.run_id or "",
        turn="" if turn is None else str(turn),
        tokens=st.usage.total_tokens if st.usage else 0,
        budget=(spec.get("budget") or {}).get("maxTotalTokens"),
        tenant=str((spec.get("identity") or {}).get("tenantId") or ""),
        age=age(born, now),
    )


def filter_rows(rows: list[SessionRow], tenant: str = "", phase: str = "") -> list[SessionRow]:
    """Rows of ``tenant`` and ``phase`` (either empty: any), sorted by namespace and name."""
    kept = [
        r for r in rows if (not tenant or r.tenant == tenant) and (not phase or r.phase == phase)
    ]
    return sorted(kept, key=lambda r: (r.namespace, r.name))


def runs_timeline(st: AgentSessionStatus, calls: dict[str, dict[str, int]]) -> list[RunView]:
    """The runs, oldest first, each with the seconds from its end to the next run's start (the
    passivation's resume latency) and its tool calls by lane from ``calls`` (by pod name)."""
    runs: list[RunRecord] = list(st.runs or [])
    views: list[RunView] = []
    for i, r in enumerate(runs):
        following = runs[i + 1] if i + 1 < len(runs) else None
        gap = None
        if following is not None and r.ended_at and following.started_at:
            gap = max(0.0, (following.started_at - r.ended_at).total_seconds())
        views.append(
            RunView(
                run_id=r.run_id,
                resumed_from=r.resumed_from or "",
                pod=r.pod_name or "",
                node=r.node_name or "",
                started=r.started_at,
                ended=r.ended_at,
                outcome=r.outcome,
                reason=r.reason or "",
                resume_seconds=gap,
                tool_calls=dict(calls.get(r.pod_name or "", {})),
            )
        )
    return views


def tool_calls_by_lane(metrics_text: str) -> dict[str, int]:
    """Tool calls by lane from a session pod's Prometheus text exposition (``{}`` when the
    counter is absent)."""
    counts: dict[str, int] = {}
    for line in metrics_text.splitlines():
        match = TOOL_CALLS_METRIC.match(line)
        if match:
            counts[match.group(1)] = counts.get(match.group(1), 0) + int(float(match.group(2)))
    return counts


def calls_cursor(known: list[ToolCallView]) -> int | None:
    """The ``after`` to ask a run's pod with, given the calls already known (start order): just
    before the first call still running (so its end is seen), else the last call; None when
    nothing is known (from the first)."""
    running = [c.seq for c in known if c.outcome == "running"]
    if running:
        return min(running) - 1
    return known[-1].seq if known else None


def merge_calls(known: list[ToolCallView], page: list[ToolCallView]) -> list[ToolCallView]:
    """``known`` updated with ``page`` (a call of both: ``page``'s), in start (``seq``) order."""
    by_id = {c.id: c for c in known}
    by_id.update((c.id, c) for c in page)
    return sorted(by_id.values(), key=lambda c: c.seq)


def call_row(call: ToolCallView) -> dict[str, str]:
    """One tool call as the page shows it: ``{id, name, lane, started (UTC HH:MM:SS.mmm),
    duration ("1.234 s", "" until it ends), outcome ("ok", "error (exit 3)", "running", ...)}``."""
    started = ""
    if call.started_ms is not None:
        started = datetime.fromtimestamp(call.started_ms / 1000, UTC).strftime("%H:%M:%S.%f")[:-3]
    outcome = call.outcome
    if call.outcome == "error" and call.exit_code is not None:
        outcome = f"error (exit {call.exit_code})"
    return {
        "id": call.id,
        "name": call.name,
        "lane": call.lane,
        "started": started,
        "duration": "" if call.duration_ms is None else f"{call.duration_ms / 1000:.3f} s",
        "outcome": outcome,
    }


def event_rows(items: list[dict[str, Any]], now: datetime) -> list[dict[str, str]]:
    """Events, newest first, as ``{age, type, reason, object, message, count}``."""
    rows = []
    for e in items:
        seen = e.get("lastTimestamp") or e.get("eventTime") or e.get("firstTimestamp")
        at = datetime.fromisoformat(str(seen).replace("Z", "+00:00")) if seen else None
        involved = e.get("involvedObject") or {}
        rows.append(
            {
                "at": "" if at is None else at.isoformat(),
                "age": age(at, now),
                "type": str(e.get("type") or ""),
                "reason": str(e.get("reason") or ""),
                "object": f"{involved.get('kind', '')}/{involved.get('name', '')}",
                "message": str(e.get("message") or ""),
                "count": str(e.get("count") or 1),
            }
        )
    return sorted(rows, key=lambda r: r["at"], reverse=True)


def worker_status(body: dict[str, Any]) -> LaneWorkerStatus:
    """A LaneWorker's status as the operator's model (an empty one when it has none)."""
    return LaneWorkerStatus.model_validate(body.get("status") or {})


def sessions_of_worker(sessions: list[dict[str, Any]], worker: str) -> list[tuple[str, str]]:
    """(session name, lane) of every session whose lanes name the LaneWorker ``worker``."""
    found = []
    for s in sessions:
        lanes = (s.get("spec") or {}).get("lanes") or {}
        for lane, spec in sorted(lanes.items()):
            if ((spec or {}).get("laneWorkerRef") or {}).get("name") == worker:
                found.append((str((s.get("metadata") or {}).get("name")), str(lane)))
    return found
