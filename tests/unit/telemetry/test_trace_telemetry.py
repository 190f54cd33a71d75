"""berth_telemetry: tracing only with an OTLP endpoint (OpenTelemetry's variables), the resource
from the environment, and JSON log lines that carry the current span's ids and bound labels."""

from __future__ import annotations

import io
import json
import logging

import pytest
import structlog
from opentelemetry import trace

from berth_telemetry import logs, tracing
from tests.trace_support import exporter


@pytest.mark.parametrize(
    ("env", "on"),
    [
        ({}, False),
        ({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://jaeger:4318"}, True),
        ({"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://jaeger:4318/v1/traces"}, True),
        ({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://j:4318", "OTEL_SDK_DISABLED": "true"}, False),
    ],
)
def test_enabled_only_with_an_endpoint(env: dict[str, str], on: bool) -> None:
    assert tracing.enabled(env) is on


def test_provider_resource_and_sampler_from_the_environment(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("OTEL_SERVICE_NAME", raising=False)
    monkeypatch.setenv("OTEL_RESOURCE_ATTRIBUTES", "deployment.environment=dev,team=infra")
    monkeypatch.setenv("OTEL_TRACES_SAMPLER", "traceidratio")
    monkeypatch.setenv("OTEL_TRACES_SAMPLER_ARG", "0.25")
    provider = tracing.build_provider("berth-worker", {"k8s.pod.name": "w-0"})
    attrs = provider.resource.attributes
    assert attrs["service.name"] == "berth-worker"
    assert (attrs["team"], attrs["k8s.pod.name"]) == ("infra", "w-0")
    assert "0.25" in provider.sampler.get_description()
    monkeypatch.setenv("OTEL_SERVICE_NAME", "mine")
    assert tracing.resource("berth-worker").attributes["service.name"] == "mine"
    provider.shutdown()


def test_inject_extract_round_trip() -> None:
    exporter()  # the SDK provider: spans have valid contexts
    with trace.get_tracer("t").start_as_current_span("parent") as span:
        carrier: dict[str, str] = {}
        tracing.inject(carrier)
    ctx = span.get_span_context()
    assert carrier["traceparent"].startswith(f"00-{ctx.trace_id:032x}-{ctx.span_id:016x}-")
    back = trace.get_current_span(tracing.extract(carrier)).get_span_context()
    assert (back.trace_id, back.span_id, back.is_remote) == (ctx.trace_id, ctx.span_id, True)
    assert not trace.get_current_span(tracing.extract({"traceparent": "junk"})).is_recording()
    assert tracing.traceparent(trace.INVALID_SPAN) == ""


def test_json_lines_carry_span_ids_and_bound_labels() -> None:
    exporter()
    root = logging.getLogger()
    saved = root.handlers[:], root.level
    out = io.StringIO()
    try:
        logs.configure("INFO", "json")
        root.handlers[0].stream = out  # type: ignore[attr-defined]
        structlog.contextvars.clear_contextvars()
        logs.bind(session="ns/s", epoch=3, run_id=None)
        with trace.get_tracer("t").start_as_current_span("work") as span:
            logging.getLogger("berth.x").info("did %s", "it")
        logging.getLogger("berth.x").warning("after")
    finally:
        structlog.contextvars.clear_contextvars()
        root.handlers[:], _ = saved
        root.setLevel(saved[1])
    first, second = (json.loads(line) for line in out.getvalue().splitlines())
    ctx = span.get_span_context()
    assert first["event"] == "did it" and first["logger"] == "berth.x"
    assert (first["trace_id"], first["span_id"]) == (f"{ctx.trace_id:032x}", f"{ctx.span_id:016x}")
    assert (first["session"], first["epoch"], first["level"]) == ("ns/s", 3, "info")
    assert "run_id" not in first and "trace_id" not in second
    out = io.StringIO()
    try:
        logs.configure("INFO", "xml")  # unknown: text, and a warning saying so
        root.handlers[0].stream = out  # type: ignore[attr-defined]
        logging.getLogger("berth.x").warning("plain")
    finally:
        root.handlers[:], _ = saved
        root.setLevel(saved[1])
    assert out.getvalue().rstrip().endswith("WARNING berth.x: plain")


def test_a_provider_that_cannot_start_leaves_the_program_untraced(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def broken(*_: object) -> None:
        raise ValueError("bad OTEL_* value")

    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:9")
    monkeypatch.setattr(tracing, "build_provider", broken)
    assert tracing.configure("berth-worker") is False
