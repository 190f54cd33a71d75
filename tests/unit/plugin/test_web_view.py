"""``kubectl berth ui``'s server over HTTP, against a small real apiserver (``ui_world``): the
pages show the drained session's story, a new Event arrives on the live stream, actions show
and work only where RBAC allows, and cross-site or rebound requests are refused.

(The same in a real browser on the dev cluster: tests/e2e/test_ui_browser.py.)
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator

import aiohttp
import pytest
from kubectl_berth.ui.serve import start

from tests.unit.plugin.ui_world import NS, World, apiserver


@pytest.fixture
async def view() -> AsyncIterator[tuple[str, World]]:
    world = World()
    with apiserver(world) as api:
        runner = await start(api, NS, 0)
        try:
            yield f"http://127.0.0.1:{runner.addresses[0][1]}", world
        finally:
            await runner.cleanup()


async def get(url: str, **headers: str) -> tuple[int, str]:
    async with aiohttp.ClientSession() as http, http.get(url, headers=headers) as resp:
        return resp.status, await resp.text()


async def test_the_sessions_list_shows_phase_node_run_tokens_and_tenant(
    view: tuple[str, World],
) -> None:
    base, _ = view
    code, html = await get(f"{base}/sessions")
    assert code == 200
    for value in ("demo", "Running", "True (Running)", "node-b", "run-2", "1500", "acme"):
        assert value in html, value
    code, html = await get(f"{base}/sessions?phase=Failed")
    assert "demo</a>" not in html


async def test_the_session_page_tells_the_drain(view: tuple[str, World]) -> None:
    base, _ = view
    code, html = await get(f"{base}/sessions/{NS}/demo")
    assert code == 200
    runs = html[html.index('id="runs-table"') :]
    first, second = runs.index('data-run="1"'), runs.index('data-run="2"')
    assert 'data-node="node-a" data-reason="node_drain"' in runs[first:second]
    assert 'data-node="node-b"' in runs[second:]
    assert "3.0 s" in runs  # resumed 3 s after run 1 ended
    calls = html[html.index('id="calls-table"') :]
    assert 'data-lane="execute">4<' in calls
    assert "<svg" in html and "of a budget of 50000" in html


async def test_a_new_event_arrives_on_the_live_stream(view: tuple[str, World]) -> None:
    base, world = view
    async with (
        aiohttp.ClientSession() as http,
        http.get(f"{base}/live/sessions/{NS}/demo") as resp,
    ):
        assert resp.headers["Content-Type"].startswith("text/event-stream")
        await resp.content.readuntil(b"\n\n")  # the first parts
        world.add_event("Resumed", "resumed on node-b")
        added = time.monotonic()
        seen = None
        while seen is None and time.monotonic() - added < 30:  # bounds a hang, times nothing
            line = await asyncio.wait_for(resp.content.readline(), 5)
            if line.startswith(b"data: "):
                part = json.loads(line[6:])
                if part["id"] == "events" and "resumed on node-b" in part["html"]:
                    seen = time.monotonic() - added
    assert seen is not None, "the new Event never reached the live stream"
    print(f"event on the live stream {seen:.2f} s after it was recorded")


async def test_a_view_only_user_sees_no_action(view: tuple[str, World]) -> None:
    base, world = view
    world.allowed = False
    code, html = await get(f"{base}/sessions/{NS}/demo")
    assert code == 200 and "run-1" in html
    assert "Passivate…" not in html and "Suspend…" not in html and "Send a message…" not in html
    code, _ = await get(f"{base}/sessions/{NS}/demo/passivate")
    assert code == 403


async def test_an_action_is_confirmed_then_posted_same_origin(view: tuple[str, World]) -> None:
    base, world = view
    code, html = await get(f"{base}/sessions/{NS}/demo")
    assert "Suspend…" in html and "Passivate…" in html and "Send a message…" in html
    code, form = await get(f"{base}/sessions/{NS}/demo/suspend")
    assert code == 200
    token = form.split('name="csrf" value="')[1].split('"')[0]
    async with (
        aiohttp.ClientSession() as http,
        http.post(
            f"{base}/sessions/{NS}/demo/suspend",
            data={"csrf": token},
            headers={"Origin": base, "Sec-Fetch-Site": "same-origin"},
            allow_redirects=False,
        ) as resp,
    ):
        assert resp.status == 303, await resp.text()
        assert resp.headers["Location"].startswith(f"/sessions/{NS}/demo?said=")
    code, html = await get(base + "/sessions/team-a/demo?said=demo%3A+suspend+requested")
    assert '<p class="said">demo: suspend requested</p>' in html
    assert world.patches == [{"spec": {"suspend": True}}]


@pytest.mark.parametrize(
    ("headers", "with_token"),
    [
        ({"Origin": "http://evil.example"}, True),
        ({"Origin": "null"}, True),
        ({}, True),
        ({"Origin": "SELF", "Sec-Fetch-Site": "cross-site"}, True),
        ({"Origin": "SELF"}, False),
    ],
)
async def test_a_forged_cross_site_post_is_refused(
    view: tuple[str, World], headers: dict[str, str], with_token: bool
) -> None:
    base, world = view
    _, form = await get(f"{base}/sessions/{NS}/demo/passivate")
    token = form.split('name="csrf" value="')[1].split('"')[0] if with_token else "forged"
    sent = {k: (base if v == "SELF" else v) for k, v in headers.items()}
    async with (
        aiohttp.ClientSession() as http,
        http.post(
            f"{base}/sessions/{NS}/demo/passivate",
            data={"csrf": token},
            headers=sent,
            allow_redirects=False,
        ) as resp,
    ):
        assert resp.status == 403
        assert "cross-site request refused" in await resp.text()
    assert world.posts == [] and world.patches == []


async def test_a_rebound_host_name_is_refused(view: tuple[str, World]) -> None:
    base, _ = view
    port = base.rsplit(":", 1)[1]
    code, _ = await get(f"{base}/sessions", Host=f"attacker.example:{port}")
    assert code == 421


async def test_the_worker_page_shows_backlog_and_its_sessions(view: tuple[str, World]) -> None:
    base, _ = view
    await get(f"{base}/sessions/{NS}/demo")  # samples the pod's counters
    code, html = await get(f"{base}/workers/{NS}/exec-pool")
    assert code == 200
    assert "Backlog" in html and "<svg" in html
    assert f'href="/sessions/{NS}/demo"' in html and "execute" in html
