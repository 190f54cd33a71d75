"""Host tools: ordering around the inner executor, failures as tool errors, and the
``call_peer`` tool against an in-process front door (real HTTP)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer

from berth_contract.services import SESSION_UID_HEADER
from session_runtime.pod.peer import peer_message_id, peer_tool
from session_runtime.tools.base import ToolCall, ToolContext, ToolResult
from session_runtime.tools.host import HostTool, HostToolExecutor

CTX = ToolContext(session_id="s", workspace="/tmp", run_id="run-1", turn=2)


class Inner:
    """Records the batches it is given; answers each call with its name."""

    def __init__(self) -> None:
        self.batches: list[list[str]] = []
        self.closed = False

    async def execute(
        self, calls: Sequence[ToolCall], ctx: ToolContext, on_result: Any
    ) -> list[ToolResult]:
        self.batches.append([c.id for c in calls])
        out = []
        for c in calls:
            res = ToolResult(c.id, c.name, f"inner {c.id}")
            await on_result(res)
            out.append(res)
        return out

    async def recover(self, call: ToolCall, ctx: ToolContext) -> ToolResult | None:
        return ToolResult(call.id, call.name, "recovered")

    def close(self) -> None:
        self.closed = True


def host(name: str, fail: bool = False) -> HostTool:
    async def run(call: ToolCall, ctx: ToolContext) -> ToolResult:
        if fail:
            raise RuntimeError("boom")
        return ToolResult(call.id, call.name, f"host {call.id}")

    return HostTool({"type": "function", "function": {"name": name}}, run)


async def test_host_calls_run_here_in_order_between_inner_batches() -> None:
    inner = Inner()
    ex = HostToolExecutor(inner, [host("ask")])  # type: ignore[arg-type]
    calls = [
        ToolCall("1", "bash", {}),
        ToolCall("2", "read", {}),
        ToolCall("3", "ask", {}),
        ToolCall("4", "bash", {}),
        ToolCall("5", "ask", {}),
    ]
    seen: list[str] = []

    async def on_result(res: ToolResult) -> None:
        seen.append(res.tool_call_id)

    results = await ex.execute(calls, CTX, on_result)
    assert [r.tool_call_id for r in results] == ["1", "2", "3", "4", "5"]
    assert [r.output for r in results][2] == "host 3"
    assert inner.batches == [["1", "2"], ["4"]]
    assert seen == ["1", "2", "3", "4", "5"]


async def test_a_failing_host_tool_is_an_error_result_and_recovers_nothing() -> None:
    ex = HostToolExecutor(Inner(), [host("ask", fail=True)])  # type: ignore[arg-type]

    async def on_result(res: ToolResult) -> None:
        pass

    [res] = await ex.execute([ToolCall("1", "ask", {})], CTX, on_result)
    assert res.is_error and "boom" in res.output
    assert await ex.recover(ToolCall("1", "ask", {}), CTX) is None
    assert (await ex.recover(ToolCall("2", "bash", {}), CTX)).output == "recovered"  # type: ignore[union-attr]
    with pytest.raises(ValueError, match="share a name"):
        HostToolExecutor(Inner(), [host("ask"), host("ask")])  # type: ignore[arg-type]


def test_peer_message_ids_are_stable_per_call_and_distinct_across_calls() -> None:
    one = peer_message_id("uid", CTX, ToolCall("c1", "call_peer", {}))
    assert one == peer_message_id("uid", CTX, ToolCall("c1", "call_peer", {"x": 1}))
    assert one != peer_message_id("uid", CTX, ToolCall("c2", "call_peer", {}))
    other_turn = ToolContext(session_id="s", workspace="/tmp", run_id="run-1", turn=3)
    assert one != peer_message_id("uid", other_turn, ToolCall("c1", "call_peer", {}))
    assert one.startswith("peer-") and len(one) == 45


async def test_call_peer_asks_the_front_door_as_this_session() -> None:
    seen: list[dict[str, Any]] = []
    replies = {
        "b": (200, {"state": "done", "resultText": "forty-two"}),
        "busy": (202, {"state": "queued"}),
        "bad": (500, {"state": "failed", "error": "x"}),
        "no": (403, {"error": "forbidden", "message": "spec.peers of team/a does not allow"}),
        "broken": (200, {"state": "failed", "error": "model error"}),
    }

    async def post(request: web.Request) -> web.Response:
        seen.append(
            {
                "path": request.path,
                "wait": request.query.get("waitSeconds"),
                "auth": request.headers.get("Authorization"),
                "uid": request.headers.get(SESSION_UID_HEADER),
                "body": await request.json(),
            }
        )
        status, body = replies[request.match_info["name"]]
        return web.json_response(body, status=status)

    app = web.Application()
    app.router.add_post("/v1/sessions/{ns}/{name}/messages", post)
    async with TestServer(app) as server:
        tool = peer_tool(str(server.make_url("/")), "team", "uid-a", "tok-a", "corr-1", 30)
        assert tool.name == "call_peer"

        async def ask(args: dict[str, Any], call_id: str = "c1") -> ToolResult:
            return await tool.run(ToolCall(call_id, "call_peer", args), CTX)

        done = await ask({"session": "b", "prompt": "q?", "timeout_seconds": 999})
        assert (done.is_error, done.output) == (False, "forty-two")
        assert seen[0] == {
            "path": "/v1/sessions/team/b/messages",
            "wait": "30",  # capped by maxWaitSeconds
            "auth": "Bearer tok-a",
            "uid": "uid-a",
            "body": {
                "prompt": "q?",
                "messageId": peer_message_id("uid-a", CTX, ToolCall("c1", "call_peer", {})),
                "correlationId": "corr-1",
            },
        }
        late = await ask({"session": "busy", "prompt": "q", "timeout_seconds": 5})
        assert late.is_error and "did not answer within 5 s" in late.output
        assert seen[-1]["wait"] == "5"
        refused = await ask({"session": "no", "prompt": "q"})
        assert refused.is_error and "call_peer refused: spec.peers" in refused.output
        failed = await ask({"session": "broken", "prompt": "q"})
        assert failed.is_error and "peer broken failed: model error" in failed.output
        assert (await ask({"session": "bad", "prompt": "q"})).is_error
        asked = len(seen)
        for bad in (
            {"prompt": "q"},
            {"session": "b", "prompt": ""},
            {"session": "b", "prompt": "q", "timeout_seconds": 0},
        ):
            assert (await ask(bad)).is_error
        assert len(seen) == asked  # bad arguments never reach the front door

    gone = peer_tool("http://127.0.0.1:9", "team", "uid-a", "tok-a", None, 5)
    res = await gone.run(ToolCall("c", "call_peer", {"session": "b", "prompt": "q"}), CTX)
    assert res.is_error and "front door did not answer" in res.output
