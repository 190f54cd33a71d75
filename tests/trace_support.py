"""Real spans for the tests: one process-wide OpenTelemetry SDK tracer provider whose spans go to
an ``InMemorySpanExporter`` (OpenTelemetry's own), installed on first use (the API allows one
global provider per process). :func:`finished_spans` fixtures clear it around each test."""

from __future__ import annotations

from collections.abc import Sequence

from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

_EXPORTER: InMemorySpanExporter | None = None


def exporter() -> InMemorySpanExporter:
    """The in-memory exporter of the process's provider (installed on the first call)."""
    global _EXPORTER
    if _EXPORTER is None:
        _EXPORTER = InMemorySpanExporter()
        provider = TracerProvider()
        provider.add_span_processor(SimpleSpanProcessor(_EXPORTER))
        trace.set_tracer_provider(provider)
        if trace.get_tracer_provider() is not provider:
            raise RuntimeError("another tracer provider was installed first")
    return _EXPORTER


def named(spans: Sequence[ReadableSpan], prefix: str) -> list[ReadableSpan]:
    """The spans whose name starts with ``prefix``, in end order."""
    return [s for s in spans if s.name.startswith(prefix)]


def parent_id(span: ReadableSpan) -> int | None:
    """The span id of ``span``'s parent, or None for a root."""
    return span.parent.span_id if span.parent is not None else None


def ids(span: ReadableSpan) -> tuple[int, int]:
    """(trace id, span id) of ``span``."""
    ctx = span.get_span_context()
    assert ctx is not None
    return ctx.trace_id, ctx.span_id
