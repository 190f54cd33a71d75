"""The template context of each page: what :mod:`kubectl_berth.ui.source` read, shaped by
:mod:`kubectl_berth.ui.model` and drawn by :mod:`kubectl_berth.ui.charts`.

A session page has parts (``SESSION_PARTS``), each a template ``_<part>.html`` that the live
stream re-renders alone.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any
from urllib.parse import urlencode

from markupsafe import Markup

from kubectl_berth.errors import PluginError
from kubectl_berth.session_api import parse_status
from kubectl_berth.ui import charts
from kubectl_berth.ui.links import session_links
from kubectl_berth.ui.model import (
    RunView,
    call_row,
    event_rows,
    filter_rows,
    runs_timeline,
    session_row,
    sessions_of_worker,
    worker_status,
)
from kubectl_berth.ui.source import SessionSnapshot, Source
from kubectl_berth.views import age

SESSION_PARTS = ("summary", "runs", "calls", "conversation", "tokens", "conditions", "events")
"""The live parts of a session page, in page order."""
PHASES = ("Pending", "Running", "Passivating", "Passivated", "Succeeded", "Failed")
"""The phases the list filters by (the CRD's)."""
CALLS_SHOWN = 50
"""Tool calls shown per run (the newest)."""
MESSAGES_SHOWN = 30
"""Messages of the conversation shown (the newest)."""


async def sessions(source: Source, query: dict[str, str]) -> dict[str, Any]:
    """The sessions list: rows filtered by ``namespace``, ``tenant`` and ``phase``."""
    now = datetime.now(UTC)
    rows = []
    for body in await source.sessions():
        try:
            rows.append(session_row(body, now))
        except PluginError:
            continue
    namespace = query.get("namespace", "")
    tenants = sorted({r.tenant for r in rows if r.tenant})
    namespaces = sorted({r.namespace for r in rows})
    if namespace:
        rows = [r for r in rows if r.namespace == namespace]
    rows = filter_rows(rows, query.get("tenant", ""), query.get("phase", ""))
    return {
        "rows": rows,
        "tenants": tenants,
        "namespaces": namespaces,
        "phases": PHASES,
        "query": query,
        "live": "/live/sessions?" + urlencode(sorted(query.items())),
    }


async def session(source: Source, namespace: str, name: str) -> dict[str, Any]:
    """One session's page. Raises NotFound or KubeError when the object cannot be read."""
    now = datetime.now(UTC)
    snap = await source.session(namespace, name)
    st = parse_status(snap.body)
    spec = snap.body.get("spec") or {}
    runs = runs_timeline(st, snap.calls)
    budget = (spec.get("budget") or {}).get("maxTotalTokens")
    current = snap.calls.get(st.pod_name or "", {})
    state = snap.state or {}
    return {
        "ns": namespace,
        "name": name,
        "st": st,
        "spec": spec,
        "keep_alive": bool(spec.get("keepAlive")),
        "tenant": (spec.get("identity") or {}).get("tenantId") or "",
        "workers": sorted(
            {
                str((lane or {}).get("laneWorkerRef", {}).get("name"))
                for lane in (spec.get("lanes") or {}).values()
                if (lane or {}).get("laneWorkerRef")
            }
        ),
        "state": state,
        "state_note": snap.state_note,
        "runs": runs,
        "runs_svg": Markup(charts.runs_chart(runs, now)),
        "calls_now": current,
        "calls_total": _sum_calls(runs),
        "tokens_svg": Markup(charts.token_chart(snap.tokens, budget)),
        "budget": budget,
        "total_tokens": int((state.get("usage") or {}).get("totalTokens") or 0)
        or (st.usage.total_tokens if st.usage else 0),
        "conditions": [(c, age(c.last_transition_time, now)) for c in st.conditions or []],
        "events": event_rows(snap.events, now),
        "allowed": await source.allowed(namespace),
        "said": "",
        "run_calls": _run_calls(runs, snap),
        **_conversation(snap),
        "links": session_links(
            source.links,
            {
                "namespace": namespace,
                "name": name,
                "session": f"{namespace}/{name}",
                "uid": str((snap.body.get("metadata") or {}).get("uid") or ""),
                "runId": st.run_id or (runs[-1].run_id if runs else ""),
                "correlationId": str((spec.get("identity") or {}).get("correlationId") or ""),
            },
        ),
    }


def _run_calls(runs: list[RunView], snap: SessionSnapshot) -> list[dict[str, Any]]:
    """Per run with known tool calls: the run, its newest ``CALLS_SHOWN`` calls as rows, and how
    many earlier ones are left out."""
    found = []
    for run in runs:
        calls = snap.run_calls.get(run.run_id) or []
        if calls:
            shown = calls[-CALLS_SHOWN:]
            rows = [call_row(c) for c in shown]
            found.append({"run": run, "calls": rows, "hidden": len(calls) - len(shown)})
    return found


def _conversation(snap: SessionSnapshot) -> dict[str, Any]:
    """The last run's newest ``MESSAGES_SHOWN`` messages and where they start."""
    view = snap.last_run
    if view is None:
        return {"conversation": [], "conversation_run": "", "messages_total": 0}
    return {
        "conversation": view.conversation[-MESSAGES_SHOWN:],
        "conversation_run": view.run_id,
        "messages_total": view.messages_total,
    }


def _sum_calls(runs: list[Any]) -> dict[str, int]:
    total: dict[str, int] = {}
    for run in runs:
        for lane, n in run.tool_calls.items():
            total[lane] = total.get(lane, 0) + n
    return dict(sorted(total.items()))


async def worker(source: Source, namespace: str, name: str) -> dict[str, Any]:
    """One LaneWorker's page. Raises NotFound or KubeError."""
    body = await source.worker(namespace, name)
    st = worker_status(body)
    series = list(source.history.workers.get(f"{namespace}/{name}", ()))
    try:
        listed = await source.sessions()
    except PluginError:
        listed = []
    in_ns = [s for s in listed if (s.get("metadata") or {}).get("namespace") == namespace]
    users = sessions_of_worker(in_ns, name)
    calls = source.history.pod_calls
    by_session = []
    for session_name, lane in users:
        body_of = next(s for s in in_ns if s["metadata"]["name"] == session_name)
        pods = [r.get("podName") for r in (body_of.get("status") or {}).get("runs") or []]
        count = sum(calls.get(str(p), {}).get(lane, 0) for p in pods)
        by_session.append({"session": session_name, "lane": lane, "calls": count})
    return {
        "ns": namespace,
        "name": name,
        "st": st,
        "spec": body.get("spec") or {},
        "by_session": by_session,
        "chart_svg": Markup(charts.worker_chart(series)),
    }
