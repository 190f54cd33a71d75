"""The persistence seam: round protocol, resume_run, pending rounds, resume_session, passivation.

Uses the store package's MemorySessionStore (same reducer as the file store) and, where a test
needs to see call order or plant odd checkpoints, the dict store of conftest.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from session_runtime import (
    CheckpointError,
    LoopCheckpoint,
    ResumeError,
    RunPassivatedError,
    SessionOptions,
)
from session_runtime.store.memory import MemorySessionStore
from session_runtime.tools import DirectExecutor, ResultCallback, ToolCall, ToolContext, ToolResult
from tests.unit.runtime.conftest import DictStore, opts

TWO_ROUNDS: list[dict[str, Any]] = [
    {
        "tool_calls": [{"name": "write", "arguments": {"file_path": "a.txt", "content": "A"}}],
        "usage": {"prompt_tokens": 10, "completion_tokens": 1},
    },
    {
        "tool_calls": [{"name": "bash", "arguments": {"command": "echo run >> count.txt"}}],
        "usage": {"prompt_tokens": 20, "completion_tokens": 2},
    },
    {"text": "finished", "usage": {"prompt_tokens": 30, "completion_tokens": 3}},
]


async def test_round_protocol_intent_before_action(
    scripted: Any, agent_for: Any, workspace: Path, store: DictStore
) -> None:
    srv = await scripted(TWO_ROUNDS)
    session = agent_for(srv).session(str(workspace), opts(session_store=store))
    seen_at_tool: list[list[tuple[Any, ...]]] = []
    session.register_hook("spy", "pre_tool_use", lambda e: seen_at_tool.append(list(store.calls)))
    result = await session.send_async("go")
    rid = result.run_id
    rounds = [c for c in store.calls if c[0] != "save_session"]
    assert rounds == [
        ("commit_round", rid, 0),
        ("begin_round", rid, 1),
        ("record_tool_result", rid, 1, "call_0_0"),
        ("commit_round", rid, 1),
        ("begin_round", rid, 2),
        ("record_tool_result", rid, 2, "call_1_0"),
        ("commit_round", rid, 2),
    ]
    # When each tool was about to run, its round's intent was already journaled.
    assert seen_at_tool[0][-1] == ("begin_round", rid, 1)
    assert seen_at_tool[1][-1] == ("begin_round", rid, 2)
    cp = store.checkpoints[(session.session_id, rid)]
    assert cp.turn == 2 and cp.tool_calls_count == 2
    # The checkpoint holds the usage of the LLM calls of its two rounds (not the final answer).
    rounds_usage = [t["usage"] for t in TWO_ROUNDS[:2]]
    prompt = sum(u["prompt_tokens"] for u in rounds_usage)
    completion = sum(u["completion_tokens"] for u in rounds_usage)
    assert cp.total_usage == {
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": prompt + completion,
    }
    assert cp.messages[-1]["role"] == "tool"  # checkpoints end at a round boundary
    saved = store.sessions[session.session_id]
    assert saved["runs"][-1]["status"] == "completed"
    assert session.state()["last_checkpoint"]["turn"] == 2


async def test_resume_run_errors(
    scripted: Any, agent_for: Any, workspace: Path, store: DictStore
) -> None:
    srv = await scripted([{"text": "x"}])
    agent = agent_for(srv)
    bare = agent.session(str(workspace), opts())
    with pytest.raises(ResumeError, match=r"^resume_run requires a session_store$"):
        await bare.resume_run_async("run-1")
    s = agent.session(str(workspace), opts(session_store=store, session_id="mine"))
    with pytest.raises(ResumeError, match=r"^no loop checkpoint found for run 'run-404'$"):
        await s.resume_run_async("run-404")
    store.checkpoints[("other", "run-other")] = LoopCheckpoint(
        "run-other", "other", 0, [{"role": "system", "content": "s"}], {}, 0, 0
    )
    with pytest.raises(CheckpointError, match="belongs to session 'other'"):
        await s.resume_run_async("run-other")
    store.checkpoints[("mine", "run-new")] = LoopCheckpoint(
        "run-new", "mine", 0, [{"role": "system", "content": "s"}], {}, 0, 0, schema_version=2
    )
    with pytest.raises(CheckpointError, match="has schema version 2 but this build supports at"):
        await s.resume_run_async("run-new")
    assert s.state()["state"] == "idle" and srv.requests == []


async def test_passivate_between_rounds_then_resume_on_a_new_agent(
    scripted: Any, agent_for: Any, workspace: Path
) -> None:
    srv = await scripted(TWO_ROUNDS)
    store = MemorySessionStore()
    first = agent_for(srv).session(
        str(workspace), opts(session_store=store, session_id="sess-1", tenant_id="acme")
    )
    outcome: list[dict[str, Any]] = []
    heard: list[dict[str, Any]] = []
    first.register_hook("p", "passivation_requested", heard.append)

    async def passivate_after_round_one(event: dict[str, Any]) -> None:
        if event["turn"] == 1:
            deadline = int(time.time() * 1000) + 10_000
            asyncio.get_running_loop().create_task(
                _collect(outcome, first.passivate_async("node_drain", deadline))
            )

    first.register_hook("drain", "turn_end", passivate_after_round_one)
    with pytest.raises(RunPassivatedError) as info:
        await first.send_async("two rounds please")
    await _wait_for(lambda: bool(outcome))
    old_run = info.value.run_id
    assert outcome[0] == {"outcome": "passivated", "run_id": old_run, "turn": 1}
    assert heard[0]["reason"] == "node_drain" and heard[0]["tenant_id"] == "acme"
    assert first.state()["state"] == "passivated"
    assert len(srv.requests) == 1  # no new LLM call after the request
    assert not (workspace / "count.txt").exists()

    # A new process: new agent, resume the session (relabelled), then the run.
    second = agent_for(srv).resume_session(
        "sess-1", opts(session_store=store, principal="user:7", tenant_id="acme-2")
    )
    assert (second.tenant_id, second.principal) == ("acme-2", "user:7")
    assert [(r["id"], r["status"]) for r in second.runs()] == [(old_run, "passivated")]
    result = await second.resume_run_async(old_run)
    assert result.run_id != old_run and result.run_id.startswith("run-")
    assert result.text == "finished"
    every_call = sum(
        t["usage"]["prompt_tokens"] + t["usage"]["completion_tokens"] for t in TWO_ROUNDS
    )
    assert result.total_tokens == every_call  # carried forward from the first run
    assert result.tool_calls_count == 2 and result.turn == 2
    assert (workspace / "count.txt").read_text() == "run\n"
    runs = {r["id"]: r for r in second.runs()}
    assert runs[old_run]["status"] == "passivated"
    assert runs[result.run_id]["resumed_from"] == old_run
    kept = store.load_checkpoint("sess-1", old_run)
    assert kept is not None and kept.turn == 1  # original run intact
    new_cp = store.load_checkpoint("sess-1", result.run_id)
    assert new_cp is not None and new_cp.turn == 2
    assert second.state()["usage"]["total_tokens"] == every_call


async def test_passivation_deadline_cuts_a_running_tool_and_resume_never_reruns_it(
    scripted: Any, agent_for: Any, workspace: Path
) -> None:
    cmd = "echo started >> count.txt; sleep 5; echo finished >> count.txt"
    srv = await scripted(
        [
            {"tool_calls": [{"name": "bash", "arguments": {"command": cmd}}]},
            {"text": "checked the workspace"},
        ]
    )
    store = MemorySessionStore()
    first = agent_for(srv).session(str(workspace), opts(session_store=store, session_id="s2"))
    run = asyncio.create_task(first.send_async("slow"))
    await _wait_for(lambda: (workspace / "count.txt").exists())
    deadline = int(time.time() * 1000) + 200
    outcome = await first.passivate_async("eviction", deadline)
    assert outcome["outcome"] == "timeout" and outcome["turn"] == 0
    with pytest.raises(RunPassivatedError):
        await run
    old = outcome["run_id"]
    pending = store.load_pending_round("s2", old)
    assert pending is not None and pending.turn == 1 and pending.results == {}

    second = agent_for(srv).resume_session("s2", opts(session_store=store))
    result = await second.resume_run_async(old)
    assert result.text == "checked the workspace"
    assert (workspace / "count.txt").read_text() == "started\n"  # bash ran exactly once
    tool_msg = [m for m in srv.requests[-1]["messages"] if m["role"] == "tool"][-1]
    assert (
        "interrupted" in tool_msg["content"] and "side effects are unknown" in tool_msg["content"]
    )


class RecoveringExecutor:
    """The direct executor plus results 'delivered by a worker while we were down'."""

    def __init__(self, delivered: dict[str, ToolResult]) -> None:
        self.inner = DirectExecutor()
        self.delivered = delivered
        self.executed: list[str] = []

    async def execute(
        self, calls: Sequence[ToolCall], ctx: ToolContext, on_result: ResultCallback
    ) -> list[ToolResult]:
        self.executed += [c.name for c in calls]
        return await self.inner.execute(calls, ctx, on_result)

    async def recover(self, call: ToolCall, ctx: ToolContext) -> ToolResult | None:
        return self.delivered.get(call.id)


async def test_pending_round_reuse_recover_rerun_or_interrupted(
    scripted: Any, agent_for: Any, workspace: Path
) -> None:
    (workspace / "r.txt").write_text("read me\n")
    store = MemorySessionStore()
    run = "run-crashed"
    msgs = [{"role": "system", "content": "sys"}, {"role": "user", "content": "do four things"}]
    store.commit_round(
        LoopCheckpoint(
            run,
            "s3",
            0,
            msgs,
            {"prompt_tokens": 5, "completion_tokens": 1, "total_tokens": 6},
            0,
            1,
        )
    )

    def call(cid: str, name: str, args: dict[str, Any]) -> dict[str, Any]:
        return {
            "id": cid,
            "type": "function",
            "function": {"name": name, "arguments": json.dumps(args)},
        }

    amsg = {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            call("c-read", "read", {"file_path": "r.txt"}),
            call("c-write", "write", {"file_path": "w.txt", "content": "W"}),
            call("c-bash", "bash", {"command": "touch bash-ran.txt"}),
            call("c-edit", "edit", {"file_path": "r.txt", "old_string": "read", "new_string": "X"}),
        ],
    }
    store.begin_round("s3", run, 1, amsg)
    store.record_tool_result(
        "s3",
        run,
        1,
        "c-write",
        {"output": "Wrote 1 bytes to w.txt", "exit_code": 0, "is_error": False},
    )
    executor = RecoveringExecutor(
        {"c-bash": ToolResult("c-bash", "bash", "worker says ok", exit_code=0)}
    )
    srv = await scripted([{"text": "resumed"}])
    session = agent_for(srv).session(
        str(workspace), opts(session_store=store, session_id="s3"), executor=executor
    )
    result = await session.resume_run_async(run)
    assert result.text == "resumed" and result.tool_calls_count == 4 and result.turn == 1
    assert executor.executed == ["read"]  # only the query-lane call was re-run
    assert not (workspace / "w.txt").exists() and not (workspace / "bash-ran.txt").exists()
    assert (workspace / "r.txt").read_text() == "read me\n"  # the edit did not run
    tools = {
        m["tool_call_id"]: m["content"] for m in srv.requests[0]["messages"] if m["role"] == "tool"
    }
    assert "read me" in tools["c-read"]
    assert tools["c-write"] == "Wrote 1 bytes to w.txt"
    assert tools["c-bash"] == "worker says ok"
    assert "interrupted" in tools["c-edit"]
    cp = store.load_checkpoint("s3", result.run_id)
    assert cp is not None and cp.turn == 1 and cp.tool_calls_count == 4


async def test_saved_session_has_no_api_key_and_caller_options_win(
    scripted: Any, workspace: Path, store: DictStore
) -> None:
    from session_runtime import Agent

    srv = await scripted([{"text": "x"}])
    agent = Agent.create(
        {"providers": {"openai": {"base_url": srv.base_url, "api_key": "sk-very-secret"}}}
    )
    try:
        s = agent.session(
            str(workspace),
            SessionOptions(
                session_store=store,
                session_id="keep",
                tenant_id="t",
                max_tool_rounds=7,
                auto_save=True,
            ),
        )
        await s.send_async("hello")
        s.save()
        assert "sk-very-secret" not in json.dumps(store.sessions["keep"])
        resumed = agent.resume_session(
            "keep", SessionOptions(session_store=store, max_tool_rounds=9), workspace=str(workspace)
        )
        assert resumed.options.max_tool_rounds == 9 and resumed.tenant_id == "t"
        assert resumed.history() == s.history()
        assert resumed.runs()[0]["status"] == "completed"
    finally:
        await agent.close_async()


async def test_passivate_idle_session(scripted: Any, agent_for: Any, workspace: Path) -> None:
    srv = await scripted([{"text": "x"}])
    session = agent_for(srv).session(str(workspace), opts())
    await session.send_async("hi")
    heard: list[dict[str, Any]] = []
    session.register_hook("p", "*", heard.append)
    out = await session.passivate_async("manual", None)
    assert out == {"outcome": "passivated", "run_id": session.runs()[-1]["id"], "turn": 0}
    assert [e["type"] for e in heard] == ["passivation_requested"]
    assert await session.passivate_async("manual", None) == out  # idempotent
    assert session.state()["state"] == "passivated"


async def _collect(into: list[Any], coro: Any) -> None:
    into.append(await coro)


async def _wait_for(predicate: Any) -> None:
    """Poll a side effect of a running tool or task (bounded by the global test timeout)."""
    while not predicate():  # noqa: ASYNC110 - polling a subprocess's side effect
        await asyncio.sleep(0.01)


class FailingStore(DictStore):
    """Raises the given error from one protocol method."""

    def __init__(self, method: str, error: Exception) -> None:
        super().__init__()
        self.method = method
        self.error = error

    def begin_round(self, *args: Any) -> None:
        if self.method == "begin_round":
            raise self.error
        super().begin_round(*args)

    def record_tool_result(self, *args: Any) -> None:
        if self.method == "record_tool_result":
            raise self.error
        super().record_tool_result(*args)

    def commit_round(self, checkpoint: LoopCheckpoint) -> None:
        if self.method == "commit_round" and checkpoint.turn >= 1:
            raise self.error
        super().commit_round(checkpoint)


ONE_WRITE: list[dict[str, Any]] = [
    {"tool_calls": [{"name": "write", "arguments": {"file_path": "w.txt", "content": "w"}}]},
    {"text": "wrote"},
]


async def test_intent_failure_stops_before_any_tool_runs(
    scripted: Any, agent_for: Any, workspace: Path
) -> None:
    from session_runtime import StoreError

    srv = await scripted(ONE_WRITE)
    store = FailingStore("begin_round", StoreError("disk full"))
    session = agent_for(srv).session(str(workspace), opts(session_store=store))
    events: list[dict[str, Any]] = []
    session.register_hook("all", "*", events.append)
    with pytest.raises(StoreError, match="disk full"):
        await session.send_async("write")
    assert not (workspace / "w.txt").exists()
    assert any(
        e["type"] == "persistence_failed" and e["operation"] == "begin_round" for e in events
    )


async def test_result_journal_failure_is_reported_and_the_run_goes_on(
    scripted: Any, agent_for: Any, workspace: Path
) -> None:
    from session_runtime import StoreError

    srv = await scripted(ONE_WRITE)
    store = FailingStore("record_tool_result", StoreError("flaky volume"))
    session = agent_for(srv).session(str(workspace), opts(session_store=store))
    events = [ev async for ev in session.stream_async("write")]
    failed = [e for e in events if e["type"] == "persistence_failed"]
    assert failed and failed[0]["message"] == "flaky volume"
    assert events[-1]["type"] == "agent_end"


async def test_fenced_store_stops_the_run(scripted: Any, agent_for: Any, workspace: Path) -> None:
    from session_runtime import FencedError

    srv = await scripted(ONE_WRITE)
    store = FailingStore("commit_round", FencedError("epoch 3 owns the session"))
    session = agent_for(srv).session(str(workspace), opts(session_store=store))
    with pytest.raises(FencedError):
        await session.send_async("write")
    assert len(srv.requests) == 1  # no LLM call after being fenced


async def test_crashed_run_is_listed_as_interrupted(
    scripted: Any, agent_for: Any, workspace: Path, store: DictStore
) -> None:
    srv = await scripted([{"text": "x"}])
    agent = agent_for(srv)
    first = agent.session(str(workspace), opts(session_store=store, session_id="crash"))
    await first.send_async("p")
    data = store.sessions["crash"]
    data["runs"][0]["status"] = "running"  # what a crash mid-run leaves behind
    resumed = agent.resume_session("crash", opts(session_store=store))
    assert [r["status"] for r in resumed.runs()] == ["interrupted"]


async def test_options_object_can_be_reused_and_state_counts_live_usage(
    scripted: Any, agent_for: Any, workspace: Path
) -> None:
    srv = await scripted(
        [
            {
                "tool_calls": [{"name": "ls", "arguments": {}}],
                "usage": {"prompt_tokens": 5, "completion_tokens": 5},
            },
            {"text": "x", "usage": {"prompt_tokens": 1, "completion_tokens": 1}},
        ]
    )
    shared = opts(tenant_id="same")
    agent = agent_for(srv)
    a = agent.session(str(workspace), shared)
    b = agent.session(str(workspace), shared)
    assert a.session_id != b.session_id and shared.session_id is None
    seen: list[dict[str, Any]] = []
    a.register_hook("s", "turn_end", lambda e: seen.append(a.state()))
    await a.send_async("go")
    assert seen[0]["state"] == "running" and seen[0]["usage"]["total_tokens"] == 10
    assert seen[0]["tool_calls_count"] == 1
    assert a.state()["usage"]["total_tokens"] == 12


async def test_passivation_abandons_an_llm_call_in_flight(
    scripted: Any, agent_for: Any, workspace: Path
) -> None:
    srv = await scripted([{"text": "too late", "delay_ms": 3000}, {"text": "asked again"}])
    store = MemorySessionStore()
    session = agent_for(srv).session(str(workspace), opts(session_store=store, session_id="s4"))
    run = asyncio.create_task(session.send_async("slow model"))
    await _wait_for(lambda: len(srv.requests) == 1)  # the model is "thinking" now
    outcome = await session.passivate_async("migration", None)
    with pytest.raises(RunPassivatedError):
        await run
    assert outcome["outcome"] == "passivated" and outcome["turn"] == 0
    result = await session.resume_run_async(outcome["run_id"])
    assert result.text == "asked again"
    assert not any(m.get("content") == "too late" for m in session.history())
