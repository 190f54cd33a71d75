"""The operator's spans: one per placement, resume and passivation request it carries out.

Owned by ``berth_operator``; the handlers open them where the decision becomes a call (a pod's
create, ``POST /v1/passivate``). Names and attributes are :mod:`berth_contract.tracing`'s: the
session (``<namespace>/<name>`` and uid), the epoch, the node (the one a passivation moves the
session away from), the reason, and the session's identity labels. Without a tracer provider
(:mod:`berth_telemetry.tracing`) the spans do not record.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any

import structlog
from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.trace import Span, Status, StatusCode

from berth_contract import tracing as names
from berth_operator.api.agentsession import AgentSessionSpec
from berth_operator.api.common import SessionRef
from berth_telemetry.tracing import extract

tracer = trace.get_tracer("berth.operator")

PLACE = "place"
RESUME = "resume"
PASSIVATE = "passivate"


def identity_of(spec: AgentSessionSpec | None) -> dict[str, str | None]:
    """The session's identity labels (``spec.identity``), snake_case, as the runtime names them."""
    identity = spec.identity if spec is not None else None
    return identity.model_dump(by_alias=False) if identity is not None else {}


def decision_span(
    decision: str,
    ref: SessionRef,
    *,
    epoch: int | None,
    reason: str,
    node: str | None = None,
    identity: Mapping[str, str | None] | None = None,
    parent: str = "",
    **extra: Any,
) -> Span:
    """A started span ``berth.<decision>`` (``place``, ``resume``, ``passivate``) of session
    ``ref``, a child of W3C ``parent`` (the run it is about) when given, else the root of a new
    trace; ``extra`` attributes (None values left out) are added as given."""
    attrs: dict[str, Any] = {
        names.DECISION: decision,
        names.SESSION: ref.key,
        names.SESSION_UID: ref.uid,
        names.REASON: reason,
        **names.identity_attributes(dict(identity or {})),
    }
    if epoch is not None:
        attrs[names.EPOCH] = epoch
    if node:
        attrs[names.NODE] = node
    attrs.update({k: v for k, v in extra.items() if v is not None})
    context = extract({"traceparent": parent}) if parent else otel_context.Context()
    return tracer.start_span(f"berth.{decision}", context, attributes=attrs)


@contextmanager
def active(span: Span) -> Iterator[Span]:
    """``span`` current for the block and ended after it; an exception leaving the block is
    recorded on it (status ERROR). The block's log records carry the span's session and epoch
    (:mod:`berth_telemetry.logs`), besides its trace and span ids."""
    attrs = getattr(span, "attributes", None) or {}
    labels = {"session": attrs.get(names.SESSION), "epoch": attrs.get(names.EPOCH)}
    with (
        trace.use_span(span, end_on_exit=True, record_exception=False),
        structlog.contextvars.bound_contextvars(**{k: v for k, v in labels.items() if v}),
    ):
        try:
            yield span
        except Exception as exc:
            span.record_exception(exc)
            span.set_status(Status(StatusCode.ERROR, f"{type(exc).__name__}: {exc}"))
            raise
