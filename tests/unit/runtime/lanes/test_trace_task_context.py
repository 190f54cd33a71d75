"""The W3C trace context a task carries to its LaneWorker: signed with the rest of the task, so a
forged or stripped one is refused like any tampering, and never the source of which session a
task belongs to (the worker's span and labels come from the MAC-checked ``session`` field)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from redis.asyncio import Redis

from berth_contract import tracing as names
from berth_contract.taskauth import derive_session_key, sign_fields, verify_fields
from berth_telemetry.tracing import traceparent
from session_runtime.transport import MalformedMessage, TaskMessage
from session_runtime.worker.lane import LaneWorker
from session_runtime.worker.settings import WorkerSettings
from session_runtime.worker.tasks import TaskRejected, execution_span
from tests.trace_support import exporter, ids, parent_id

MASTER = b"m" * 32
TASK = {
    "task_id": "task-1",
    "session": "team-a/s1",
    "session_uid": "uid-1",
    "epoch": "3",
    "run_id": "run-1",
    "tool_call_id": "call_1",
    "lane": "execute",
    "command_type": "bash",
    "payload": '{"command":"ls"}',
    "workspace": ".",
    "deadline_ms": "1700000000000",
    "reply_to": "berth:team-a:s:uid-1:results",
}


@pytest.fixture
def spans() -> Iterator[InMemorySpanExporter]:
    exp = exporter()
    exp.clear()
    yield exp
    exp.clear()


@pytest.fixture
def worker(tmp_path: Path) -> LaneWorker:
    key = tmp_path / "master"
    key.write_bytes(MASTER)
    settings = WorkerSettings.from_env(
        {
            "BERTH_REDIS_URL": "redis://127.0.0.1:1/0",
            "BERTH_NAMESPACE": "team-a",
            "BERTH_LANEWORKER": "pool",
            "POD_NAME": "pool-0",
            "BERTH_WORKSPACES_ROOT": str(tmp_path),
            "BERTH_TASK_MASTER_KEY_FILE": str(key),
        },
        [],
    )
    # a client that never connects: deriving a session's key does not reach Redis
    return LaneWorker(settings, Redis.from_url("redis://127.0.0.1:1/0"))


def _context(name: str) -> str:
    """The traceparent of a span of a fresh trace."""
    span = trace.get_tracer("test").start_span(name)
    span.end()
    return traceparent(span)


def test_a_signed_trace_context_is_part_of_the_mac(worker: LaneWorker, spans: Any) -> None:
    own, other = _context("tool call of s1"), _context("tool call of mallory")
    key = derive_session_key(MASTER, "team-a", "s1")
    signed = sign_fields(key, {**TASK, "traceparent": own, "labels": '{"tenant_id":"acme"}'})
    assert worker.session_key(signed) == key
    forged = {**signed, "traceparent": other}
    stripped = {k: v for k, v in signed.items() if k != "traceparent"}
    relabelled = {**signed, "labels": '{"tenant_id":"evil"}'}
    for tampered in (forged, stripped, relabelled):
        with pytest.raises(TaskRejected) as info:
            worker.session_key(tampered)
        assert info.value.reason == "mac"
    # A context added to a task signed without one is refused the same way.
    plain = sign_fields(key, TASK)
    with pytest.raises(TaskRejected):
        worker.session_key({**plain, "traceparent": own})
    # Another session's key never signs for s1, whatever trace context it carries.
    mallory = sign_fields(derive_session_key(MASTER, "team-a", "mallory"), dict(forged))
    assert not verify_fields(key, mallory)
    with pytest.raises(TaskRejected):
        worker.session_key(mallory)


def test_the_execution_span_names_the_tasks_session_not_the_contexts(spans: Any) -> None:
    tracer = trace.get_tracer("test")
    with tracer.start_as_current_span("tool call of another session") as foreign:
        foreign_parent = traceparent()
    task = TaskMessage.from_fields(
        {**TASK, "traceparent": foreign_parent, "labels": '{"tenant_id":"acme"}'}
    )
    with execution_span(task):
        pass
    (span,) = [s for s in spans.get_finished_spans() if s.name == "execute_tool bash"]
    attrs = span.attributes or {}
    assert attrs[names.SESSION] == "team-a/s1" and attrs[names.SESSION_UID] == "uid-1"
    assert (attrs[names.EPOCH], attrs[names.RUN_ID], attrs[names.TENANT]) == (3, "run-1", "acme")
    assert span.kind == trace.SpanKind.CONSUMER
    # the context only places the span in a trace: here, under the span it named
    assert ids(span)[0] == ids(foreign)[0] and parent_id(span) == ids(foreign)[1]  # type: ignore[arg-type]


def test_without_a_context_the_execution_span_starts_a_trace(spans: Any) -> None:
    with execution_span(TaskMessage.from_fields(TASK)):
        pass
    (span,) = spans.get_finished_spans()
    assert span.parent is None and names.TENANT not in (span.attributes or {})


@pytest.mark.parametrize(
    "bad",
    [
        {"traceparent": "00-xyz-1-01"},
        {"traceparent": "01-" + "a" * 32 + "-" + "b" * 16 + "-01"},
        {"labels": '{"session":"team-a/other"}'},
        {"labels": "[1]"},
    ],
)
def test_malformed_trace_fields_are_malformed_tasks(bad: dict[str, str]) -> None:
    with pytest.raises(MalformedMessage):
        TaskMessage.from_fields({**TASK, **bad})


def test_empty_trace_fields_stay_off_the_wire() -> None:
    """A task without tracing is the same stream entry (and MAC) as before the fields existed."""
    fields = TaskMessage.from_fields(TASK).to_fields()
    assert fields == TASK
    traced = TaskMessage.from_fields({**TASK, "labels": '{"principal":"u"}'}).to_fields()
    assert traced["labels"] == '{"principal":"u"}' and "traceparent" not in traced
