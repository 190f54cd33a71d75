"""``SessionCheckpointExportV1`` to and from Berth's session store.

:func:`export_session`: a passivated Berth session (its store state: the session record, the
loop checkpoint of one run) → the export a3s-code-core 9.x resumes (``save_snapshot`` +
``save_loop_checkpoint`` into its ``FileSessionStore``, ``resume_session``, ``resume_run``).
:func:`import_checkpoint`: a 9.x export → Berth's store (a session record and the run's loop
checkpoint), resumable with Berth's ``resume_run``. The descriptor, its digests and the payload
are built and checked by a3s-code-core itself (Berth's binding); the fields are mapped here.

What does not map is refused with :class:`~session_runtime.a3s_core.messages.Unmapped` naming
the field (docs/a3s-compatibility.md, "Checkpoint interchange"): on export, workflows, a tool
round begun but not committed, options with no 9.x form; on import, state Berth cannot hold
(artifacts, subagent tasks, task lists, review findings, memory and content bindings, fact
sources, a parent session, images). History that only records the past (trace events, run
records, cost records, verification reports, context usage) is left behind and listed in the
import's ``dropped``. A capability binding on the loop checkpoint is an authority ceiling Berth
does not enforce (its AgentSession decides the tools): it is refused unless the caller names it
in ``accept``.
"""

from __future__ import annotations

import tempfile
from dataclasses import dataclass, field
from typing import Any

from session_runtime.a3s_core import binding
from session_runtime.a3s_core.messages import Unmapped, to_berth, to_core
from session_runtime.agent.options import SessionOptions
from session_runtime.agent.runs import RunRecord
from session_runtime.store.base import LoopCheckpoint
from session_runtime.store.file import FileSessionStore

#: Berth session-record keys an export carries (``AgentSession.session_data``).
RECORD_KEYS = {
    "session_id",
    "workspace",
    "identity",
    "options",
    "messages",
    "runs",
    "usage",
    "tool_calls_count",
    "turn",
    "last_checkpoint",
    "saved_ms",
}
#: Berth options with a 9.x session form (the identity labels); the others, the model
#: included, are host settings whoever resumes sets anew (A3S resume rule: the resumer's
#: options win), listed in ``ExportResult.dropped``.
MAPPED_OPTIONS = {"tenant_id", "principal", "agent_template_id", "correlation_id"}
IDENTITY = ("tenant_id", "principal", "agent_template_id", "correlation_id")
#: 9.x snapshot state Berth cannot hold: refused when present.
REFUSED_SNAPSHOT = ("artifacts", "retained_artifact_uris", "subagent_tasks")
REFUSED_SESSION = (
    "tasks",
    "parent_id",
    "durable_source",
    "durable_memory_binding",
    "cognitive_package_binding",
    "immutable_content_adapter_binding",
)
REFUSED_CHECKPOINT = ("durable_source",)
#: An authority ceiling Berth does not enforce: refused unless the caller names it in ``accept``.
ACCEPTABLE_CHECKPOINT = ("capability_binding",)
#: Loop-checkpoint provenance a Berth run does not keep (listed in ``ImportResult.dropped``).
DROPPED_CHECKPOINT = ("standing_context_digest", "verification_reports", "convergence")
#: 9.x records of the past a Berth session does not keep (listed in ``ImportResult.dropped``).
DROPPED_SNAPSHOT = ("trace_events", "run_records", "verification_reports")
DROPPED_SESSION = (
    "cost_records",
    "context_usage",
    "total_cost",
    "tool_names",
    "model_name",
    "llm_config",
)


def _record_dropped(record: dict[str, Any]) -> list[str]:
    """Refuse a session-record field export does not know; list what it leaves behind."""
    extra = sorted(set(record) - RECORD_KEYS)
    if extra:
        raise Unmapped(f"session.{extra[0]}", "a session-record field with no 9.x form")
    defaults = SessionOptions().to_persisted()
    options = record.get("options") or {}
    dropped = [
        f"session.options.{key}"
        for key, value in sorted(options.items())
        if key not in MAPPED_OPTIONS and value != defaults.get(key)
    ]
    return dropped + (["session.runs"] if record.get("runs") else [])


@dataclass
class ExportResult:
    """An export (wire form ``{descriptor, contentBase64}``), the run it resumes (None: no
    loop checkpoint), and the Berth fields left behind (host options, run records)."""

    export: dict[str, Any]
    run_id: str | None
    dropped: list[str] = field(default_factory=list)


def template_snapshot(session_id: str) -> dict[str, Any]:
    """A ``SessionSnapshotV1`` exactly as a3s-code-core writes one for a fresh session (every
    field its version requires), to fill in. Made in a throw-away store and workspace."""
    with tempfile.TemporaryDirectory(prefix="berth-a3s-core-") as tmp:
        store = binding.CoreStore(f"{tmp}/store")
        agent = binding.CoreAgent(_OFFLINE_ACL)
        session = agent.session(f"{tmp}/ws", session_id=session_id, store=store)
        session.save()
        session.close()
        snap = store.load_snapshot(session_id)
    if snap is None:  # pragma: no cover - save() above wrote it
        raise RuntimeError("a3s-code-core saved no snapshot for the template session")
    return snap


_OFFLINE_ACL = (
    'default_model = "openai/gpt-4o-mini"\nproviders "openai" {\n  api_key = "unused"\n'
    '  base_url = "http://127.0.0.1:9/v1"\n  models "gpt-4o-mini" {\n  }\n}\n'
)


def _usage(u: dict[str, Any]) -> dict[str, Any]:
    return {
        "prompt_tokens": int(u.get("prompt_tokens", 0)),
        "completion_tokens": int(u.get("completion_tokens", 0)),
        "total_tokens": int(u.get("total_tokens", 0)),
        "cache_read_tokens": None,
        "cache_write_tokens": None,
    }


def _counts(u: dict[str, Any]) -> dict[str, int]:
    """Berth's usage (three token counts) of a 9.x ``TokenUsage``."""
    return {k: int(v) for k, v in _usage(u).items() if v is not None}


def _core_checkpoint(cp: LoopCheckpoint) -> dict[str, Any]:
    _system, messages = to_core(cp.messages, f"runs[{cp.run_id}].checkpoint.messages")
    return {
        "schema_version": 1,
        "run_id": cp.run_id,
        "session_id": cp.session_id,
        "turn": cp.turn,
        "messages": messages,
        "total_usage": _usage(cp.total_usage),
        "tool_calls_count": cp.tool_calls_count,
        "verification_reports": [],
        "checkpoint_ms": cp.checkpoint_ms,
    }


def _source_run(cp: LoopCheckpoint, record: dict[str, Any]) -> dict[str, Any]:
    """The 9.x ``RunRecord`` of the run a checkpoint resumes: an export must carry its source
    run, not terminal (a Berth run that was passivated or interrupted is ``executing`` to 9.x)."""
    prompt = next((str(m.get("content")) for m in cp.messages if m.get("role") == "user"), "")
    started = next(
        (int(r.get("started_ms", 0)) for r in record.get("runs") or [] if r.get("id") == cp.run_id),
        cp.checkpoint_ms,
    )
    snapshot = {
        "id": cp.run_id,
        "session_id": cp.session_id,
        "status": "executing",
        "prompt": prompt,
        "created_at_ms": started,
        "updated_at_ms": cp.checkpoint_ms,
        "event_count": 0,
    }
    return {"snapshot": snapshot, "events": []}


def export_session(
    store: FileSessionStore, session_id: str, run_id: str | None = None
) -> ExportResult:
    """The ``SessionCheckpointExportV1`` of Berth session ``session_id`` in its wire form, with
    the loop checkpoint of ``run_id`` (default: the newest run with one; none if it has none).
    Raises :class:`Unmapped` naming a field that does not map (or a missing session/run)."""
    loaded = store.read_state(session_id)
    record = None if loaded is None else loaded.state.session
    if loaded is None or record is None:
        raise Unmapped("session", f"Berth's store holds no session '{session_id}'")
    state = loaded.state
    if state.workflows:
        raise Unmapped(f"workflows.{sorted(state.workflows)[0]}", "9.x exports no workflows")
    for rid in state.run_ids():
        if state.pending_round(rid) is not None:
            raise Unmapped(f"runs[{rid}].pending", "a tool round begun but never committed")
    dropped = _record_dropped(record)
    runs = [r for r in state.run_ids() if state.checkpoint(r) is not None]
    chosen = run_id or (runs[-1] if runs else None)
    cp = None if chosen is None else state.checkpoint(chosen)
    if chosen is not None and cp is None:
        raise Unmapped(f"runs[{chosen}]", "no loop checkpoint for that run")
    system, messages = to_core(record.get("messages") or [], "session.messages")
    snap = template_snapshot(session_id)
    s = snap["session"]
    s["config"]["workspace"] = str(record.get("workspace", s["config"]["workspace"]))
    s["config"]["system_prompt"] = system
    s["messages"] = messages
    s["total_usage"] = _usage(record.get("usage") or {})
    saved_s = int(record.get("saved_ms", 0)) // 1000 or s["updated_at"]
    s["updated_at"] = saved_s
    for label in IDENTITY:
        value = (record.get("identity") or {}).get(label)
        s.pop(label, None) if value is None else s.__setitem__(label, value)
    if cp is not None:
        snap["run_records"] = [_source_run(cp, record)]
    export = binding.checkpoint_export(snap, None if cp is None else _core_checkpoint(cp))
    return ExportResult(export, chosen, dropped)


@dataclass
class ImportResult:
    """What :func:`import_checkpoint` wrote: the session, the run to ``resume_run`` (None if
    the export had no loop checkpoint), and the 9.x fields left behind as history."""

    session_id: str
    run_id: str | None
    dropped: list[str] = field(default_factory=list)


def _check_refused(snap: dict[str, Any], cp: dict[str, Any] | None, accept: set[str]) -> None:
    """Raise :class:`Unmapped` for the first 9.x field Berth cannot hold (nothing written)."""
    s = snap["session"]
    refused = [n for n in REFUSED_SNAPSHOT if snap.get(n)]
    refused += [f"session.{n}" for n in REFUSED_SESSION if s.get(n)]
    if (snap.get("session_review") or {}).get("findings"):
        refused.append("session_review.findings")
    if s.get("thinking_enabled"):
        refused.append("session.thinking_enabled")
    if cp is not None:
        refused += [f"logical_resume.{n}" for n in REFUSED_CHECKPOINT if cp.get(n)]
    if refused:
        raise Unmapped(refused[0], "state a Berth session cannot hold")
    for name in ACCEPTABLE_CHECKPOINT:
        if cp is not None and cp.get(name) and f"logical_resume.{name}" not in accept:
            raise Unmapped(
                f"logical_resume.{name}",
                "Berth does not enforce it (its AgentSession decides the tools); "
                f"name 'logical_resume.{name}' in accept to drop it",
            )


def _dropped(snap: dict[str, Any], cp: dict[str, Any] | None) -> list[str]:
    out = [n for n in DROPPED_SNAPSHOT if snap.get(n)]
    out += [f"session.{n}" for n in DROPPED_SESSION if snap["session"].get(n)]
    if cp is not None:
        kept = (*ACCEPTABLE_CHECKPOINT, *DROPPED_CHECKPOINT)
        out += [f"logical_resume.{n}" for n in kept if cp.get(n)]
    return out


def _imported_run(cp: dict[str, Any], snap: dict[str, Any], messages: list[Any]) -> dict[str, Any]:
    """Berth's run record of the run a 9.x loop checkpoint resumes: ``interrupted`` (it stopped
    between tool rounds), so a session pod's start plan resumes it instead of starting anew."""
    run_id = str(cp["run_id"])
    source = next(
        (
            r.get("snapshot") or {}
            for r in snap.get("run_records") or []
            if (r.get("snapshot") or {}).get("id") == run_id
        ),
        {},
    )
    prompt = source.get("prompt") or next(
        (str(m.get("content")) for m in messages if m.get("role") == "user"), ""
    )
    record = RunRecord(
        id=run_id,
        prompt=str(prompt),
        started_ms=int(source.get("created_at_ms") or cp["checkpoint_ms"]),
        status="interrupted",
        usage=_counts(cp["total_usage"]),
        tool_calls_count=int(cp["tool_calls_count"]),
        turn=int(cp["turn"]),
    )
    return record.snapshot()


def import_checkpoint(
    export: dict[str, Any],
    store: FileSessionStore,
    *,
    accept: frozenset[str] = frozenset(),
    session_id: str | None = None,
) -> ImportResult:
    """Write a wire-form 9.x export into Berth's ``store`` (session record, then the run's
    loop checkpoint, so ``resume_run(run_id)`` continues it after the last completed tool
    round). ``session_id`` names the Berth session (default: the 9.x session's id; a session
    pod's store holds its AgentSession's name). The run is recorded ``interrupted``, so a
    session pod started on the store resumes it (``session_runtime.pod.start``). Raises
    ``CheckpointError`` for a descriptor that does not match its content and :class:`Unmapped`
    naming the first field that does not map (nothing is written then)."""
    payload = binding.checkpoint_open(export)
    snap, cp = payload["snapshot"], payload.get("logical_resume")
    _check_refused(snap, cp, set(accept))
    s = snap["session"]
    sid = session_id or str(s["id"])
    system = s["config"].get("system_prompt")
    messages = to_berth(s.get("messages") or [], "session.messages", system)
    checkpoint = None
    if cp is not None:
        where = "logical_resume.messages"
        cp_messages = to_berth(cp["messages"], where, system)
        checkpoint = LoopCheckpoint(
            run_id=str(cp["run_id"]),
            session_id=sid,
            turn=int(cp["turn"]),
            messages=cp_messages,
            total_usage=_counts(cp["total_usage"]),
            tool_calls_count=int(cp["tool_calls_count"]),
            checkpoint_ms=int(cp["checkpoint_ms"]),
        )
    usage = _counts(s.get("total_usage") or {})
    record = {
        "session_id": sid,
        "workspace": s["config"].get("workspace"),
        "identity": {label: s.get(label) for label in IDENTITY},
        "options": {},
        "messages": messages,
        "runs": [] if cp is None else [_imported_run(cp, snap, messages)],
        "usage": usage,
        "tool_calls_count": 0 if cp is None else int(cp["tool_calls_count"]),
        "turn": 0 if cp is None else int(cp["turn"]),
        "last_checkpoint": None
        if cp is None
        else {
            "run_id": str(cp["run_id"]),
            "turn": int(cp["turn"]),
            "tool_calls_count": int(cp["tool_calls_count"]),
            "at_ms": int(cp["checkpoint_ms"]),
        },
        "saved_ms": int(s.get("updated_at", 0)) * 1000,
    }
    store.save_session(sid, record)
    if checkpoint is not None:
        store.commit_round(checkpoint)
    run = None if cp is None else str(cp["run_id"])
    return ImportResult(sid, run, _dropped(snap, cp))


def load_into_core(export: dict[str, Any], store: binding.CoreStore) -> ImportResult:
    """Put a wire-form export into an a3s-code-core ``FileSessionStore`` the way a 9.x host
    resumes it (``save_snapshot``, ``save_loop_checkpoint``); then ``resume_session`` and
    ``resume_run(run_id)`` continue it. The store's writer lease fences the snapshot commit."""
    payload = binding.checkpoint_open(export)
    snap, cp = payload["snapshot"], payload.get("logical_resume")
    store.save_snapshot(snap)
    if cp is not None:
        store.save_loop_checkpoint(cp)
    return ImportResult(str(snap["session"]["id"]), None if cp is None else str(cp["run_id"]))
