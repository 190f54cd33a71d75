"""The OpenTelemetry tracer provider of a Berth program, and W3C trace-context carriers.

Off unless ``OTEL_EXPORTER_OTLP_ENDPOINT`` (or ``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT``) is set and
``OTEL_SDK_DISABLED`` is not ``true``: then spans go through a batch processor (``OTEL_BSP_*``) to
an OTLP/HTTP exporter (protobuf; the exporter reads the endpoint, ``_HEADERS``, ``_TIMEOUT`` and
``_CERTIFICATE`` variables itself). The sampler is the SDK's reading of ``OTEL_TRACES_SAMPLER``
and ``OTEL_TRACES_SAMPLER_ARG`` (default: parent-based, always on); the resource is the SDK's
(``OTEL_RESOURCE_ATTRIBUTES``, ``OTEL_SERVICE_NAME``) with the program's name as
``service.name`` when neither names one. All of this is OpenTelemetry's specification of the SDK's
environment variables; nothing here re-reads them.

Without a provider, OpenTelemetry's API hands out non-recording spans: the instrumented code runs
the same, at the cost of a few attribute look-ups.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator, Mapping, MutableMapping
from contextlib import contextmanager

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.sdk.resources import SERVICE_NAME, Resource
from opentelemetry.sdk.trace import SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from berth_contract import envvars

log = logging.getLogger(__name__)

TRACEPARENT = "traceparent"
TRACESTATE = "tracestate"
"""W3C Trace Context's header names, also the field names in Berth's messages that carry it."""

_W3C = TraceContextTextMapPropagator()


def enabled(environ: Mapping[str, str] | None = None) -> bool:
    """Whether ``environ`` (default: the process's) configures an OTLP trace endpoint."""
    env = os.environ if environ is None else environ
    if env.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return False
    return bool(env.get(envvars.OTEL_ENDPOINT) or env.get(envvars.OTEL_TRACES_ENDPOINT))


def resource(service_name: str, attributes: Mapping[str, str | int] | None = None) -> Resource:
    """The SDK's resource from the environment plus ``attributes`` (the program's own: pod,
    node, session), ``service.name`` defaulting to ``service_name`` (instead of the SDK's
    ``unknown_service``)."""
    detected = Resource.create().merge(Resource(dict(attributes or {})))
    if str(detected.attributes.get(SERVICE_NAME, "")).startswith("unknown_service"):
        return detected.merge(Resource({SERVICE_NAME: service_name}))
    return detected


def build_provider(
    service_name: str,
    attributes: Mapping[str, str | int] | None = None,
    processor: SpanProcessor | None = None,
) -> TracerProvider:
    """A tracer provider for ``service_name`` with resource ``attributes`` (module docstring)
    exporting through ``processor``, by default a batch processor over the OTLP/HTTP
    exporter."""
    provider = TracerProvider(resource=resource(service_name, attributes))
    if processor is None:
        protocol = os.environ.get("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf")
        if protocol != "http/protobuf":
            log.warning("OTLP protocol %r is not available; exporting with http/protobuf", protocol)
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

        processor = BatchSpanProcessor(OTLPSpanExporter())
    provider.add_span_processor(processor)
    return provider


def configure(service_name: str, attributes: Mapping[str, str | int | None] | None = None) -> bool:
    """Install the process's tracer provider when :func:`enabled`; returns whether it did.
    ``attributes`` (None values left out) go on its resource. Call once, early in ``main``.
    Never raises: a provider that cannot be built is logged and the program runs untraced."""
    if not enabled():
        return False
    attrs = {k: v for k, v in (attributes or {}).items() if v is not None}
    try:
        provider = build_provider(service_name, attrs)
    except Exception:
        log.warning("tracing is configured but cannot start; running untraced", exc_info=True)
        return False
    trace.set_tracer_provider(provider)
    log.info("exporting traces over OTLP as %s", service_name)
    return True


def flush(timeout_ms: int = 2000) -> None:
    """Export the spans still buffered (before a process ends without running ``atexit``)."""
    provider = trace.get_tracer_provider()
    if isinstance(provider, TracerProvider):
        provider.force_flush(timeout_ms)


def inject(carrier: MutableMapping[str, str], span: trace.Span | None = None) -> None:
    """Write ``span``'s context (default: the current span's) into ``carrier`` as W3C
    ``traceparent`` (and ``tracestate`` when it has one); nothing when the span is invalid."""
    ctx = trace.set_span_in_context(span) if span is not None else None
    _W3C.inject(carrier, context=ctx)


def extract(carrier: Mapping[str, str]) -> otel_context.Context:
    """The context of a W3C ``traceparent``/``tracestate`` in ``carrier`` (an empty context,
    i.e. a new trace, when it has none or a malformed one)."""
    return _W3C.extract(carrier)


@contextmanager
def remote_parent(carrier: Mapping[str, str]) -> Iterator[None]:
    """The W3C trace context in ``carrier`` (HTTP headers) current for the block: spans and
    asyncio tasks started in it are its children. Without one, no span is current."""
    token = otel_context.attach(extract(carrier))
    try:
        yield
    finally:
        otel_context.detach(token)


def traceparent(span: trace.Span | None = None) -> str:
    """``span``'s (default: the current span's) W3C ``traceparent``, or "" when it is invalid."""
    carrier: dict[str, str] = {}
    inject(carrier, span)
    return carrier.get(TRACEPARENT, "")
