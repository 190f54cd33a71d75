"""The campaign's invariants: what must hold after every attempt and at the end of every session.

Owned by the chaos harness; :mod:`tests.chaos.runner` calls :func:`after_attempt` after each
session process ends and :func:`after_session` once the session is over. Each returns the
violations found (an empty list when the promise held). The promise (docs/architecture.md §6, §7): a
side-effecting tool never runs twice and no tool result is lost.

After every attempt:
- ``twice``: no tool call id has two ``S`` lines in the ledger (nothing ran twice);
- ``store_unloadable``: the store loads (``FileSessionStore.read_state``) and every snapshot is
  whole, every journal parses (a torn tail is allowed).

At the end of a session (its final history = the checkpoint of its completed run):
- ``not_terminal``: the newest run completed with the model's final answer, or the store still
  holds a run to resume (reported with what it holds);
- ``lost``: every call in the ledger is in the final history with a tool message (a tool that ran
  is never unknown to the model);
- ``unanswered``: every call of an assistant message in the final history has a tool message;
- ``phantom``: a result carrying the tool's own output (``done:<id>``) belongs to a call that ran;
- ``claimed_not_run``: a result saying the tool was not run belongs to a call with no ledger line;
- ``misreported``: a call that ran, whose result is not its own output, tells the model that its
  side effects are unknown (never only "failed"/"timed out", which reads as "did not happen");
- ``epoch_overlap``: no process started a tool after a later process of the session had
  started one, unless that call was already journaled (its intent is in the final history, so
  the later process knew of it: a call in flight when the placement changed).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from session_runtime.store import FileSessionStore, journal, layout
from tests.chaos.ledger import Entry

#: Phrases by which a result says its tool did not run.
NOT_RUN = ("it was not run", "was never run", "not executed")
#: Phrases by which a result tells the model a tool may have run with unknown effects.
UNKNOWN = ("side effects are unknown", "side effects unknown", "the tool was stopped")


@dataclass(frozen=True, slots=True)
class Violation:
    """A broken invariant: ``kind`` (module docstring), the session, and what was seen."""

    kind: str
    session: str
    detail: str

    def as_dict(self) -> dict[str, str]:
        """JSON-able form."""
        return {"kind": self.kind, "session": self.session, "detail": self.detail}


def reader(store_dir: Path) -> FileSessionStore:
    """A store that reads the newest state of every epoch and never claims a lease."""
    return FileSessionStore(store_dir, epoch=layout.MAX_NUMBER)


def _store_files(session_dir: Path) -> str | None:
    """Why the session's files are not whole, or None (snapshots whole, journals parse)."""
    listing = layout.scan(session_dir)
    for e, s in listing.snapshots:
        res = journal.read_file(session_dir / layout.snapshot_name(e, s))
        if len(res.payloads) != 1 or res.torn_bytes:
            return f"snapshot {e}-{s} is torn"
    for e, s in listing.journals:
        journal.read_file(session_dir / layout.journal_name(e, s))
    return None


def after_attempt(store_dir: Path, session: str, ledger: list[Entry]) -> list[Violation]:
    """The checks after every attempt (module docstring)."""
    out: list[Violation] = []
    starts = Counter(e.call for e in ledger if e.kind == "S")
    twice = {c: n for c, n in starts.items() if n > 1}
    if twice:
        runs = {
            c: [(e.epoch, e.attempt) for e in ledger if e.call == c and e.kind == "S"]
            for c in twice
        }
        out.append(Violation("twice", session, f"ran more than once (epoch, attempt): {runs}"))
    try:
        if (store_dir / session).exists():
            torn = _store_files(store_dir / session)
            if torn:
                out.append(Violation("store_unloadable", session, torn))
        reader(store_dir).read_state(session)
    except Exception as exc:
        out.append(Violation("store_unloadable", session, f"{type(exc).__name__}: {exc}"))
    return out


def final_history(store_dir: Path, session: str) -> tuple[str, list[dict[str, Any]], str]:
    """(status of the newest run, messages of its checkpoint, its final text or '')."""
    store = reader(store_dir)
    data = store.load_session(session) or {}
    runs = data.get("runs") or []
    if not runs:
        return "none", [], ""
    newest = runs[-1]
    cp = store.load_checkpoint(session, str(newest["id"]))
    messages = [] if cp is None else list(cp.messages)
    return str(newest.get("status")), messages, str(newest.get("result_text") or "")


def after_session(
    store_dir: Path, session: str, ledger: list[Entry], final_text: str
) -> tuple[list[Violation], Counter[str]]:
    """The end-of-session checks (module docstring); also returns counts of how results were
    settled (``ran``, ``unknown``, ``not_run``, ``overlap_in_flight``) for the report."""
    out: list[Violation] = []
    stats: Counter[str] = Counter()
    try:
        status, messages, text = final_history(store_dir, session)
    except Exception as exc:
        return [Violation("store_unloadable", session, f"{type(exc).__name__}: {exc}")], stats
    if status != "completed" or text != final_text:
        out.append(
            Violation("not_terminal", session, f"newest run is {status!r} with text {text!r}")
        )
    calls: dict[str, str] = {}
    results: dict[str, str] = {}
    for m in messages:
        if m.get("role") == "assistant":
            for c in m.get("tool_calls") or []:
                calls[str(c.get("id"))] = str(c.get("function", {}).get("name"))
        elif m.get("role") == "tool":
            results[str(m.get("tool_call_id"))] = str(m.get("content") or "")
    starts = Counter(e.call for e in ledger if e.kind == "S")
    for cid in sorted(set(calls) - set(results)):
        out.append(Violation("unanswered", session, f"call {cid} has no result in the history"))
    if status == "completed":
        for cid in sorted(set(starts) - set(results)):
            out.append(Violation("lost", session, f"call {cid} ran but is not in the history"))
    for cid, output in results.items():
        if calls.get(cid) != "bash":
            continue
        ran = starts[cid] > 0
        own = f"done:{cid}" in output
        if own and not ran:
            out.append(Violation("phantom", session, f"{cid}: its output but no ledger line"))
        elif own:
            stats["ran"] += 1
        elif any(p in output for p in NOT_RUN):
            stats["not_run"] += 1
            if ran:
                out.append(Violation("claimed_not_run", session, f"{cid} ran; told: {output!r}"))
        elif ran and not any(p in output for p in UNKNOWN):
            out.append(Violation("misreported", session, f"{cid} ran; told: {output[:300]!r}"))
        else:
            stats["unknown"] += 1
    newest = 0
    for e in ledger:
        if e.kind != "S":
            continue
        if e.attempt < newest:
            if e.call in calls:
                stats["overlap_in_flight"] += 1
            else:
                out.append(
                    Violation(
                        "epoch_overlap",
                        session,
                        f"{e.call} started by attempt {e.attempt} (epoch {e.epoch}) after "
                        f"attempt {newest} had started tools, and no later process knew of it",
                    )
                )
        newest = max(newest, e.attempt)
    return out, stats
