"""A session page's tool calls per run (lane, start, duration, outcome) and its conversation
(masked, cut), read from the session pod's ``GET /v1/runs/{runId}/events`` through the pod
proxy of a small real apiserver (``ui_world``, whose answer is the runtime's own read); pages of
a long run collected across reads; a call that ends after it was first seen; the live stream; and
the trace and Grafana links, present only when configured.

(The same in Chromium, with screenshots: tests/unit/plugin/test_ui_pages_in_chromium.py.)
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator

import aiohttp
import pytest
from kubectl_berth.errors import PluginError
from kubectl_berth.ui.links import Links
from kubectl_berth.ui.pages import CALLS_SHOWN
from kubectl_berth.ui.serve import start

from tests.unit.plugin.ui_world import LEAKED, NS, World, apiserver

TRACES = 'https://traces.example/search?tags={"berth.session":"{session}","berth.run.id":"{runId}"}'
GRAFANA = "https://grafana.example/d/berth-overview/berth"


@pytest.fixture
async def view() -> AsyncIterator[tuple[str, World]]:
    world = World()
    with apiserver(world) as api:
        runner = await start(api, NS, 0, Links(TRACES, GRAFANA))
        try:
            yield f"http://127.0.0.1:{runner.addresses[0][1]}", world
        finally:
            await runner.cleanup()


async def page(base: str) -> str:
    async with aiohttp.ClientSession() as http, http.get(f"{base}/sessions/{NS}/demo") as resp:
        assert resp.status == 200
        return await resp.text()


def calls_of(html: str) -> list[str]:
    """The rows of run 2's calls table as ``name lane duration outcome``."""
    table = html[html.index('data-run-id="run-2"') :]
    table = table[: table.index("</table>")]
    rows = []
    for row in table.split("<tr data-lane=")[1:]:
        cells = [c.split("</td>")[0] for c in row.split("<td")[1:]]
        rows.append(" ".join(c.split(">", 1)[1] for c in cells[1:]))
    return rows


async def test_each_call_of_a_run_with_lane_duration_and_outcome(view: tuple[str, World]) -> None:
    base, _ = view
    html = await page(base)
    assert calls_of(html) == [
        "bash execute 1.240 s ok",
        "grep query 0.085 s ok",
        "bash execute 3.020 s error (exit 2)",
    ]


async def test_the_conversation_is_shown_masked(view: tuple[str, World]) -> None:
    base, _ = view
    html = await page(base)
    talk = html[html.index('id="conversation"') :]
    talk = talk[: talk.index("</section>")]
    assert LEAKED not in html and "OPENAI_API_KEY=[REDACTED]" in talk
    assert [r.split('"')[0] for r in talk.split('data-role="')[1:]] == [
        "system",
        "user",
        "assistant",
        "tool",
        "assistant",
    ]
    assert "bash({&#34;command&#34;: &#34;env&#34;})" in talk
    assert "messages 1 to 5 of 5" in talk


async def test_a_long_run_is_read_page_by_page_and_a_late_end_is_seen(
    view: tuple[str, World],
) -> None:
    base, world = view
    for i in range(247):
        world.add_tool_call(f"call_more_{i}", "read", 10, 0)
    world.start_call("call_slow", "bash")
    for _ in range(3):  # 100 calls a read
        html = await page(base)
    rows = calls_of(html)
    assert len(rows) == CALLS_SHOWN and rows[-1] == "bash execute  running"
    assert f"{250 + 1 - CALLS_SHOWN} earlier calls not shown" in html
    world.end_call("call_slow", "bash", 4500, 0)
    assert calls_of(await page(base))[-1] == "bash execute 4.500 s ok"


async def test_a_finished_run_read_to_its_end_is_not_asked_again(view: tuple[str, World]) -> None:
    base, world = view
    await page(base)
    await page(base)
    assert world.run_asks == 2  # running: asked at every read
    world.run_status = "completed"
    for _ in range(3):
        html = await page(base)
    assert world.run_asks == 3 and calls_of(html)[0] == "bash execute 1.240 s ok"
    assert "OPENAI_API_KEY=[REDACTED]" in html  # the conversation stays


async def test_a_new_tool_call_arrives_on_the_live_stream(view: tuple[str, World]) -> None:
    base, world = view
    async with (
        aiohttp.ClientSession() as http,
        http.get(f"{base}/live/sessions/{NS}/demo") as resp,
    ):
        await resp.content.readuntil(b"\n\n")
        world.add_tool_call("call_live", "glob", 42, 0)
        added = time.monotonic()
        seen = None
        while seen is None and time.monotonic() - added < 30:  # bounds a hang, times nothing
            line = await asyncio.wait_for(resp.content.readline(), 5)
            if line.startswith(b"data: "):
                part = json.loads(line[6:])
                if part["id"] == "calls" and "0.042 s" in part["html"]:
                    seen = time.monotonic() - added
    assert seen is not None, "the new tool call never reached the live stream"
    print(f"tool call on the live stream {seen:.2f} s after the runtime recorded it")


async def test_trace_and_grafana_links_when_configured(view: tuple[str, World]) -> None:
    base, _ = view
    html = await page(base)
    trace = "https://traces.example/search?tags={&#34;berth.session&#34;:&#34;team-a%2Fdemo&#34;"
    assert f'href="{trace},&#34;berth.run.id&#34;:&#34;run-2&#34;}}"' in html
    assert f'href="{GRAFANA}?var-namespace=team-a"' in html


async def test_no_link_without_configuration() -> None:
    with apiserver(World()) as api:
        runner = await start(api, NS, 0)
        try:
            html = await page(f"http://127.0.0.1:{runner.addresses[0][1]}")
        finally:
            await runner.cleanup()
    assert 'class="external"' not in html and "Grafana" not in html


@pytest.mark.parametrize("url", ["javascript:alert(1)", "file:///etc/passwd", "traces.example"])
def test_a_link_must_be_http(url: str) -> None:
    with pytest.raises(PluginError, match="must be an http"):
        Links(trace_url_template=url)
    with pytest.raises(PluginError, match="--grafana-url"):
        Links(grafana_url=url)


def test_the_ui_command_refuses_a_link_that_is_not_http_before_reading_the_cluster() -> None:
    from kubectl_berth import cli
    from typer.testing import CliRunner

    env = {"BERTH_UI_GRAFANA_URL": "javascript:alert(1)", "KUBECONFIG": "/nonexistent"}
    result = CliRunner().invoke(cli.app, ["ui", "--port", "0"], env=env)
    assert result.exit_code != 0
    assert "--grafana-url must be an http(s) URL" in result.output
    shown = CliRunner().invoke(cli.app, ["ui", "--help"], env={"COLUMNS": "100"}).output
    assert "--trace-url-template" in shown and "--grafana-url" in shown
