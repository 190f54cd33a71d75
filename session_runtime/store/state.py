"""The state of one session as the store knows it, and the reducer that journal records drive.

Owned by ``session_runtime.store``; shared by ``FileSessionStore`` (which rebuilds it from a
snapshot plus the journal) and ``MemorySessionStore`` (which keeps it in memory). Records are plain
JSON dicts (shapes in :mod:`.shapes`); this module also builds them, so writers and the reducer
cannot disagree on a field name.

Per run the state keeps the last committed checkpoint (A3S ``LoopCheckpoint`` dict) and at most one
pending round (intent journaled, not committed): the pending round is dropped once a checkpoint
with ``turn >= pending.turn`` is committed.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from pydantic import ValidationError

from session_runtime.errors import CheckpointError, StoreError
from session_runtime.store import shapes
from session_runtime.store.base import (
    LOOP_CHECKPOINT_SCHEMA_VERSION,
    LoopCheckpoint,
    PendingRound,
    WorkflowCheckpoint,
)
from session_runtime.store.redact import redact_messages


def copy_json(value: Any) -> Any:
    """A deep copy of a JSON value (through ``json``; faster than ``copy.deepcopy``)."""
    return json.loads(json.dumps(value))


# ---- record builders (what writers journal) -------------------------------------------------


def session_record(data: dict[str, Any]) -> dict[str, Any]:
    """The ``session`` record of ``save_session``: ``data`` is the session record (the stores
    strip its secrets first)."""
    return {"t": "session", "data": data}


def begin_record(run: str, turn: int, message: dict[str, Any]) -> dict[str, Any]:
    """The ``begin`` record of ``begin_round``: the intent of round ``turn`` of ``run``, whose
    assistant ``message`` asks for the tool calls."""
    return {"t": "begin", "run": run, "turn": turn, "message": message}


def result_record(run: str, turn: int, call: str, result: dict[str, Any]) -> dict[str, Any]:
    """The ``result`` record of ``record_tool_result``: the ``result`` of tool call id ``call``
    in pending round ``turn`` of ``run`` (the stores redact it first)."""
    return {"t": "result", "run": run, "turn": turn, "call": call, "result": result}


def commit_record(
    cp: LoopCheckpoint,
    keep: int,
    base: str | None = None,
    append: list[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    """The delta record of ``cp``: its messages are the first ``keep`` messages of the run's
    previous checkpoint (or, with ``base``, of run ``base``'s checkpoint: the first checkpoint of
    a resumed run) followed by ``append`` (default ``cp.messages[keep:]``; writers pass that
    slice with credentials masked)."""
    rec: dict[str, Any] = {
        "t": "commit",
        "run": cp.run_id,
        "session": cp.session_id,
        "turn": cp.turn,
        "v": cp.schema_version,
        "keep": keep,
        "append": cp.messages[keep:] if append is None else append,
        "usage": cp.total_usage,
        "tool_calls": cp.tool_calls_count,
        "ms": cp.checkpoint_ms,
    }
    if base is not None:
        rec["base"] = base
    return rec


def checkpoint_delete_record(run: str) -> dict[str, Any]:
    """The ``checkpoint_delete`` record of ``delete_loop_checkpoint``: forget ``run``'s
    checkpoint and pending round."""
    return {"t": "checkpoint_delete", "run": run}


def workflow_record(cp: WorkflowCheckpoint) -> dict[str, Any]:
    """The ``workflow`` record of ``save_workflow_checkpoint``: ``cp`` in its A3S JSON shape."""
    return {"t": "workflow", "checkpoint": cp.to_dict()}


def workflow_delete_record(workflow_id: str) -> dict[str, Any]:
    """The ``workflow_delete`` record of ``delete_workflow_checkpoint``: forget ``workflow_id``."""
    return {"t": "workflow_delete", "workflow": workflow_id}


# ---- state --------------------------------------------------------------------------------


@dataclass(slots=True)
class Pending:
    """The intent of an uncommitted round and the results recorded for it so far."""

    turn: int
    message: dict[str, Any]
    results: dict[str, dict[str, Any]] = field(default_factory=dict)


@dataclass(slots=True)
class RunState:
    """What the store keeps per run id."""

    checkpoint: dict[str, Any] | None = None
    pending: Pending | None = None
    #: ``(run, k)``: the first ``k`` messages of this run's checkpoint equal run ``run``'s first
    #: ``k`` (a resumed run); snapshots then store only the rest (see ``to_json``).
    base: tuple[str, int] | None = None


@dataclass(slots=True)
class SessionState:
    """Everything stored for one session: session record, runs (in first-seen order), workflows."""

    session_id: str
    session: dict[str, Any] | None = None
    runs: dict[str, RunState] = field(default_factory=dict)
    workflows: dict[str, dict[str, Any]] = field(default_factory=dict)

    # -- reducer -------------------------------------------------------------------------------

    def precheck(self, rec: dict[str, Any]) -> None:
        """Raise ``CheckpointError`` if ``rec`` cannot follow the current state, *before* a
        writer makes it durable (so a bad call never leaves an unloadable journal)."""
        if rec["t"] == "result":
            run = self.runs.get(rec["run"])
            if run is None or run.pending is None or run.pending.turn != rec["turn"]:
                raise CheckpointError(
                    f"tool result {rec['call']} for round {rec['turn']} of run {rec['run']} in "
                    f"session '{self.session_id}': that round was never begun"
                )

    def completes_round(self, rec: dict[str, Any]) -> bool:
        """True if result record ``rec`` is the last missing result of its pending round (every
        other call of the round's assistant message has a result), so the round's commit is
        the next write the agent loop makes."""
        run = self.runs.get(rec["run"])
        pending = None if run is None else run.pending
        if pending is None or pending.turn != rec["turn"]:
            return False
        calls = pending.message.get("tool_calls")
        if not isinstance(calls, list) or not calls:
            return False
        ids = {c.get("id") for c in calls if isinstance(c, dict)}
        return rec["call"] in ids and ids <= pending.results.keys() | {rec["call"]}

    def apply(self, rec: dict[str, Any]) -> None:
        """Apply one journal record (already shape-checked). Raises ``CheckpointError`` when
        the record cannot follow the current state (a delta with no base to apply to)."""
        t = rec["t"]
        if t == "session":
            self.session = rec["data"]
        elif t == "begin":
            run = self.runs.setdefault(rec["run"], RunState())
            run.pending = Pending(turn=rec["turn"], message=rec["message"])
        elif t == "result":
            self.precheck(rec)
            pending = self.runs[rec["run"]].pending
            if pending is not None:
                pending.results[rec["call"]] = rec["result"]
        elif t == "commit":
            self._apply_commit(rec)
        elif t == "checkpoint_delete":
            self.runs.pop(rec["run"], None)
        elif t == "workflow":
            self.workflows[str(rec["checkpoint"].get("workflow_id"))] = rec["checkpoint"]
        elif t == "workflow_delete":
            self.workflows.pop(rec["workflow"], None)
        else:  # pragma: no cover - shapes.RECORD admits no other kind
            raise CheckpointError(f"unknown journal record kind {t!r}")

    def _apply_commit(self, rec: dict[str, Any]) -> None:
        run = self.runs.setdefault(rec["run"], RunState())
        if rec["v"] != LOOP_CHECKPOINT_SCHEMA_VERSION:
            # Written by another build: keep only what ensure_loadable needs to refuse it.
            run.checkpoint = {"schema_version": rec["v"], "run_id": rec["run"]}
            run.pending, run.base = None, None
            return
        keep, base_id = rec["keep"], rec.get("base")
        src = run if base_id is None else self.runs.get(base_id)
        prev = None if src is None or src.checkpoint is None else src.checkpoint.get("messages")
        if keep and not isinstance(prev, list):
            raise CheckpointError(
                f"journal of session '{self.session_id}' has a checkpoint delta for run "
                f"{rec['run']} without the checkpoint it extends"
            )
        if base_id is None and isinstance(prev, list) and keep == len(prev):
            # The usual case: extend the run's list in place, O(new messages). The list is the
            # state's own (views hand out copies), so no reader sees it change.
            messages = prev
            messages.extend(rec["append"])
        else:
            head = prev[:keep] if isinstance(prev, list) else []
            if len(head) != keep:
                raise CheckpointError(
                    f"journal of session '{self.session_id}' keeps {keep} messages of run "
                    f"{base_id or rec['run']} but only {len(head)} exist"
                )
            messages = head + list(rec["append"])
            if base_id is not None:
                run.base = (base_id, keep) if keep else None
            elif run.base is not None:
                run.base = (run.base[0], min(run.base[1], keep)) if keep else None
        run.checkpoint = {
            "schema_version": rec["v"],
            "run_id": rec["run"],
            "session_id": rec["session"],
            "turn": rec["turn"],
            "messages": messages,
            "total_usage": rec["usage"],
            "tool_calls_count": rec["tool_calls"],
            "checkpoint_ms": rec["ms"],
        }
        if run.pending is not None and run.pending.turn <= rec["turn"]:
            run.pending = None

    def delta(self, cp: LoopCheckpoint) -> tuple[int, str | None]:
        """``(keep, base)`` for the commit record of ``cp`` (see :func:`commit_record`).

        Same run: ``keep`` from :meth:`keep_count`. First checkpoint of a run: if the newest
        other runs' messages (up to 3 are tried) are a prefix of ``cp.messages`` (a resumed run
        starts from its origin's history), that run is the ``base`` and only the new messages are
        journaled; this compares the whole history, once per run.
        """
        run = self.runs.get(cp.run_id)
        if run is not None and run.checkpoint is not None:
            return self.keep_count(cp), None
        tried = 0
        for other_id in reversed(self.runs):
            other = self.runs[other_id]
            if other_id == cp.run_id or other.checkpoint is None:
                continue
            msgs = other.checkpoint.get("messages")
            if isinstance(msgs, list) and msgs and _is_prefix(msgs, cp.messages):
                return len(msgs), other_id
            tried += 1
            if tried == 3:
                break
        return 0, None

    def keep_count(self, cp: LoopCheckpoint) -> int:
        """How many leading messages of ``cp`` are the run's previous checkpoint's messages.

        Returns the previous length when ``cp.messages`` extends it (the usual append-only case),
        else 0 (the history was rewritten, e.g. by auto-compaction: the record carries every
        message).

        Cost: O(1) in the history's length when the caller vouches for the prefix
        (``cp.known_prefix`` equals the previous length; the agent loop does, see
        ``AgentLoop.commit``): only the last message of that prefix is compared, as a guard
        against a caller that got its count wrong. Otherwise every message of the previous
        checkpoint is compared (O(history)). Stored messages have credentials masked
        (:mod:`.redact`), so the live message is masked before it is compared; a run whose
        history had one masked therefore still pays only its new messages when the caller
        vouches, and a full record per round when it does not.
        """
        run = self.runs.get(cp.run_id)
        prev = None if run is None or run.checkpoint is None else run.checkpoint.get("messages")
        if not isinstance(prev, list):
            return 0
        k = cp.known_prefix
        if 0 < k == len(prev) <= len(cp.messages):
            mine, stored = cp.messages[k - 1], prev[k - 1]
            if mine == stored or redact_messages([mine])[0] == stored:
                return k
        return len(prev) if _is_prefix(prev, cp.messages) else 0

    # -- views -----------------------------------------------------------------------------------

    def checkpoint(self, run_id: str) -> LoopCheckpoint | None:
        """The run's last checkpoint as a fresh ``LoopCheckpoint`` (``ensure_loadable`` and the
        session check applied; raises ``CheckpointError``), or None."""
        run = self.runs.get(run_id)
        if run is None or run.checkpoint is None:
            return None
        cp = LoopCheckpoint.from_dict(copy_json(run.checkpoint))
        cp.ensure_session(self.session_id)
        return cp

    def pending_round(self, run_id: str) -> PendingRound | None:
        """The run's uncommitted round (copies), or None."""
        run = self.runs.get(run_id)
        if run is None or run.pending is None:
            return None
        p = run.pending
        return PendingRound(
            run_id=run_id,
            turn=p.turn,
            assistant_message=copy_json(p.message),
            results=copy_json(p.results),
        )

    def workflow(self, workflow_id: str) -> WorkflowCheckpoint | None:
        """The workflow's checkpoint as a fresh ``WorkflowCheckpoint`` (``ensure_loadable``
        applied; raises ``CheckpointError``), or None."""
        raw = self.workflows.get(workflow_id)
        return None if raw is None else WorkflowCheckpoint.from_dict(copy_json(raw))

    # -- snapshots -------------------------------------------------------------------------------

    def to_json(self) -> dict[str, Any]:
        """The ``state`` of a snapshot record (:class:`shapes.StateModel`).

        A run whose first ``k`` messages equal an earlier run's (``RunState.base``, checked
        again here) is written as ``base``/``keep`` plus only its other messages, so a session
        resumed many times does not store its history once per run.
        """
        runs: list[dict[str, Any]] = []
        written: set[str] = set()
        for run_id, run in self.runs.items():
            entry: dict[str, Any] = {"run": run_id, "checkpoint": run.checkpoint}
            cp, base = run.checkpoint, run.base
            if cp is not None and base is not None and base[0] in written:
                base_cp = self.runs[base[0]].checkpoint
                k = base[1]
                head = None if base_cp is None else base_cp.get("messages")
                mine = cp.get("messages")
                if (
                    isinstance(head, list)
                    and isinstance(mine, list)
                    and len(head) >= k
                    and len(mine) >= k
                    and mine[:k] == head[:k]
                ):
                    entry["checkpoint"] = {**cp, "messages": mine[k:]}
                    entry["base"], entry["keep"] = base[0], k
            entry["pending"] = (
                None
                if run.pending is None
                else {
                    "turn": run.pending.turn,
                    "message": run.pending.message,
                    "results": run.pending.results,
                }
            )
            runs.append(entry)
            written.add(run_id)
        return {"session": self.session, "runs": runs, "workflows": self.workflows}

    @classmethod
    def from_json(cls, session_id: str, data: Any) -> SessionState:
        """Rebuild from a snapshot's ``state``; a bad shape raises ``CheckpointError``."""
        try:
            shapes.StateModel.model_validate(data)
        except ValidationError as exc:
            raise CheckpointError(
                f"snapshot of session '{session_id}' is unreadable: {shapes.describe(exc)}"
            ) from exc
        state = cls(session_id=session_id, session=data["session"], workflows=data["workflows"])
        for r in data["runs"]:
            p = r["pending"]
            cp, base = r["checkpoint"], None
            if r.get("base") is not None and cp is not None:
                origin = state.runs.get(r["base"])
                head = (
                    None
                    if origin is None or origin.checkpoint is None
                    else (origin.checkpoint.get("messages"))
                )
                k = r.get("keep", 0)
                if not isinstance(head, list) or len(head) < k:
                    raise CheckpointError(
                        f"snapshot of session '{session_id}' builds run {r['run']} on "
                        f"{k} messages of run {r['base']}, which it does not hold"
                    )
                cp = {**cp, "messages": head[:k] + list(cp.get("messages") or [])}
                base = (r["base"], k)
            state.runs[r["run"]] = RunState(
                checkpoint=cp,
                pending=None if p is None else Pending(p["turn"], p["message"], p["results"]),
                base=base,
            )
        return state

    def run_ids(self) -> list[str]:
        """Run ids with a checkpoint or a pending round, in the order they first appeared."""
        return list(self.runs)


def _is_prefix(head: list[dict[str, Any]], messages: list[dict[str, Any]]) -> bool:
    """True if ``messages`` starts with ``head`` (one C-level list comparison)."""
    return len(head) <= len(messages) and messages[: len(head)] == head


def check_record(session_id: str, rec: Any) -> dict[str, Any]:
    """Shape-check a decoded journal record; raises ``CheckpointError`` naming the problem."""
    try:
        shapes.RECORD.validate_python(rec)
    except ValidationError as exc:
        raise CheckpointError(
            f"journal of session '{session_id}' has an unreadable record: {shapes.describe(exc)}"
        ) from exc
    if not isinstance(rec, dict):  # pragma: no cover - validated above
        raise StoreError("journal record is not an object")
    return rec
