"""The A3S persistence contract seen through the real Session API, with both stores
(docs/architecture.md §10, "Persistence"): resume_run's refusal messages, a newer checkpoint schema,
a checkpoint of another session, resumption with carried-forward counts under a new run id, the
original run kept, caller labels winning on resume, and no API key in the store."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from session_runtime import Agent, SessionOptions
from session_runtime.errors import CheckpointError, ResumeError
from session_runtime.llm.scripted import ScriptedServer
from session_runtime.store import FileSessionStore, MemorySessionStore
from session_runtime.store.journal import frame

SECRET = "sk-unit-secret-123"


@pytest.fixture
def server() -> Iterator[ScriptedServer]:
    srv = ScriptedServer(
        {
            "turns": [
                {"tool_calls": [{"id": "c1", "name": "bash", "arguments": {"command": "echo 1"}}]},
                {"tool_calls": [{"id": "c2", "name": "bash", "arguments": {"command": "echo 2"}}]},
                {"text": "done"},
            ],
            "on_exhausted": "repeat_last",
        }
    )
    srv.start_in_thread()
    yield srv
    srv.stop_thread()


@pytest.fixture
def agent(server: ScriptedServer) -> Iterator[Agent]:
    a = Agent.create({"providers": {"openai": {"base_url": server.base_url, "api_key": SECRET}}})
    yield a
    a.close()


@pytest.fixture(params=["memory", "file"])
def make_store(request: pytest.FixtureRequest, tmp_path: Path) -> Any:
    if request.param == "memory":
        shared = MemorySessionStore()
        return lambda: shared
    return lambda: FileSessionStore(tmp_path / "store", epoch=1)


def opts(store: Any, **kw: Any) -> SessionOptions:
    return SessionOptions(model="openai/scripted", session_store=store, llm_backoff_ms=1, **kw)


def test_resume_run_without_a_store(agent: Agent, tmp_path: Path) -> None:
    session = agent.session(tmp_path, SessionOptions(model="openai/scripted"))
    with pytest.raises(ResumeError, match=r"^resume_run requires a session_store$"):
        session.resume_run("run-x")


def test_unknown_run(agent: Agent, tmp_path: Path, make_store: Any) -> None:
    session = agent.session(tmp_path, opts(make_store(), session_id="s1"))
    with pytest.raises(ResumeError, match=r"^no loop checkpoint found for run 'run-nope'$"):
        session.resume_run("run-nope")


def test_newer_schema_is_refused(agent: Agent, tmp_path: Path) -> None:
    # This build refuses to write a v2 checkpoint, so a newer build wrote this one.
    store = FileSessionStore(tmp_path / "store", epoch=1)
    session = agent.session(tmp_path, opts(store, session_id="s1"))
    session.save()
    store.close()
    (journal,) = (tmp_path / "store" / "s1").glob("journal-*.rec")
    with journal.open("ab") as f:
        f.write(
            frame(
                b'{"append":[],"keep":0,"ms":5,"run":"run-v2","session":"s1","t":"commit",'
                b'"tool_calls":1,"turn":1,"usage":{"total_tokens":1},"v":2}'
            )
        )
    store = FileSessionStore(tmp_path / "store", epoch=1)
    session = agent.session(tmp_path, opts(store, session_id="s1"))
    with pytest.raises(CheckpointError) as err:
        session.resume_run("run-v2")
    assert str(err.value).startswith(
        "loop checkpoint for run run-v2 has schema version 2 but this build supports at most 1; "
    )


def test_checkpoint_of_another_session_is_refused(agent: Agent, tmp_path: Path) -> None:
    store = FileSessionStore(tmp_path / "store", epoch=1)
    session = agent.session(tmp_path, opts(store, session_id="mine"))
    session.save()
    store.close()
    # a commit record of session "theirs" that ended up in this session's journal
    (journal,) = (tmp_path / "store" / "mine").glob("journal-*.rec")
    with journal.open("ab") as f:
        f.write(
            frame(
                b'{"append":[],"keep":0,"ms":1,"run":"run-t","session":"theirs","t":"commit",'
                b'"tool_calls":0,"turn":1,"usage":{},"v":1}'
            )
        )
    again = agent.resume_session("mine", opts(FileSessionStore(tmp_path / "store", epoch=2)))
    with pytest.raises(
        CheckpointError, match="loop checkpoint for run run-t belongs to session 'theirs', not"
    ):
        again.resume_run("run-t")


def test_resume_carries_counts_keeps_the_original_and_labels(
    agent: Agent, tmp_path: Path, make_store: Any
) -> None:
    store = make_store()
    session = agent.session(tmp_path, opts(store, session_id="s1", tenant_id="t-old"))
    first = session.send("go")
    assert (first.text, first.tool_calls_count, first.turn) == ("done", 2, 2)
    original = store.load_checkpoint("s1", first.run_id)
    assert original is not None and original.turn == 2
    session.close()
    if isinstance(store, FileSessionStore):
        store.close()  # the writer is gone (a restart in place): its epoch may be taken over

    resumed_session = agent.resume_session("s1", opts(make_store(), tenant_id="t-new"))
    assert resumed_session.tenant_id == "t-new"  # caller labels win on resume
    assert [r["id"] for r in resumed_session.runs()] == [first.run_id]
    second = resumed_session.resume_run(first.run_id)
    assert second.run_id != first.run_id
    assert second.tool_calls_count == 2  # carried forward (no new tool calls)
    # usage carried forward from the checkpoint (taken before the final answer), plus the one
    # LLM call of the resumed run
    assert second.total_tokens > original.total_usage["total_tokens"] > 0
    assert make_store().load_checkpoint("s1", first.run_id) == original  # original intact
    runs = make_store().load_session("s1")["runs"]
    assert [r["id"] for r in runs] == [first.run_id, second.run_id]
    if isinstance(store, FileSessionStore):
        for p in (tmp_path / "store").rglob("*"):
            assert not p.is_file() or SECRET.encode() not in p.read_bytes()
    else:
        assert SECRET not in repr(store.load_session("s1"))
