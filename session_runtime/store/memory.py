"""``MemorySessionStore``: the in-memory session store for tests and store-less embedding.

Owned by ``session_runtime.store``; used wherever a ``SessionStore`` is needed without a disk.
It runs the same reducer as the file store (:mod:`.state`) on the same records, and every record
goes through the canonical JSON encoder and back, so a value the file store would refuse (not
JSON) is refused here too and callers never share mutable state with the store. No epochs and no
fencing: one process owns the object.
"""

from __future__ import annotations

import threading
from typing import Any

from session_runtime.store import shapes
from session_runtime.store.base import LoopCheckpoint, PendingRound, WorkflowCheckpoint
from session_runtime.store.ids import check_id
from session_runtime.store.redact import redact_messages, redact_tool_result, strip_secrets
from session_runtime.store.state import (
    SessionState,
    begin_record,
    checkpoint_delete_record,
    commit_record,
    copy_json,
    result_record,
    session_record,
    workflow_delete_record,
    workflow_record,
)


class MemorySessionStore:
    """A ``SessionStore`` that keeps each session's state in a dict (A3S in-memory store).

    Thread-safe. Raises ``InvalidIdError`` for unsafe ids, ``StoreError`` for values that are not
    plain JSON and ``CheckpointError`` when a stored checkpoint cannot be loaded (newer schema,
    other session), exactly like ``FileSessionStore``.
    """

    def __init__(self) -> None:
        self._sessions: dict[str, SessionState] = {}
        self._lock = threading.Lock()

    def _state(self, session_id: str) -> SessionState:
        check_id("session id", session_id)
        state = self._sessions.get(session_id)
        if state is None:
            state = self._sessions[session_id] = SessionState(session_id=session_id)
        return state

    def _apply(self, session_id: str, rec: dict[str, Any]) -> None:
        decoded = shapes.decode(shapes.encode(rec))
        with self._lock:
            self._state(session_id).apply(decoded)

    # -- SessionStore ------------------------------------------------------------------------

    def save_session(self, session_id: str, data: dict[str, Any]) -> None:
        """Store ``data`` (credentials stripped, see :mod:`.redact`) as the session record."""
        self._apply(session_id, session_record(strip_secrets(data)))

    def load_session(self, session_id: str) -> dict[str, Any] | None:
        """A copy of the last ``save_session`` data, or None."""
        with self._lock:
            data = self._state(session_id).session
            return None if data is None else dict(copy_json(data))

    def begin_round(
        self, session_id: str, run_id: str, turn: int, assistant_message: dict[str, Any]
    ) -> None:
        """Record the intent of round ``turn`` of ``run_id``."""
        check_id("run id", run_id)
        self._apply(session_id, begin_record(run_id, turn, assistant_message))

    def record_tool_result(
        self, session_id: str, run_id: str, turn: int, tool_call_id: str, result: dict[str, Any]
    ) -> None:
        """Record one result of the pending round; ``CheckpointError`` if it was never begun."""
        check_id("run id", run_id)
        rec = result_record(run_id, turn, tool_call_id, redact_tool_result(result))
        self._apply(session_id, rec)

    def commit_round(self, checkpoint: LoopCheckpoint) -> None:
        """Store ``checkpoint`` as the run's last checkpoint (drops its pending round); tool
        output credentials masked. Same delta records as ``FileSessionStore`` (O(new messages)
        when ``checkpoint.known_prefix`` vouches for the prefix). ``CheckpointError`` for a
        schema version this build cannot load."""
        check_id("run id", checkpoint.run_id)
        checkpoint.ensure_loadable()
        sid = checkpoint.session_id
        with self._lock:
            keep, base = self._state(sid).delta(checkpoint)
            append = redact_messages(checkpoint.messages[keep:])
            rec = shapes.decode(shapes.encode(commit_record(checkpoint, keep, base, append)))
            self._state(sid).apply(rec)

    def load_checkpoint(self, session_id: str, run_id: str) -> LoopCheckpoint | None:
        """The run's last checkpoint, or None. ``CheckpointError`` if it cannot be used."""
        check_id("run id", run_id)
        with self._lock:
            return self._state(session_id).checkpoint(run_id)

    def load_pending_round(self, session_id: str, run_id: str) -> PendingRound | None:
        """The run's uncommitted round, or None."""
        check_id("run id", run_id)
        with self._lock:
            return self._state(session_id).pending_round(run_id)

    def save_workflow_checkpoint(self, session_id: str, checkpoint: WorkflowCheckpoint) -> None:
        """Store ``checkpoint`` under its ``workflow_id``."""
        check_id("workflow id", checkpoint.workflow_id)
        self._apply(session_id, workflow_record(checkpoint))

    def load_workflow_checkpoint(
        self, session_id: str, workflow_id: str
    ) -> WorkflowCheckpoint | None:
        """The workflow's checkpoint (``ensure_loadable`` applied), or None."""
        check_id("workflow id", workflow_id)
        with self._lock:
            return self._state(session_id).workflow(workflow_id)

    def delete_workflow_checkpoint(self, session_id: str, workflow_id: str) -> None:
        """Forget the workflow's checkpoint."""
        check_id("workflow id", workflow_id)
        self._apply(session_id, workflow_delete_record(workflow_id))

    # -- extras (A3S store surface) ------------------------------------------------------------

    def delete_loop_checkpoint(self, session_id: str, run_id: str) -> None:
        """Forget the run's checkpoint and pending round (A3S ``delete_loop_checkpoint``)."""
        check_id("run id", run_id)
        self._apply(session_id, checkpoint_delete_record(run_id))

    def run_ids(self, session_id: str) -> list[str]:
        """Runs with a checkpoint or a pending round, oldest first."""
        with self._lock:
            return self._state(session_id).run_ids()

    def list_sessions(self) -> list[str]:
        """Ids of the sessions that have anything stored, sorted."""
        with self._lock:
            return sorted(
                sid for sid, st in self._sessions.items() if st.session is not None or st.runs
            )
