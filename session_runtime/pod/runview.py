"""One run's tool calls and conversation: the read behind ``GET /v1/runs/{runId}/events``
(shape and wire names: :mod:`berth_contract.runview`).

Owned by the session pod (``session_runtime.pod``); reads only. Tool calls come from the run's
retained events (``tool_start`` / ``tool_end`` paired by call id, stamped ``seq`` and ``ts_ms``
by the session, docs/architecture.md §10 "Events"); a call's duration runs from its
``tool_start`` to its ``tool_end`` (time queued on its lane included), its lane is the A3S
contract's (:func:`session_runtime.tools.base.lane_for_tool`). The conversation is the session's
live history for the run this process runs (or ran last), else the run's last checkpoint in the
store; every text in it is masked with the store's own masking (:mod:`session_runtime.store.
redact`) and cut to ``TEXT_LIMIT`` characters.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from berth_contract.runview import (
    TEXT_LIMIT,
    MessageCall,
    MessageView,
    RunEvents,
    ToolCallView,
    run_events_body,
)
from session_runtime.agent.session import Session
from session_runtime.errors import SessionRuntimeError
from session_runtime.events import TOOL_END, TOOL_START
from session_runtime.store.ids import check_id
from session_runtime.store.redact import redact_text, strip_secrets
from session_runtime.tools.base import lane_for_tool


def tool_calls(events: Iterable[Mapping[str, Any]], running: bool) -> list[ToolCallView]:
    """The tool calls of ``events`` (one run's, oldest first) in start order. A call without a
    ``tool_end`` is ``running`` while the run is (``running``), else ``unfinished``; one whose
    ``tool_start`` was dropped by retention has no start time."""
    calls: dict[str, ToolCallView] = {}
    for e in events:
        kind, call_id = e.get("type"), str(e.get("id", ""))
        if kind == TOOL_START:
            calls[call_id] = ToolCallView(
                id=call_id,
                name=str(e.get("name", "")),
                lane=lane_for_tool(str(e.get("name", ""))),
                seq=int(e.get("seq") or 0),
                started_ms=e.get("ts_ms"),
                outcome="running" if running else "unfinished",
            )
        elif kind == TOOL_END:
            call = calls.setdefault(call_id, _orphan_end(e))
            ended, code = e.get("ts_ms"), e.get("exit_code")
            call.ended_ms = ended if isinstance(ended, int) else None
            if call.ended_ms is not None and call.started_ms is not None:
                call.duration_ms = max(0, call.ended_ms - call.started_ms)
            call.exit_code = code if isinstance(code, int) else None
            call.outcome = "ok" if code == 0 else "error"
    return list(calls.values())


def _orphan_end(event: Mapping[str, Any]) -> ToolCallView:
    name = str(event.get("name", ""))
    return ToolCallView(
        id=str(event.get("id", "")),
        name=name,
        lane=lane_for_tool(name),
        seq=int(event.get("seq") or 0),
    )


MASK_MARGIN = 8192
"""Characters past ``TEXT_LIMIT`` masked along with the kept ones (a credential that starts in
the kept part and is shorter than this is masked whole before the cut)."""


@functools.lru_cache(maxsize=1024)
def masked(text: str) -> tuple[str, bool]:
    """``text`` with credentials masked (the store's ``redact_text``), cut to ``TEXT_LIMIT``
    characters; and whether it was cut. Only the first ``TEXT_LIMIT + MASK_MARGIN`` characters
    are masked, then cut, so a cut never keeps part of a credential masking would have hidden
    and a long tool output costs no more than a short one. Memoised: a view polling a run asks
    for the same messages again and again."""
    clean = redact_text(text[: TEXT_LIMIT + MASK_MARGIN])
    return clean[:TEXT_LIMIT], len(text) > TEXT_LIMIT or len(clean) > TEXT_LIMIT


def _content_text(content: Any) -> str:
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = [p.get("text", "") if isinstance(p, dict) else str(p) for p in content]
        return "\n".join(str(p) for p in parts)
    return json.dumps(strip_secrets(content), default=str)


def message_view(index: int, message: Mapping[str, Any]) -> MessageView:
    """One OpenAI chat-format message as the view shows it (masked, cut)."""
    content, cut = masked(_content_text(message.get("content")))
    calls = []
    for raw in message.get("tool_calls") or []:
        fn = raw.get("function") or {}
        args = fn.get("arguments", "")
        text = args if isinstance(args, str) else json.dumps(strip_secrets(args), default=str)
        shown, args_cut = masked(text)
        cut = cut or args_cut
        calls.append(
            MessageCall(id=str(raw.get("id", "")), name=str(fn.get("name", "")), arguments=shown)
        )
    tool_call_id = message.get("tool_call_id")
    return MessageView(
        index=index,
        role=str(message.get("role", "")),
        content=content,
        tool_calls=calls,
        tool_call_id=None if tool_call_id is None else str(tool_call_id),
        truncated=cut,
    )


def conversation(session: Session, run_id: str) -> list[dict[str, Any]]:
    """The messages of run ``run_id``: the live history when it is this session's last run, else
    its last checkpoint's ([] without a store or checkpoint, or when the store cannot read it)."""
    runs = session.runs()
    if runs and runs[-1]["id"] == run_id:
        return session.history()
    store = session.options.session_store
    if store is None:
        return []
    try:
        checkpoint = store.load_checkpoint(session.session_id, check_id("run id", run_id))
    except SessionRuntimeError:
        return []
    return [] if checkpoint is None else list(checkpoint.messages)


def run_events(session: Session, run_id: str, after: int, limit: int) -> dict[str, Any] | None:
    """The ``GET /v1/runs/{runId}/events`` answer for ``run_id`` (:func:`answer` over the run's
    record, retained events and conversation), or None when the session retains no such run."""
    record = session.run_snapshot(run_id)
    if record is None:
        return None
    return answer(record, session.run_events(run_id), conversation(session, run_id), after, limit)


def answer(
    record: Mapping[str, Any],
    events: Sequence[Mapping[str, Any]],
    messages: Sequence[Mapping[str, Any]],
    after: int,
    limit: int,
) -> dict[str, Any]:
    """The answer for one run: its ``record`` (a run snapshot: ``id``, ``status``,
    ``event_count``), the tool calls of ``events`` that started after event ``after`` (at most
    ``limit``; ``next`` set when more follow) and the last ``limit`` of ``messages``, masked."""
    calls = [c for c in tool_calls(events, record["status"] == "running") if c.seq > after]
    page = calls[:limit]
    first = max(0, len(messages) - limit)
    view = RunEvents(
        run_id=str(record["id"]),
        status=str(record["status"]),
        event_count=int(record.get("event_count") or 0),
        events_retained=len(events),
        tool_calls=page,
        next=page[-1].seq if len(calls) > limit else None,
        messages_total=len(messages),
        messages_from=first,
        conversation=[message_view(first + i, m) for i, m in enumerate(messages[first:])],
    )
    return run_events_body(view)
