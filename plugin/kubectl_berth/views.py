"""The terminal view of ``kubectl berth status`` and ``events``.

``status`` is laid out as ``kubectl describe`` lays out an object: one ``Key:  value`` line per
field, sections indented by two spaces, and a value longer than the line wrapped under itself
(never cut: a run id, a reason or a phase is printed whole at any width, even when it is wider
than the terminal). The width is the terminal's, or 80 columns when the output is piped (what
``shutil.get_terminal_size`` falls back to, as ``COLUMNS`` overrides it).
"""

from __future__ import annotations

import textwrap
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from berth_operator.api.agentsession import AgentSessionStatus
from rich.table import Table

from kubectl_berth.session_api import parse_status

INDENT = "  "
"""One level of section indentation."""


def age(ts: datetime | None, now: datetime) -> str:
    """kubectl-style age (``45s``, ``12m``, ``3h``, ``2d``) of ``ts`` at ``now``; ``-`` if none."""
    if ts is None:
        return "-"
    seconds = max(0, int((now - ts).total_seconds()))
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{seconds // size}{unit}"
    return f"{seconds}s"


def when(ts: datetime | None, now: datetime) -> str:
    """A time as ``2026-11-21T10:00:00Z (2h ago)``; ``-`` if none."""
    if ts is None:
        return "-"
    return f"{ts.strftime('%Y-%m-%dT%H:%M:%SZ')} ({age(ts, now)} ago)"


@dataclass
class Section:
    """A titled block of ``key: value`` rows (and nested sections), printed describe-style."""

    title: str
    rows: list[tuple[str, str]] = field(default_factory=list)
    children: list[Section] = field(default_factory=list)

    def row(self, key: str, value: object) -> Section:
        """Add the row ``key: value`` (``None`` and ``""`` print as ``-``); returns self."""
        text = "-" if value is None or value == "" else str(value)
        self.rows.append((key, text))
        return self


def render(sections: list[Section], width: int = 80) -> str:
    """``sections`` as text lines no wider than ``width`` where words allow: keys aligned per
    section, long values wrapped under their first character, nothing truncated."""
    lines: list[str] = []
    for section in sections:
        _render(section, 0, max(width, 40), lines)
    return "\n".join(lines) + "\n"


def _render(section: Section, depth: int, width: int, lines: list[str]) -> None:
    pad = INDENT * depth
    if section.title:
        lines.append(f"{pad}{section.title}")
        pad += INDENT
    key_width = max((len(k) for k, _ in section.rows), default=0) + 2
    for key, value in section.rows:
        lead = f"{pad}{key + ':':<{key_width}}"
        lines.extend(_wrapped(lead, value, width))
    for child in section.children:
        _render(child, depth + (1 if section.title else 0), width, lines)


def _wrapped(lead: str, value: str, width: int) -> list[str]:
    """``lead`` then ``value``, wrapped at spaces to ``width`` with later lines under the value;
    a word longer than the room left stays whole (never cut, never hyphenated)."""
    room = max(width - len(lead), 20)
    out: list[str] = []
    for paragraph in value.splitlines() or [""]:
        out.extend(
            textwrap.wrap(paragraph, room, break_long_words=False, break_on_hyphens=False) or [""]
        )
    hang = " " * len(lead)
    return [(lead if i == 0 else hang) + text for i, text in enumerate(out)]


def status_sections(body: dict[str, Any], now: datetime) -> list[Section]:
    """The sections of ``kubectl berth status``: the summary, conditions, runs (oldest first),
    usage and the last error when there is one. Raises PluginError for a malformed status."""
    meta = body.get("metadata") or {}
    spec = body.get("spec") or {}
    st = parse_status(body)
    sections = [
        _summary(meta, spec, st, now),
        _conditions(st, now),
        _runs(st, now),
        _usage(st, spec),
    ]
    if st.last_error:
        sections.append(Section("Last error:").row("Message", st.last_error))
    return sections


def status_text(body: dict[str, Any], now: datetime, width: int = 80) -> str:
    """``kubectl berth status`` as text for a terminal ``width`` columns wide."""
    return render(status_sections(body, now), width)


def _summary(
    meta: dict[str, Any], spec: dict[str, Any], st: AgentSessionStatus, now: datetime
) -> Section:
    turn = None if st.checkpoint is None else st.checkpoint.turn
    summary = Section("")
    summary.row("Name", meta.get("name")).row("Namespace", meta.get("namespace"))
    summary.row("Phase", st.phase).row("Pod", st.pod_name).row("Node", st.node_name)
    summary.row("Epoch", st.epoch).row("Run", st.run_id).row("Turn", turn)
    summary.row("Passivations", st.passivations or 0)
    summary.row("Keep alive", "yes" if spec.get("keepAlive") else "no")
    at_rest = None if st.at_rest_since is None else "since " + when(st.at_rest_since, now)
    summary.row("At rest", at_rest)
    if st.image:  # the current pod's session image (an upgrade migrates it)
        summary.row("Image", st.image)
    return summary


def _conditions(st: AgentSessionStatus, now: datetime) -> Section:
    section = Section("Conditions:")
    for c in st.conditions or []:
        child = Section(f"{c.type}:")
        child.row("Status", c.status).row("Reason", c.reason)
        child.row("Since", when(c.last_transition_time, now))
        if c.message:
            child.row("Message", c.message)
        section.children.append(child)
    if not section.children:
        section.row("(none yet)", "")
    return section


def _runs(st: AgentSessionStatus, now: datetime) -> Section:
    section = Section("Runs (oldest first):")
    for r in st.runs or []:
        child = Section(f"{r.run_id}:")
        if r.resumed_from:
            child.row("Resumed from", r.resumed_from)
        child.row("Pod", r.pod_name).row("Node", r.node_name)
        child.row("Started", when(r.started_at, now)).row("Ended", when(r.ended_at, now))
        child.row("Outcome", r.outcome)
        if r.reason:
            child.row("Reason", r.reason)
        section.children.append(child)
    if not section.children:
        section.row("(none yet)", "")
    return section


def _usage(st: AgentSessionStatus, spec: dict[str, Any]) -> Section:
    u = st.usage
    budget = (spec.get("budget") or {}).get("maxTotalTokens")
    tool_calls = st.checkpoint.tool_calls_count if st.checkpoint else None
    section = Section("Usage:")
    section.row("Prompt tokens", u.prompt_tokens if u else 0)
    section.row("Completion tokens", u.completion_tokens if u else 0)
    section.row("Total tokens", u.total_tokens if u else 0)
    section.row("Budget", budget).row("Tool calls", tool_calls)
    return section


def events_table(items: list[dict[str, Any]], now: datetime) -> Table:
    """Events as a table: LAST SEEN, TYPE, REASON, COUNT, MESSAGE (like kubectl events). The
    short columns are never wrapped or cut; the message wraps within its column."""
    table = Table(box=None)
    for name in ("LAST SEEN", "TYPE", "REASON", "COUNT"):
        table.add_column(name, no_wrap=True, overflow="ignore")
    table.add_column("MESSAGE", overflow="fold", ratio=1)
    for e in items:
        seen = e.get("lastTimestamp") or e.get("eventTime") or e.get("firstTimestamp")
        at = datetime.fromisoformat(str(seen).replace("Z", "+00:00")) if seen else None
        table.add_row(
            age(at, now),
            str(e.get("type") or ""),
            str(e.get("reason") or ""),
            str(e.get("count") or 1),
            str(e.get("message") or ""),
        )
    return table
