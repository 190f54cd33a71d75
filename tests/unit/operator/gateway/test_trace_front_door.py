"""The front door's span of a message (``berth.message``): a child of the request's W3C
``traceparent`` when it has one (a peer's ``call_peer`` span, any caller's), else a new trace;
its traceparent is kept with the message (the Redis hash) for the delivery to the pod."""

from __future__ import annotations

from typing import Any

from berth_operator.gateway.inbox import Message
from berth_operator.gateway.service import front_door_span
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from berth_contract import tracing as names
from tests.trace_support import exporter, ids, parent_id


class View:
    key = "team-a/peer"
    uid = "uid-peer"


class Caller:
    key = "team-a/caller"


def _spans() -> InMemorySpanExporter:
    exp = exporter()
    exp.clear()
    return exp


def test_message_span_is_a_child_of_the_callers() -> None:
    exp = _spans()
    caller = "00-" + "c" * 32 + "-" + "d" * 16 + "-01"
    kept = front_door_span({"traceparent": caller}, View(), Caller())  # type: ignore[arg-type]
    (span,) = exp.get_finished_spans()
    assert (ids(span)[0], parent_id(span)) == (int("c" * 32, 16), int("d" * 16, 16))
    attrs: Any = span.attributes
    assert attrs[names.SESSION] == "team-a/peer" and attrs["berth.peer.from"] == "team-a/caller"
    assert kept.startswith(f"00-{'c' * 32}-{ids(span)[1]:016x}-")
    message = Message(id="m", session="team-a/peer", prompt="p", traceparent=kept)
    raw = {k.encode(): v.encode() for k, v in message.fields().items()}
    assert Message.from_fields(raw).traceparent == kept


def test_without_a_traceparent_the_message_starts_a_trace() -> None:
    exp = _spans()
    front_door_span({"traceparent": "garbage"}, View(), None)  # type: ignore[arg-type]
    (span,) = exp.get_finished_spans()
    assert span.parent is None
