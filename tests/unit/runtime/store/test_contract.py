"""SessionStore contract, run against MemorySessionStore and FileSessionStore alike.

Behaviour under test comes from docs/architecture.md §10 ("Persistence") and docs/architecture.md
§6: intent before action, results as they arrive, commit drops the pending round, the contract's
refusal messages, safe ids and no secrets in saved data.
"""

from __future__ import annotations

from typing import Any

import pytest

from session_runtime.errors import CheckpointError, StoreError
from session_runtime.store import InvalidIdError, WorkflowCheckpoint

from .conftest import assistant, checkpoint, tool_msg

SID = "sess-1"
RUN = "run-a"


def _round(store: Any, msgs: list[dict[str, Any]], turn: int, run: str = RUN) -> None:
    a = assistant(turn, (f"c{turn}", "bash", '{"command": "true"}'))
    store.begin_round(SID, run, turn, a)
    store.record_tool_result(SID, run, turn, f"c{turn}", {"output": f"o{turn}", "exit_code": 0})
    msgs += [a, tool_msg(f"c{turn}", f"o{turn}")]
    store.commit_round(checkpoint(SID, run, turn, list(msgs)))


def test_empty_store_has_nothing(store: Any) -> None:
    assert store.load_session(SID) is None
    assert store.load_checkpoint(SID, RUN) is None
    assert store.load_pending_round(SID, RUN) is None
    assert store.load_workflow_checkpoint(SID, "wf") is None


def test_session_record_round_trips_without_secrets(store: Any) -> None:
    data = {
        "session_id": SID,
        "tenant_id": "t1",
        "providers": {"openai": {"api_key": "sk-live-123", "api_key_env": "OPENAI_API_KEY"}},
        "headers": [{"Authorization": "Bearer sk-live-123", "x": 1}],
        "runs": [{"id": "run-a", "status": "running"}],
    }
    store.save_session(SID, data)
    loaded = store.load_session(SID)
    assert loaded == {
        "session_id": SID,
        "tenant_id": "t1",
        "providers": {"openai": {"api_key_env": "OPENAI_API_KEY"}},
        "headers": [{"x": 1}],
        "runs": [{"id": "run-a", "status": "running"}],
    }
    loaded["tenant_id"] = "changed"  # the caller's copy is not the store's
    assert store.load_session(SID)["tenant_id"] == "t1"


def test_round_protocol_intent_results_commit(store: Any) -> None:
    msgs: list[dict[str, Any]] = [{"role": "user", "content": "go"}]
    a = assistant(1, ("c1", "bash", "{}"), ("c2", "read", "{}"))
    store.begin_round(SID, RUN, 1, a)
    pending = store.load_pending_round(SID, RUN)
    assert pending is not None
    assert (pending.run_id, pending.turn, pending.assistant_message, pending.results) == (
        RUN,
        1,
        a,
        {},
    )
    store.record_tool_result(SID, RUN, 1, "c1", {"output": "x", "exit_code": 0, "is_error": False})
    pending = store.load_pending_round(SID, RUN)
    assert pending is not None and pending.results == {
        "c1": {"output": "x", "exit_code": 0, "is_error": False}
    }
    assert store.load_checkpoint(SID, RUN) is None

    msgs += [a, tool_msg("c1", "x"), tool_msg("c2", "y")]
    store.commit_round(checkpoint(SID, RUN, 1, list(msgs)))
    assert store.load_pending_round(SID, RUN) is None
    cp = store.load_checkpoint(SID, RUN)
    assert cp == checkpoint(SID, RUN, 1, msgs)


def test_checkpoints_accumulate_and_runs_are_separate(store: Any) -> None:
    msgs: list[dict[str, Any]] = [{"role": "user", "content": "go"}]
    for turn in range(1, 6):
        _round(store, msgs, turn)
    cp = store.load_checkpoint(SID, RUN)
    assert cp is not None and cp.turn == 5 and cp.messages == msgs
    # a resumed run (new id) starts from the old messages; the old run stays intact
    msgs2 = list(msgs)
    _round(store, msgs2, 6, run="run-b")
    assert store.load_checkpoint(SID, RUN) == checkpoint(SID, RUN, 5, msgs)
    cp_b = store.load_checkpoint(SID, "run-b")
    assert cp_b is not None and cp_b.messages == msgs2 and cp_b.turn == 6
    assert store.run_ids(SID) == [RUN, "run-b"]


def test_rewritten_history_is_stored_whole(store: Any) -> None:
    msgs: list[dict[str, Any]] = [{"role": "user", "content": "go"}]
    for turn in range(1, 4):
        _round(store, msgs, turn)
    compacted = [{"role": "user", "content": "go"}, {"role": "assistant", "content": "summary"}]
    store.commit_round(checkpoint(SID, RUN, 4, compacted))
    cp = store.load_checkpoint(SID, RUN)
    assert cp is not None and cp.messages == compacted


def test_result_without_begun_round_is_refused(store: Any) -> None:
    with pytest.raises(CheckpointError, match="never begun"):
        store.record_tool_result(SID, RUN, 3, "c1", {"output": "x"})


def test_newer_schema_is_refused_with_contract_message(store: Any) -> None:
    # Refused when written (never a checkpoint nobody can resume) with the contract's message.
    with pytest.raises(CheckpointError) as err:
        store.commit_round(checkpoint(SID, "run-v2", 1, [], schema_version=2))
    assert str(err.value).startswith(
        "loop checkpoint for run run-v2 has schema version 2 but this build supports at most 1; "
    )
    assert store.load_checkpoint(SID, "run-v2") is None


@pytest.mark.parametrize(
    "bad", ["..", ".", "../x", "a/b", "a\\b", "a\x00b", "", ".hidden", "a b", "x" * 201, "é"]
)
def test_unsafe_ids_are_refused(store: Any, bad: str) -> None:
    with pytest.raises(InvalidIdError, match="invalid session id"):
        store.save_session(bad, {})
    with pytest.raises(InvalidIdError, match="invalid run id"):
        store.begin_round(SID, bad, 1, {})
    with pytest.raises(InvalidIdError, match="invalid run id"):
        store.load_checkpoint(SID, bad)
    assert isinstance(InvalidIdError("x"), StoreError)


def test_values_that_are_not_json_are_refused(store: Any) -> None:
    with pytest.raises(StoreError, match="not plain JSON"):
        store.save_session(SID, {"x": object()})
    with pytest.raises(StoreError, match="not plain JSON"):
        store.save_session(SID, {"x": float("nan")})


def test_workflow_checkpoint_save_load_delete(store: Any) -> None:
    wf = WorkflowCheckpoint(
        workflow_id="wf-1", steps=[{"step": "plan", "output": "ok"}], checkpoint_ms=5
    )
    store.save_workflow_checkpoint(SID, wf)
    assert store.load_workflow_checkpoint(SID, "wf-1") == wf
    wf2 = WorkflowCheckpoint(workflow_id="wf-1", steps=[*wf.steps, {"step": "do"}], checkpoint_ms=6)
    store.save_workflow_checkpoint(SID, wf2)
    assert store.load_workflow_checkpoint(SID, "wf-1") == wf2
    store.delete_workflow_checkpoint(SID, "wf-1")
    assert store.load_workflow_checkpoint(SID, "wf-1") is None


def test_workflow_checkpoint_newer_schema_refused(store: Any) -> None:
    store.save_workflow_checkpoint(
        SID, WorkflowCheckpoint(workflow_id="wf-9", steps=[], checkpoint_ms=1, schema_version=3)
    )
    with pytest.raises(CheckpointError) as err:
        store.load_workflow_checkpoint(SID, "wf-9")
    assert str(err.value).startswith(
        "workflow checkpoint for workflow wf-9 has schema version 3 but this build supports "
        "at most 1; "
    )


def test_delete_loop_checkpoint(store: Any) -> None:
    _round(store, [{"role": "user", "content": "go"}], 1)
    store.delete_loop_checkpoint(SID, RUN)
    assert store.load_checkpoint(SID, RUN) is None
