"""The session API takes the caller's W3C ``traceparent`` (the front door's) as the current
context of an authenticated request's handler, so the run a message starts is its child; a
refused request runs no handler at all. Real aiohttp application in-process."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from aiohttp.test_utils import TestClient, TestServer
from opentelemetry import trace

from berth_contract.options import parse_options
from berth_telemetry.tracing import remote_parent, traceparent
from session_runtime.metrics import SessionMetrics
from session_runtime.pod.config import parse_env
from session_runtime.pod.http import make_app
from session_runtime.pod.lifecycle import SessionPod
from tests.trace_support import exporter
from tests.unit.runtime.pod.test_server_parts import env

TOKEN = "t" * 43


async def test_messages_handler_runs_in_the_callers_trace_context(tmp_path: Path) -> None:
    exporter()
    pod = SessionPod(
        parse_env(env(tmp_path)),
        parse_options({"prompt": "p", "model": "openai/m", "keepAlive": True}),
        SessionMetrics(),
    )
    seen: list[str] = []

    async def post_message(*_: Any) -> tuple[int, dict[str, Any]]:
        seen.append(traceparent())
        return 202, {"accepted": True}

    pod.post_message = post_message  # type: ignore[method-assign]
    caller = trace.get_tracer("test").start_span("front door")
    caller.end()
    sent = traceparent(caller)
    client: TestClient[Any, Any] = TestClient(TestServer(make_app(pod, TOKEN.encode())))
    await client.start_server()
    try:
        for headers in (
            {"Authorization": f"Bearer {TOKEN}", "traceparent": sent},
            {"Authorization": f"Bearer {TOKEN}"},
            {"Authorization": "Bearer wrong", "traceparent": sent},
        ):
            resp = await client.post("/v1/messages", json={"prompt": "hi"}, headers=headers)
            await resp.read()
    finally:
        await client.close()
    assert len(seen) == 2  # the refused request reached no handler
    assert seen[0] == sent  # the caller's context, exactly
    assert seen[1] == ""  # none given: none current


def test_remote_parent_restores_the_previous_context() -> None:
    exporter()
    with trace.get_tracer("test").start_as_current_span("outer") as outer:
        with remote_parent({"traceparent": "00-" + "1" * 32 + "-" + "2" * 16 + "-01"}):
            assert traceparent().startswith("00-" + "1" * 32 + "-" + "2" * 16)
        assert trace.get_current_span() is outer
