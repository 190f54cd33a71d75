"""The session runtime's spans (OpenTelemetry; names in :mod:`berth_contract.tracing`).

Owned by ``session_runtime``; the agent loop (:class:`LoopTracing`), the Redis task transport
(:func:`tool_span`, carrying the tool call's context to the LaneWorker) and ``berth-worker``
(:func:`execution_span`) use it. The tree of one run::

    invoke_agent <session>             (the run; parent: the run it resumes, or the caller's)
      berth.turn                       (one model turn, with its tool round)
        chat <model>                   (one LLM request: gen_ai.* semantic conventions)
        execute_tool <tool>            (one tool call, with its lane)
          execute_tool <tool>          (on the LaneWorker: kind CONSUMER, another process)

Every span of the loop carries the session's identity labels and ``gen_ai.conversation.id``;
budget guard answers are events (:data:`berth_contract.tracing.BUDGET_EVENT`) on the span
current at the check. No prompt or completion text is ever recorded.
"""

from __future__ import annotations

import contextvars
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any

from opentelemetry import trace
from opentelemetry.trace import Span, SpanKind, Status, StatusCode

from berth_contract import tracing as names
from berth_telemetry.tracing import TRACEPARENT, TRACESTATE, extract, inject

tracer = trace.get_tracer("berth.session")

#: The open tool-call spans of the tool round in flight, by tool call id (set by the loop around
#: the executor, read by the task transport when it publishes a call to a LaneWorker).
_TOOL_SPANS: contextvars.ContextVar[Mapping[str, Span] | None] = contextvars.ContextVar(
    "berth_tool_spans", default=None
)

Quiet = tuple[type[BaseException], ...]


@contextmanager
def active(span: Span, quiet: Quiet = ()) -> Iterator[Span]:
    """Make ``span`` current for the block and end it after. An ``Exception`` leaving the block
    is recorded on it with status ERROR, unless it is one of ``quiet`` (a passivation stop: not
    a failure). Cancellation is never an error."""
    with trace.use_span(
        span, end_on_exit=True, record_exception=False, set_status_on_exception=False
    ):
        try:
            yield span
        except quiet:
            raise
        except Exception as exc:
            span.record_exception(exc)
            span.set_status(Status(StatusCode.ERROR, f"{type(exc).__name__}: {exc}"))
            raise


def tool_span(tool_call_id: str) -> Span | None:
    """The open span of tool call ``tool_call_id`` of the round in flight, or None."""
    spans = _TOOL_SPANS.get()
    return spans.get(tool_call_id) if spans is not None else None


class LoopTracing:
    """Span factory of one session's loop: ``session_id`` and the identity labels
    (``SessionOptions.identity()``) go on every span it starts."""

    def __init__(self, session_id: str, identity: dict[str, str | None]) -> None:
        self.attrs: dict[str, Any] = {
            "gen_ai.conversation.id": session_id,
            **names.identity_attributes(identity),
        }
        self.session_id = session_id

    def run(self, run_id: str, resumed_from: str | None = None, parent: str | None = None) -> Span:
        """A run's span (not yet current): a child of W3C ``parent`` (the traceparent of the run
        it resumes, or of the caller), else the root of a new trace."""
        attrs = {**self.attrs, "gen_ai.operation.name": "invoke_agent", names.RUN_ID: run_id}
        if resumed_from:
            attrs[names.RESUMED_FROM] = resumed_from
        context = extract({"traceparent": parent}) if parent else None
        return tracer.start_span(f"invoke_agent {self.session_id}", context, attributes=attrs)

    def turn(self, turn: int) -> Span:
        """The span of model turn ``turn`` (not yet current)."""
        return tracer.start_span("berth.turn", attributes={**self.attrs, names.TURN: turn})

    def llm(self, model: str) -> Span:
        """The span of one chat request to ``model`` (kind CLIENT, not yet current)."""
        attrs = {
            **self.attrs,
            "gen_ai.operation.name": "chat",
            "gen_ai.provider.name": "openai",
            "gen_ai.request.model": model,
        }
        return tracer.start_span(f"chat {model}", kind=SpanKind.CLIENT, attributes=attrs)

    @staticmethod
    def llm_done(span: Span, usage: Mapping[str, int], finish_reason: str | None) -> None:
        """Put a reply's token counts and finish reason on its chat span."""
        if not span.is_recording():
            return
        span.set_attribute("gen_ai.usage.input_tokens", int(usage.get("prompt_tokens", 0)))
        span.set_attribute("gen_ai.usage.output_tokens", int(usage.get("completion_tokens", 0)))
        if finish_reason:
            span.set_attribute("gen_ai.response.finish_reasons", [finish_reason])

    def tools(self, calls: list[tuple[str, str, str]]) -> dict[str, Span]:
        """Open spans, children of the current span, for tool calls ``(id, name, lane)``."""
        spans: dict[str, Span] = {}
        for call_id, name, lane in calls:
            attrs = {
                **self.attrs,
                "gen_ai.operation.name": "execute_tool",
                "gen_ai.tool.name": name,
                "gen_ai.tool.call.id": call_id,
                names.LANE: lane,
            }
            spans[call_id] = tracer.start_span(f"execute_tool {name}", attributes=attrs)
        return spans

    @staticmethod
    @contextmanager
    def round(spans: Mapping[str, Span]) -> Iterator[None]:
        """Make ``spans`` the round's tool spans (:func:`tool_span`) for the block; the ones
        still open after it (a cancelled round) are ended."""
        token = _TOOL_SPANS.set(spans)
        try:
            yield
        finally:
            _TOOL_SPANS.reset(token)
            for span in spans.values():
                if span.is_recording():
                    span.end()

    @staticmethod
    def tool_done(span: Span | None, exit_code: int, is_error: bool, worker: str | None) -> None:
        """End a tool call's span with its exit code (status ERROR for an error result)."""
        if span is None or not span.is_recording():
            return
        span.set_attribute("process.exit.code", exit_code)
        if worker:
            span.set_attribute(names.WORKER, worker)
        if is_error:
            span.set_status(Status(StatusCode.ERROR, f"tool result is an error (exit {exit_code})"))
        span.end()


def trace_fields(span: Span | None) -> dict[str, str]:
    """``{traceparent, tracestate?}`` of ``span`` (None: the current span) for a task message;
    empty when the span is not valid (tracing off)."""
    carrier: dict[str, str] = {}
    inject(carrier, span)
    return {k: carrier[k] for k in (TRACEPARENT, TRACESTATE) if carrier.get(k)}


def budget_event(check: str, kind: str, resource: str, reason: str, tool: str | None) -> None:
    """Record a budget guard's answer (``check``: ``llm``/``tool``; ``kind``:
    ``allow``/``soft``/``deny``) as an event on the current span."""
    span = trace.get_current_span()
    if not span.is_recording():
        return
    attrs = {names.BUDGET_CHECK: check, names.BUDGET_KIND: kind}
    if resource:
        attrs[names.BUDGET_RESOURCE] = resource
    if reason:
        attrs[names.REASON] = reason
    if tool:
        attrs["gen_ai.tool.name"] = tool
    span.add_event(names.BUDGET_EVENT, attrs)
