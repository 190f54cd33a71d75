"""The operator's decision spans (berth_operator.tracing), read back from OpenTelemetry's
in-memory exporter: a placement, a resume and a passivation request carry the session, epoch,
node, reason and identity labels; a repeated passivation request adds no span."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from berth_operator.errors import RuntimeUnreachable
from berth_operator.handlers.context import OperatorContext
from berth_operator.handlers.session_calls import passivate
from berth_operator.handlers.session_placement import create_pod
from berth_operator.reconcile.plan import CreatePod, PassivateCall
from berth_operator.settings import OperatorSettings
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from berth_contract import tracing as names
from tests.trace_support import exporter, ids, parent_id
from tests.unit.operator.fixtures import make_pod, make_session, observation

IDENTITY = {"tenantId": "acme", "principal": "user:7", "correlationId": "corr-1"}


@pytest.fixture
def spans() -> Iterator[InMemorySpanExporter]:
    exp = exporter()
    exp.clear()
    yield exp
    exp.clear()


class Kube:
    def __init__(self) -> None:
        self.created: list[str] = []
        self.env: dict[str, str] = {}

    async def list_pods(self, namespace: str, selector: str) -> list[dict[str, Any]]:
        return []

    async def create_pod(self, body: dict[str, Any]) -> None:
        self.created.append(body["metadata"]["name"])
        self.env = {e["name"]: e.get("value", "") for e in body["spec"]["containers"][0]["env"]}


class Runtime:
    def __init__(self, fail: bool = False) -> None:
        self.fail = fail
        self.calls: list[tuple[str, str]] = []

    async def passivate(self, ip: str, reason: str, deadline_ms: int, token: str | None) -> None:
        self.calls.append((ip, reason))
        if self.fail:
            raise RuntimeUnreachable("connection refused")


def _ctx(kube: Any = None, runtime: Any = None) -> OperatorContext:
    return OperatorContext(settings=OperatorSettings(), kube=kube or Kube(), runtime=runtime)


@pytest.mark.parametrize(("resume", "name"), [("run-1", "berth.resume"), (None, "berth.place")])
async def test_placement_and_resume_spans(
    spans: InMemorySpanExporter, resume: str | None, name: str
) -> None:
    session = make_session().with_spec(identity=IDENTITY)
    kube = Kube()
    create = CreatePod(epoch=3, reason="Passivated", resume_run_id=resume, avoid_nodes=("n-1",))
    assert await create_pod(_ctx(kube), observation(session), create) == ()
    assert kube.created == ["demo-e3"]
    (span,) = spans.get_finished_spans()
    attrs = span.attributes or {}
    assert span.name == name and attrs[names.DECISION] == name.removeprefix("berth.")
    assert (attrs[names.SESSION], attrs[names.EPOCH], attrs[names.REASON]) == (
        "ns/demo",
        3,
        "Passivated",
    )
    assert attrs[names.NODE] == "n-1"  # the node the session moves away from
    assert (attrs[names.TENANT], attrs[names.PRINCIPAL], attrs[names.CORRELATION_ID]) == (
        "acme",
        "user:7",
        "corr-1",
    )
    assert attrs.get(names.RUN_ID) == resume
    # the pod's first run is the placement's child (OpenTelemetry's TRACEPARENT carrier)
    ctx = span.get_span_context()
    assert kube.env["TRACEPARENT"].startswith(f"00-{ctx.trace_id:032x}-{ctx.span_id:016x}-")


async def test_passivation_span_once_per_request(spans: InMemorySpanExporter) -> None:
    runtime = Runtime()
    call = PassivateCall(
        "10.0.0.9",
        "node_drain",
        1_700_000_000_000,
        "",
        epoch=2,
        node="n-2",
        identity={"tenant_id": "acme"},
    )
    session = make_session()
    ref = observation(session).ref
    await passivate(_ctx(runtime=runtime), ref, call)
    await passivate(
        _ctx(runtime=runtime), ref, PassivateCall("10.0.0.9", "node_drain", 1, resend=True)
    )
    assert runtime.calls == [("10.0.0.9", "node_drain")] * 2
    (span,) = spans.get_finished_spans()
    attrs = span.attributes or {}
    assert span.name == "berth.passivate"
    assert (attrs[names.EPOCH], attrs[names.NODE], attrs[names.REASON]) == (2, "n-2", "node_drain")
    assert attrs[names.TENANT] == "acme" and attrs[names.SESSION] == "ns/demo"


async def test_passivation_and_its_resume_join_the_runs_trace(spans: InMemorySpanExporter) -> None:
    """The run's traceparent (its pod's /v1/state, in the passivate call) is the parent of the
    passivation's span and, remembered, of the placement that resumes the run."""
    run = "00-" + "e" * 32 + "-" + "f" * 16 + "-01"
    ctx = _ctx(Kube(), Runtime())
    session = make_session()
    obs = observation(session)
    call = PassivateCall("10.0.0.9", "node_drain", 1, "", epoch=2, node="n-2", run_trace=run)
    await passivate(ctx, obs.ref, call)
    create = CreatePod(epoch=3, reason="Passivated", resume_run_id="run-1", avoid_nodes=("n-2",))
    await create_pod(ctx, obs, create)
    await create_pod(ctx, obs, CreatePod(epoch=4, reason="PodCrashed", resume_run_id=None))
    passivated, resumed, placed = spans.get_finished_spans()
    assert (passivated.name, resumed.name, placed.name) == (
        "berth.passivate",
        "berth.resume",
        "berth.place",
    )
    for span in (passivated, resumed):
        assert (ids(span)[0], parent_id(span)) == (int("e" * 32, 16), int("f" * 16, 16))
    assert placed.parent is None  # a placement that resumes nothing starts its own trace


def test_the_passivate_decision_carries_the_runs_trace_node_and_labels() -> None:
    from berth_operator.reconcile.session import decide

    from tests.unit.operator.handlers.test_passivation import (
        DRAIN,
        SETTINGS,
        _fields,
        running_session,
    )

    run = "00-" + "1" * 32 + "-" + "2" * 16 + "-01"
    session = running_session().with_status(epoch=1, podName="demo-e1", podUid="pod-uid-1")
    session = session.with_spec(identity=IDENTITY)
    state = {"state": "running", "runId": "run-1", "turn": 2, "traceparent": run}
    obs = observation(session, make_pod(1).on("proc-a").running(), state=state)
    obs = type(obs)(**{**_fields(obs), "node_disruptions": {"proc-a": DRAIN}})
    call = decide(obs, SETTINGS).passivate
    assert call is not None
    assert (call.run_trace, call.node, call.epoch) == (run, "proc-a", 1)
    assert call.identity["tenant_id"] == "acme"
