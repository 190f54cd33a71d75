"""``call_peer`` sends the W3C traceparent of its own tool-call span to the front door, so the
peer's run (a child of the front door's message span) is in the caller's trace."""

from __future__ import annotations

from aiohttp import web
from aiohttp.test_utils import TestServer

from berth_telemetry.tracing import traceparent
from session_runtime.pod.peer import peer_tool
from session_runtime.tools.base import ToolCall, ToolContext
from session_runtime.tracing import LoopTracing
from tests.trace_support import exporter

CTX = ToolContext("s", "/tmp", "run-1", 1)


async def test_call_peer_carries_its_spans_context() -> None:
    exporter()
    seen: list[str | None] = []

    async def post(request: web.Request) -> web.Response:
        seen.append(request.headers.get("traceparent"))
        return web.json_response({"state": "done", "resultText": "ok"})

    app = web.Application()
    app.router.add_post("/v1/sessions/{ns}/{name}/messages", post)
    tracing = LoopTracing("s", {})
    async with TestServer(app) as server:
        tool = peer_tool(str(server.make_url("/")), "team", "uid-a", "tok", None, 30)
        spans = tracing.tools([("c1", "call_peer", "execute")])
        with tracing.round(spans):
            result = await tool.run(
                ToolCall("c1", "call_peer", {"session": "b", "prompt": "q"}), CTX
            )
        outside = await tool.run(ToolCall("c2", "call_peer", {"session": "b", "prompt": "q"}), CTX)
    assert result.output == "ok" and outside.output == "ok"
    assert seen == [traceparent(spans["c1"]), None]
