"""The Python snippets of the A3S Code docs (``shared/seeds``), run against ``session_runtime``
as written there, except for the import line (``a3s_code`` → ``session_runtime``), the agent
config (a dict pointing at a scripted model instead of ``agent.hcl``) and placeholders the docs
leave to the reader (``over_limit``, ``dispatch_to_worker``, ...). The docs' Python is
synchronous, so the scripted model runs on its own thread. What the runtime does not honour is
listed in docs/a3s-compatibility.md.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from session_runtime import (
    Agent,
    ExternalTaskResult,
    FileSessionStore,
    SessionOptions,
    SessionQueueConfig,
)
from session_runtime.llm.scripted import ScriptedServer


@contextmanager
def model(script: list[dict[str, Any]]) -> Iterator[Agent]:
    """An Agent whose provider is a scripted OpenAI-compatible server on its own loop thread."""
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    srv = ScriptedServer(script)
    asyncio.run_coroutine_threadsafe(srv.start(), loop).result(10)
    agent = Agent.create({"providers": {"openai": {"base_url": srv.base_url, "api_key": "k"}}})
    try:
        yield agent
    finally:
        agent.close()
        asyncio.run_coroutine_threadsafe(srv.stop(), loop).result(10)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(5)


def bash_then(text: str, command: str = "echo ran >> side.txt") -> list[dict[str, Any]]:
    return [{"tool_calls": [{"name": "bash", "arguments": {"command": command}}]}, {"text": text}]


def test_identity_labels(tmp_path: Path) -> None:
    """Sessions page, "Host Identity Labels" (and the multi-machine page's setters)."""
    with model([{"text": "hi"}]) as agent:
        opts = SessionOptions()
        opts.tenant_id = "acme-corp"
        opts.principal = "user:42"
        opts.agent_template_id = "reviewer-v3"
        opts.correlation_id = "req-9f2c"
        session = agent.session(str(tmp_path), opts)
        assert (session.tenant_id, session.principal) == ("acme-corp", "user:42")
        assert (session.agent_template_id, session.correlation_id) == ("reviewer-v3", "req-9f2c")


def test_budget_guard_deny_raises_budget_exhausted_and_keeps_the_session(tmp_path: Path) -> None:
    """Multi-machine page, "Budget / cost guard"; Limits page, "Python — budget_guard"."""
    spent: list[int] = []

    def over_limit(session_id: str, estimated_tokens: int) -> bool:
        return bool(spent)

    def meter(session_id: str, usage: dict[str, Any]) -> None:
        spent.append(usage["total_tokens"])

    class MyGuard:
        def check_before_llm(self, session_id: str, estimated_tokens: int) -> Any:
            if over_limit(session_id, estimated_tokens):
                return {"decision": "deny", "resource": "tokens", "reason": "monthly cap reached"}
            return {"decision": "allow"}

        def record_after_llm(self, session_id: str, usage: dict[str, Any]) -> None:
            meter(session_id, usage)

    with model([{"text": "first"}, {"text": "second"}]) as agent:
        opts = SessionOptions()
        opts.budget_guard = MyGuard()
        session = agent.session(str(tmp_path), opts)
        assert session.send("one").text == "first"
        assert spent and spent[0] > 0
        with pytest.raises(RuntimeError, match=r"(?i)budget exhausted"):
            session.send("two")
        assert not session.is_closed()  # "The session stays open"


def test_budget_guard_positional_python_form(tmp_path: Path) -> None:
    """Limits page: ``SessionOptions(budget_guard=MyBudgetGuard())`` with check_before_tool."""
    tools: list[str] = []

    class MyBudgetGuard:
        def check_before_llm(self, session_id: str, est_tokens: int) -> Any:
            return {"decision": "allow"}

        def record_after_llm(self, session_id: str, usage: dict[str, Any]) -> None:
            assert usage["total_tokens"] >= 0

        def check_before_tool(self, session_id: str, tool_name: str) -> Any:
            tools.append(tool_name)
            return {"decision": "allow"}

    with model(bash_then("done")) as agent:
        session = agent.session(str(tmp_path), SessionOptions(budget_guard=MyBudgetGuard()))
        assert session.send("go").text == "done"
        assert tools == ["bash"]


def test_resume_run_from_a_file_store(tmp_path: Path) -> None:
    """Multi-machine page, "Loop checkpoints and run resumption", and its error paths."""
    workspace = str(tmp_path / "ws")
    Path(workspace).mkdir()
    store_dir = str(tmp_path / ".a3s" / "sessions")
    script = [*bash_then("first done"), {"text": "resumed"}]
    with model(script) as agent:
        opts = SessionOptions()
        opts.session_store = FileSessionStore(store_dir)
        opts.session_id = "session-from-node-a"
        first = agent.session(workspace, opts)
        run_id = first.send("go").run_id
        first.close()
        opts.session_store.close()  # node A's process ends (its writer id gives up the lease)

        opts = SessionOptions()
        opts.session_store = FileSessionStore(store_dir)
        opts.session_id = "session-from-node-a"
        session = agent.session(workspace, opts)
        result = session.resume_run(run_id)
        assert result.run_id != run_id  # "A new run id is allocated for the resumed work"

        bare = agent.session(workspace, SessionOptions())
        with pytest.raises(Exception, match="requires a session_store"):
            bare.resume_run(run_id)
        with pytest.raises(Exception, match="no loop checkpoint found for run"):
            session.resume_run("never-ran")


def test_retention_limits_as_a_dict(tmp_path: Path) -> None:
    """Limits page, "Retention caps": ``retention_limits`` given as a dict."""
    with model([{"text": "a"}, {"text": "b"}, {"text": "c"}]) as agent:
        session = agent.session(
            str(tmp_path),
            SessionOptions(
                retention_limits={
                    "max_runs_retained": 2,
                    "max_events_per_run": 5000,
                    "max_trace_events": 20000,
                    "max_terminal_subagent_tasks": 500,
                },
            ),
        )
        for prompt in ("1", "2", "3"):
            session.send(prompt)
        assert len(session.runs()) == 2  # FIFO: the oldest run record was dropped


def test_lifecycle_and_the_agent_registry(tmp_path: Path) -> None:
    """Sessions page, "Lifecycle and Close" and "Agent-side registry"."""
    with model([{"text": "x"}]) as agent:
        session = agent.session(str(tmp_path))
        other = agent.session(str(tmp_path))
        session.close()
        assert session.is_closed()
        with pytest.raises(Exception, match=r"(?i)closed"):
            session.send("after close")
        ids = agent.list_sessions()
        assert other.session_id in ids
        agent.close_session(ids[0])
        agent.close()  # closes all remaining sessions
        assert agent.is_closed() and other.is_closed()


def test_external_lane_with_the_stream_loop(tmp_path: Path) -> None:
    """Lane Queue page, "Python" external-task example: queue_config as a keyword,
    ``event.event_type``, the dict form of ``complete_external_task``, ``"end"``."""
    script = bash_then("all done", "cargo test")
    texts: list[str] = []
    completed: list[str] = []
    with model(script) as agent:
        qc = SessionQueueConfig()
        qc.with_lane_features()
        qc.set_default_timeout(60000)
        session = agent.session(str(tmp_path), queue_config=qc)
        session.set_lane_handler("execute", mode="external", timeout_ms=60000)
        for event in session.stream("Run the full test suite"):
            if event.event_type == "external_task_pending":
                for task in session.pending_external_tasks():
                    assert task["command_type"] == "bash"
                    assert task["payload"] == {"command": "cargo test"}
                    ok = session.complete_external_task(
                        task["task_id"],
                        {
                            "success": True,
                            "result": {"output": "test result: ok", "exit_code": 0},
                            "error": None,
                        },
                    )
                    assert ok
                    completed.append(task["task_id"])
            elif event.event_type == "tool_end":
                assert (event.tool_name, event.output) == ("bash", "test result: ok")
            elif event.event_type == "text_delta":
                texts.append(event.text or "")
            elif event.event_type == "end":
                break
    assert completed and "".join(texts) == "all done"


def test_the_two_external_result_forms_and_ambiguity(tmp_path: Path) -> None:
    """``complete_external_task`` takes (success, result, error), an ExternalTaskResult or its
    dict; a dict handed as ``success`` together with a result is refused, not recorded empty."""
    with model([{"text": "x"}]) as agent:
        qc = SessionQueueConfig()
        session = agent.session(str(tmp_path), queue_config=qc)
        assert session.complete_external_task("nope", True, {"output": "", "exit_code": 0}) is False
        assert session.complete_external_task("nope", ExternalTaskResult(True)) is False
        with pytest.raises(TypeError, match="not both"):
            session.complete_external_task("nope", {"success": True}, {"output": "x"})
        with pytest.raises(TypeError, match="bool 'success'"):
            session.complete_external_task("nope", {"result": {"output": "x"}})
        with pytest.raises(TypeError, match="must be a bool"):
            session.complete_external_task("nope", "yes")


def test_session_options_as_keywords_are_checked(tmp_path: Path) -> None:
    with model([{"text": "x"}]) as agent:
        with pytest.raises(TypeError, match="unknown session options: queue_cfg"):
            agent.session(str(tmp_path), queue_cfg=SessionQueueConfig())
        with pytest.raises(TypeError, match="not both"):
            agent.session(str(tmp_path), SessionOptions(), tenant_id="t")
        assert agent.session(str(tmp_path), tenant_id="t").tenant_id == "t"


def test_send_result_and_a_side_question(tmp_path: Path) -> None:
    """Sessions page, "Send" and "Side Questions"."""
    with model([{"text": "the answer"}, {"text": "side answer"}]) as agent:
        session = agent.session(str(tmp_path))
        result = session.send("question")
        assert result.text == "the answer" and result.total_tokens > 0
        answer = session.btw("what did you say?")
        assert answer.answer == "side answer"
        assert len(session.history()) == 3  # system, user, assistant: btw appends nothing


def test_queue_status_api(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Lane Queue page, "Queue status": stats and the pending external tasks while one waits."""
    with model(bash_then("done")) as agent:
        qc = SessionQueueConfig()
        session = agent.session(str(tmp_path), queue_config=qc)
        session.set_lane_handler("execute", mode="external", timeout_ms=60000)
        pending = threading.Event()
        session.register_hook("seen", "external_task_pending", lambda _e: pending.set())
        outcome: list[Any] = []
        runner = threading.Thread(target=lambda: outcome.append(session.send("go")))
        runner.start()
        assert pending.wait(30)

        stats = session.queue_stats()
        print(f"Pending: {stats['total_pending']}, Active: {stats['total_active']}")
        external = session.pending_external_tasks()
        print(f"External pending: {len(external)}")
        for task in external:
            print(f"  [{task['task_id']}] {task['command_type']} in {task['lane']}")

        out = capsys.readouterr().out.splitlines()
        assert out[1] == "External pending: 1"
        assert out[2] == f"  [{external[0]['task_id']}] bash in execute"
        ok = {"success": True, "result": {"output": "ok", "exit_code": 0}}
        assert session.complete_external_task(external[0]["task_id"], ok)
        runner.join(30)
        assert outcome[0].text == "done"


def test_hybrid_lane_runs_locally_and_announces(tmp_path: Path) -> None:
    """Lane Queue page, "Hybrid": tools run locally, external watchers are notified."""
    with model(bash_then("done")) as agent:
        qc = SessionQueueConfig()
        qc.with_lane_features()
        session = agent.session(str(tmp_path), queue_config=qc)
        announced: list[str] = []
        session.register_hook(
            "watch", "external_task_pending", lambda e: announced.append(e.event_type)
        )
        session.set_lane_handler("execute", mode="hybrid", timeout_ms=60000)
        result = session.send("Run cargo test and fix any failures")
        assert result.text == "done"
        assert (tmp_path / "side.txt").read_text() == "ran\n"
        assert announced == ["external_task_pending"]  # hooks get AgentEvents too


def test_resume_run_carries_usage_forward(tmp_path: Path) -> None:
    """Persistence page: a resumed run's accounting continues from the checkpoint."""
    workspace = tmp_path / "ws"
    workspace.mkdir()
    script = [*bash_then("done"), {"text": "again"}]
    with model(script) as agent:
        store = FileSessionStore(str(tmp_path / "sessions"))
        session = agent.session(str(workspace), SessionOptions(session_store=store))
        first = session.send("work")
        result = session.resume_run(first.run_id)
        assert result.text == "again" and result.run_id != first.run_id
        assert result.tool_calls_count == first.tool_calls_count == 1
        assert result.total_tokens > first.total_tokens  # carried forward, then added to
