"""A session run's spans (session_runtime.tracing), read back from OpenTelemetry's in-memory
exporter: the run -> turn -> chat / execute_tool tree, GenAI attributes, identity labels on every
span, budget decisions as events, no prompt text, and a resumed run continuing the trace."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from berth_contract import tracing as names
from berth_telemetry.tracing import remote_parent
from session_runtime import RunPassivatedError
from session_runtime.store.memory import MemorySessionStore
from tests.trace_support import exporter, ids, named, parent_id
from tests.unit.runtime.conftest import opts

PROMPT = "secret prompt text 4711"
TOOL_THEN_TEXT: list[dict[str, Any]] = [
    {
        "tool_calls": [{"name": "write", "arguments": {"file_path": "f.txt", "content": "1"}}],
        "usage": {"prompt_tokens": 11, "completion_tokens": 3},
    },
    {"text": "done", "usage": {"prompt_tokens": 17, "completion_tokens": 5}},
]
IDENTITY = {"tenant_id": "acme", "principal": "user:7", "agent_template_id": "tpl-1"}


@pytest.fixture
def spans() -> Iterator[InMemorySpanExporter]:
    exp = exporter()
    exp.clear()
    yield exp
    exp.clear()


class Soft:
    """A guard answering soft to the first LLM check."""

    run_inline = True

    def __init__(self) -> None:
        self.llm_checks = 0

    def check_before_llm(self, session_id: str, estimated_tokens: int) -> Any:
        self.llm_checks += 1
        if self.llm_checks == 1:
            return {"decision": "soft", "resource": "tokens", "consumed": 8, "limit": 10}
        return None


async def test_run_turn_chat_and_tool_spans_with_labels(
    scripted: Any, agent_for: Any, workspace: Path, spans: InMemorySpanExporter
) -> None:
    srv = await scripted(TOOL_THEN_TEXT)
    session = agent_for(srv).session(
        str(workspace),
        opts(session_id="s-1", correlation_id="corr-9", budget_guard=Soft(), **IDENTITY),
    )
    result = await session.send_async(PROMPT)
    got = spans.get_finished_spans()
    (run,) = named(got, "invoke_agent")
    turns = named(got, "berth.turn")
    chats = named(got, "chat ")
    (tool,) = named(got, "execute_tool")
    assert len(turns) == 2 and len(chats) == 2
    assert run.parent is None and run.attributes is not None
    assert run.attributes[names.RUN_ID] == result.run_id
    assert run.attributes[names.RUN_STATUS] == "completed"
    assert [parent_id(t) for t in turns] == [ids(run)[1]] * 2
    assert [parent_id(c) for c in chats] == [ids(t)[1] for t in turns]
    assert parent_id(tool) == ids(turns[0])[1]
    assert {ids(s)[0] for s in got} == {ids(run)[0]}  # one trace
    first = chats[0].attributes or {}
    assert first["gen_ai.request.model"] == "gpt-4o-mini"  # the agent's default model
    assert (first["gen_ai.usage.input_tokens"], first["gen_ai.usage.output_tokens"]) == (11, 3)
    reasons = [tuple((c.attributes or {})["gen_ai.response.finish_reasons"]) for c in chats]  # type: ignore[arg-type]
    assert reasons == [("tool_calls",), ("stop",)]
    tattrs = tool.attributes or {}
    assert (tattrs["gen_ai.tool.name"], tattrs[names.LANE]) == ("write", "execute")
    assert tattrs["process.exit.code"] == 0
    for span in got:  # the labels on every span; the prompt on none
        attrs = dict(span.attributes or {})
        assert attrs[names.TENANT] == "acme" and attrs[names.PRINCIPAL] == "user:7"
        assert attrs[names.TEMPLATE] == "tpl-1" and attrs[names.CORRELATION_ID] == "corr-9"
        assert attrs["gen_ai.conversation.id"] == "s-1"
        assert not any(PROMPT in str(v) for v in attrs.values())
    events = [e for t in turns for e in t.events if e.name == names.BUDGET_EVENT]
    kinds = [
        tuple((e.attributes or {}).get(k) for k in (names.BUDGET_CHECK, names.BUDGET_KIND))
        for e in events
    ]
    assert kinds == [("llm", "soft"), ("tool", "allow"), ("llm", "allow")]
    assert (events[0].attributes or {})[names.BUDGET_RESOURCE] == "tokens"


async def test_failed_llm_call_marks_chat_and_run_spans(
    scripted: Any, agent_for: Any, workspace: Path, spans: InMemorySpanExporter
) -> None:
    srv = await scripted([{"error": {"status": 400, "message": "bad request"}}])
    session = agent_for(srv).session(str(workspace), opts(session_id="s-2"))
    with pytest.raises(Exception, match="bad request"):
        await session.send_async("hi")
    got = spans.get_finished_spans()
    (run,) = named(got, "invoke_agent")
    (chat,) = named(got, "chat ")
    assert chat.status.status_code.name == "ERROR" and run.status.status_code.name == "ERROR"
    assert (run.attributes or {})[names.RUN_STATUS] == "failed"


async def test_resumed_run_continues_the_passivated_runs_trace(
    scripted: Any, agent_for: Any, workspace: Path, spans: InMemorySpanExporter
) -> None:
    srv = await scripted(
        [
            {"tool_calls": [{"name": "write", "arguments": {"file_path": "a", "content": "A"}}]},
            {"tool_calls": [{"name": "write", "arguments": {"file_path": "b", "content": "B"}}]},
            {"text": "finished"},
        ]
    )
    store = MemorySessionStore()
    first = agent_for(srv).session(str(workspace), opts(session_store=store, session_id="s-3"))
    pending: list[Any] = []

    async def passivate_after_round_one(event: dict[str, Any]) -> None:
        if event["turn"] == 1:
            deadline = int(time.time() * 1000) + 10_000
            pending.append(asyncio.ensure_future(first.passivate_async("node_drain", deadline)))

    first.register_hook("drain", "turn_end", passivate_after_round_one)
    with pytest.raises(RunPassivatedError) as info:
        await first.send_async("two rounds")
    await asyncio.gather(*pending)
    (old,) = named(spans.get_finished_spans(), "invoke_agent")
    assert (old.attributes or {})[names.RUN_STATUS] == "passivated"
    assert old.status.status_code.name == "UNSET"  # a passivation is not an error
    spans.clear()

    # Another process would load the store the same way: a new agent, the saved session.
    second = agent_for(srv).resume_session("s-3", opts(session_store=store))
    result = await second.resume_run_async(info.value.run_id)
    got = spans.get_finished_spans()
    (new,) = named(got, "invoke_agent")
    assert ids(new)[0] == ids(old)[0]  # the same trace
    assert parent_id(new) == ids(old)[1]  # a child of the passivated run
    attrs, old_attrs = new.attributes or {}, old.attributes or {}
    assert attrs[names.RUN_ID] == result.run_id
    assert attrs[names.RESUMED_FROM] == old_attrs[names.RUN_ID]
    assert {ids(s)[0] for s in got} == {ids(old)[0]}


async def test_a_run_started_in_a_callers_context_is_its_child(
    scripted: Any, agent_for: Any, workspace: Path, spans: InMemorySpanExporter
) -> None:
    """The front door (or a peer's call_peer span) hands a traceparent to the session pod's API,
    which makes it current (session_runtime.pod.http): the run joins the caller's trace."""
    srv = await scripted([{"text": "hi"}])
    session = agent_for(srv).session(str(workspace), opts(session_id="s-4"))
    caller = "00-" + "a" * 32 + "-" + "b" * 16 + "-01"
    with remote_parent({"traceparent": caller}):
        await session.send_async("hello")
    (run,) = named(spans.get_finished_spans(), "invoke_agent")
    assert (ids(run)[0], parent_id(run)) == (int("a" * 32, 16), int("b" * 16, 16))
