"""``GET /v1/runs/{runId}/events`` (berth_contract.runview): one run's tool calls by lane with
their times and outcomes, and its conversation masked and cut, served by the real pod API over a
real session that ran real tools against the scripted LLM server; paging; ids that could escape a
directory refused; the token required as on every other session route."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from aiohttp.test_utils import TestClient, TestServer

from berth_contract.options import parse_options
from berth_contract.runview import MAX_LIMIT, TEXT_LIMIT, RunEvents, run_events_path
from session_runtime import Agent, SessionOptions
from session_runtime.llm.scripted import ScriptedServer
from session_runtime.metrics import SessionMetrics
from session_runtime.pod.config import parse_env
from session_runtime.pod.http import make_app
from session_runtime.pod.lifecycle import SessionPod
from session_runtime.store.memory import MemorySessionStore
from tests.unit.runtime.pod.test_server_parts import env

TOKEN = "run-events-token-0123456789abcdef"
AUTH = {"X-Berth-Token": TOKEN}
SECRET = "sk-" + "A1b2C3d4E5f6G7h8I9j0K1l2"
GH_TOKEN = "ghp_" + "0123456789abcdefghijABCDEFGHIJ"
SCRIPT: list[dict[str, Any]] = [
    {
        "tool_calls": [
            {"name": "bash", "arguments": {"command": f"echo OPENAI_API_KEY={SECRET}"}},
            {"name": "read", "arguments": {"file_path": "notes.txt"}},
            {"name": "bash", "arguments": {"command": "head -c 5000 /dev/zero | tr '\\0' x"}},
            {"name": "bash", "arguments": {"command": "exit 3"}},
        ]
    },
    {"text": "done"},
    {"text": "second run's answer"},
]


@pytest.fixture
async def served(tmp_path: Path) -> AsyncIterator[tuple[TestClient[Any, Any], list[str]]]:
    """The pod API over a session that ran two runs: run 1 with four tool calls, run 2 text."""
    workspace = tmp_path / "ws"
    workspace.mkdir()
    (workspace / "notes.txt").write_text("remember the milk\n")
    srv = ScriptedServer(SCRIPT)
    await srv.start()
    agent = Agent.create({"providers": {"openai": {"base_url": srv.base_url, "api_key": "k"}}})
    opts = SessionOptions(
        session_id="s-view", model="openai/m", llm_backoff_ms=1, session_store=MemorySessionStore()
    )
    session = agent.session(str(workspace), opts)
    await session.send_async(f"fix the bug; my token is {GH_TOKEN}")
    await session.send_async("and now?")
    pod = SessionPod(
        parse_env(env(tmp_path)),
        parse_options({"prompt": "p", "model": "openai/m"}),
        SessionMetrics(),
    )
    pod.session = session
    client: TestClient[Any, Any] = TestClient(TestServer(make_app(pod, TOKEN.encode())))
    await client.start_server()
    try:
        yield client, [r["id"] for r in session.runs()]
    finally:
        await client.close()
        await agent.close_async()
        await srv.stop()


async def get(client: TestClient[Any, Any], path: str, headers: Any = None) -> tuple[int, Any]:
    resp = await client.get(path, headers=AUTH if headers is None else headers)
    body = await resp.json() if resp.content_type == "application/json" else await resp.text()
    return resp.status, body


async def test_tool_calls_by_lane_with_times_and_outcomes(
    served: tuple[TestClient[Any, Any], list[str]],
) -> None:
    client, (first, _) = served
    status, body = await get(client, run_events_path(first))
    assert status == 200, body
    view = RunEvents.model_validate(body)
    assert view.run_id == first and view.status == "completed"
    calls = view.tool_calls
    assert [(c.name, c.lane) for c in calls] == [
        ("bash", "execute"),
        ("read", "query"),
        ("bash", "execute"),
        ("bash", "execute"),
    ]
    assert [c.outcome for c in calls] == ["ok", "ok", "ok", "error"]
    assert [c.exit_code for c in calls] == [0, 0, 0, 3]
    for c in calls:
        assert c.started_ms is not None and c.ended_ms is not None
        assert c.duration_ms == c.ended_ms - c.started_ms >= 0
    assert view.next is None and view.events_retained == view.event_count > len(calls)


async def test_conversation_is_masked_and_cut_as_the_store_masks(
    served: tuple[TestClient[Any, Any], list[str]],
) -> None:
    client, (first, second) = served
    _, raw = await get(client, run_events_path(second))
    text = str(raw)
    assert SECRET not in text and GH_TOKEN not in text and "[REDACTED]" in text
    view = RunEvents.model_validate(raw)
    roles = [m.role for m in view.conversation]
    assert roles.count("tool") == 4 and roles[-1] == "assistant"
    assert view.conversation[-1].content == "second run's answer"
    long = next(m for m in view.conversation if m.role == "tool" and m.content.startswith("xxx"))
    assert long.truncated and len(long.content) == TEXT_LIMIT
    asked = next(m for m in view.conversation if m.tool_calls)
    assert [c.name for c in asked.tool_calls] == ["bash", "read", "bash", "bash"]
    assert asked.tool_calls[3].arguments == '{"command": "exit 3"}'
    assert view.messages_total == len(view.conversation) and view.messages_from == 0
    # Run 1 is not the last run: its conversation is its last checkpoint's, in the store.
    _, older = await get(client, run_events_path(first))
    old = RunEvents.model_validate(older)
    assert 0 < old.messages_total < view.messages_total
    assert all("second run" not in m.content for m in old.conversation)


async def test_pages_of_tool_calls_and_the_tail_of_the_conversation(
    served: tuple[TestClient[Any, Any], list[str]],
) -> None:
    client, (first, second) = served
    seen: list[str] = []
    after: int | None = None
    for _ in range(10):
        _, body = await get(client, run_events_path(first, after=after, limit=3))
        page = RunEvents.model_validate(body)
        seen += [c.id for c in page.tool_calls]
        assert len(page.conversation) <= 3
        if page.next is None:
            break
        after = page.next
    _, whole = await get(client, run_events_path(first))
    assert seen == [c.id for c in RunEvents.model_validate(whole).tool_calls] and len(seen) == 4
    _, tail = await get(client, run_events_path(second, limit=2))
    last = RunEvents.model_validate(tail)
    assert [m.index for m in last.conversation] == [
        last.messages_total - 2,
        last.messages_total - 1,
    ]


@pytest.mark.parametrize(
    "path",
    [
        "/v1/runs/..%2F..%2Fetc/events",
        "/v1/runs/%2E%2E/events",
        "/v1/runs/.hidden/events",
        "/v1/runs/a%5Cb/events",
        "/v1/runs/a%00b/events",
        "/v1/runs/" + "r" * 201 + "/events",
    ],
)
async def test_an_id_that_could_leave_a_directory_is_refused(
    served: tuple[TestClient[Any, Any], list[str]], path: str
) -> None:
    client, _ = served
    status, body = await get(client, path)
    assert status in (400, 404), body
    assert status == 404 or body["detail"] == "malformed run id"


@pytest.mark.parametrize("query", ["limit=0", f"limit={MAX_LIMIT + 1}", "limit=x", "after=y"])
async def test_bad_paging_is_400(
    served: tuple[TestClient[Any, Any], list[str]], query: str
) -> None:
    client, (first, _) = served
    status, body = await get(client, f"/v1/runs/{first}/events?{query}")
    assert status == 400 and body["error"] == "bad_request"


async def test_unknown_run_is_404_and_the_token_is_required(
    served: tuple[TestClient[Any, Any], list[str]],
) -> None:
    client, (first, _) = served
    assert (await get(client, run_events_path("run-nope")))[0] == 404
    assert (await get(client, run_events_path(first), headers={}))[0] == 401
    assert (await get(client, run_events_path(first), headers={"X-Berth-Token": "x"}))[0] == 403


def test_a_credential_across_the_cut_is_masked_before_it_is_cut() -> None:
    from session_runtime.pod.runview import masked

    text = "x" * (TEXT_LIMIT - 9) + " " + GH_TOKEN + " and more" * 2000
    shown, cut = masked(text)
    assert cut and len(shown) == TEXT_LIMIT
    assert shown.endswith("[REDACTE") and "ghp_" not in shown
