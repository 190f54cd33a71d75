"""Logging of a Berth program: JSON lines (structlog) or plain text, on standard error.

``json``: every record of the standard ``logging`` module (Berth's modules and libraries alike)
is one JSON object per line, rendered by structlog's ``ProcessorFormatter``: ``timestamp`` (ISO
8601, UTC), ``level``, ``logger``, ``event`` (the message), ``trace_id``/``span_id`` (32/16 hex
digits of the current OpenTelemetry span, when one is recording or was propagated), the labels
bound with :func:`bind` (``session``, ``epoch``, ``run_id``: structlog's context variables, so a
label bound in an asyncio task holds for that task and the tasks it starts) and ``exception``
when there is one. ``text``: ``<time> <level> <logger>: <message>``, the programs' format before.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import MutableMapping
from typing import Any

import structlog
from opentelemetry import trace

from berth_contract import envvars

FORMATS = ("json", "text")
TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


def add_trace_ids(_logger: Any, _method: str, event: MutableMapping[str, Any]) -> Any:
    """structlog processor: the current span's ``trace_id`` and ``span_id`` (hex), if valid."""
    ctx = trace.get_current_span().get_span_context()
    if ctx.is_valid:
        event["trace_id"] = trace.format_trace_id(ctx.trace_id)
        event["span_id"] = trace.format_span_id(ctx.span_id)
    return event


def json_formatter() -> logging.Formatter:
    """The formatter of ``json`` logs (module docstring)."""
    chain: list[Any] = [
        structlog.contextvars.merge_contextvars,
        structlog.stdlib.add_log_level,
        structlog.stdlib.add_logger_name,
        add_trace_ids,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
    ]
    return structlog.stdlib.ProcessorFormatter(
        foreign_pre_chain=chain,
        processors=[
            structlog.stdlib.ProcessorFormatter.remove_processors_meta,
            structlog.processors.format_exc_info,
            structlog.processors.JSONRenderer(),
        ],
    )


def configure(level: str, fmt: str | None = None) -> None:
    """Send the root logger's records at ``level`` (a logging level name) to standard error in
    ``fmt`` (``json``/``text``; None: ``BERTH_LOG_FORMAT``, default ``text``). Another format
    is logged as a warning and ``text`` used: a log setting never stops a program."""
    import os

    fmt = (fmt or os.environ.get(envvars.LOG_FORMAT) or "text").strip().lower()
    unknown = fmt not in FORMATS
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(json_formatter() if fmt == "json" else logging.Formatter(TEXT_FORMAT))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    if unknown:
        logging.getLogger(__name__).warning(
            "%s must be one of %s, not %r: logging as text", envvars.LOG_FORMAT, FORMATS, fmt
        )


def bind(**labels: Any) -> None:
    """Put ``labels`` on every later record of this context (task); None values are left out."""
    structlog.contextvars.bind_contextvars(**{k: v for k, v in labels.items() if v is not None})
