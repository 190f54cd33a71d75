"""One trace across real processes: ``berth-session`` with its execute lane on a ``berth-worker``
(Debian's ``redis-server``), both exporting over OTLP/HTTP (the real SDK and exporter, the
variables the chart sets) to a receiver in this test that decodes OpenTelemetry's protobuf. The
worker's execution span is a child of the session's tool-call span, in another process and
service, and the session's spans carry its identity labels."""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from berth_contract import tracing as names
from berth_contract.names import task_stream
from tests.integration.server.harness import bash, blocking_bash, pod_world, wait_for

Workers = pytest.importorskip("tests.integration.lanes.conftest").Workers

pytestmark = [pytest.mark.redis, pytest.mark.timeout(120)]


class Received:
    """Spans an OTLP/HTTP receiver got: dicts of service, name, ids (hex) and attributes."""

    def __init__(self) -> None:
        self.spans: list[dict[str, Any]] = []
        self.lock = threading.Lock()

    def add(self, body: bytes) -> None:
        request = ExportTraceServiceRequest.FromString(body)
        for rs in request.resource_spans:
            resource = {a.key: a.value for a in rs.resource.attributes}
            service = resource["service.name"].string_value
            for ss in rs.scope_spans:
                for span in ss.spans:
                    attrs = {a.key: _value(a.value) for a in span.attributes}
                    with self.lock:
                        self.spans.append(
                            {
                                "service": service,
                                "name": span.name,
                                "trace": span.trace_id.hex(),
                                "id": span.span_id.hex(),
                                "parent": span.parent_span_id.hex(),
                                "attrs": attrs,
                            }
                        )


def _value(v: Any) -> Any:
    kind = v.WhichOneof("value")
    return getattr(v, kind) if kind in ("string_value", "int_value", "bool_value") else None


@pytest.fixture
def otlp() -> Iterator[tuple[str, Received]]:
    received = Received()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            received.add(self.rfile.read(int(self.headers.get("Content-Length") or 0)))
            self.send_response(200)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *_: Any) -> None:
            return

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", received
    finally:
        server.shutdown()


def test_worker_span_is_the_session_tool_calls_child_across_processes(
    tmp_path: Path, redis_url: str, otlp: tuple[str, Received]
) -> None:
    endpoint, received = otlp
    tracing = {"OTEL_EXPORTER_OTLP_ENDPOINT": endpoint, "OTEL_BSP_SCHEDULE_DELAY": "100"}
    script = {"turns": [{"tool_calls": [bash("echo ran >> who.txt")]}, {"text": "done"}]}
    lanes = {
        "execute": {
            "mode": "external",
            "timeoutSeconds": 30,
            "laneWorker": {"name": "pool", "taskStream": task_stream("team-a", "pool")},
        }
    }
    with pod_world(tmp_path, script, lanes=lanes) as world:
        workers = Workers(redis_url, world.namespace, "pool", tmp_path)
        workers.start("worker-1", **tracing)
        try:
            pod = world.start(
                epoch=1,
                BERTH_REDIS_URL=redis_url,
                BERTH_WORKSPACE_ROOT=str(world.workspace),
                **tracing,
            )
            assert pod.wait_exit() == 0, pod.stderr() + workers.log("worker-1")
            wait_for("the worker's span", lambda: _named(received, "berth-worker", "execute_tool"))
        finally:
            workers.stop_all()
    (run,) = _named(received, "berth-session", "invoke_agent")
    (call,) = _named(received, "berth-session", "execute_tool bash")
    (remote,) = _named(received, "berth-worker", "execute_tool bash")
    assert remote["trace"] == call["trace"] == run["trace"]
    assert remote["parent"] == call["id"]
    assert remote["attrs"][names.SESSION] == "team-a/fix-bug"
    assert remote["attrs"][names.TENANT] == "acme" == call["attrs"][names.TENANT]
    assert call["attrs"][names.LANE] == "execute"
    assert {s["trace"] for s in received.spans if s["service"] == "berth-session"} == {run["trace"]}


def _named(received: Received, service: str, prefix: str) -> list[dict[str, Any]]:
    with received.lock:
        return [
            s for s in received.spans if s["service"] == service and s["name"].startswith(prefix)
        ]


def test_a_run_resumed_by_another_process_continues_the_passivated_runs_trace(
    tmp_path: Path, otlp: tuple[str, Received]
) -> None:
    """Epoch 1 is passivated mid-run (SIGTERM, as a drain's eviction sends); epoch 2, another
    process given TRACEPARENT by its placement, resumes the run: the resumed run is a child of
    the passivated run's span, one trace, and /v1/state told the operator that run's context."""
    endpoint, received = otlp
    tracing = {"OTEL_EXPORTER_OTLP_ENDPOINT": endpoint, "OTEL_BSP_SCHEDULE_DELAY": "100"}
    placement = "00-" + "ab" * 16 + "-" + "cd" * 8 + "-01"
    script = {
        "turns": [
            {"tool_calls": [blocking_bash("c1.txt")]},
            {"tool_calls": [bash("echo second >> c2.txt")]},
            {"text": "finished"},
        ]
    }
    with pod_world(tmp_path, script) as world:
        first = world.start(epoch=1, tag="a", TRACEPARENT=placement, **tracing)
        first.wait_ready()
        wait_for("the first tool to start", lambda: world.lines("c1.txt"))
        state = first.state()
        first.signal(signal.SIGTERM)
        first.wait_state(lambda s: s["state"] == "passivating", "passivating after SIGTERM")
        world.touch("go")
        assert first.wait_exit() == 0, first.stderr()
        second = world.start(epoch=2, resume_run_id=state["runId"], tag="b", **tracing)
        assert second.wait_exit() == 0, second.stderr()
        assert second.termination()["resultText"] == "finished"
    runs = {s["attrs"][names.RUN_ID]: s for s in _named(received, "berth-session", "invoke_agent")}
    old = runs[state["runId"]]
    (new,) = [s for s in runs.values() if s is not old]
    assert (old["trace"], old["parent"]) == ("ab" * 16, "cd" * 8)  # the placement's child
    assert state["traceparent"].startswith(f"00-{old['trace']}-{old['id']}-")
    assert (new["trace"], new["parent"]) == (old["trace"], old["id"])
    assert new["attrs"][names.RESUMED_FROM] == state["runId"]
    assert old["attrs"][names.RUN_STATUS] == "passivated"
