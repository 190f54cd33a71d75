"""Traces and logs of Berth's programs (operator, ``berth-session``, ``berth-worker``).

- :mod:`berth_telemetry.tracing`: the OpenTelemetry SDK, installed only when an OTLP endpoint is
  configured (``OTEL_EXPORTER_OTLP_ENDPOINT`` and OpenTelemetry's other standard variables), and
  the W3C trace-context carriers the programs pass between each other;
- :mod:`berth_telemetry.logs`: logging as JSON lines (structlog) or text, with trace and span ids
  and the bound labels (session, epoch, run id) on every record.

Both sides use it; it imports neither (import-linter keeps it so). Attribute names are
:mod:`berth_contract.tracing`'s.
"""
