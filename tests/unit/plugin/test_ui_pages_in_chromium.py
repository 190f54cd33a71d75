"""``kubectl berth ui`` in a real browser without a cluster: Debian's Chromium (driven by
Selenium) on the view served over the web view's test apiserver (``ui_world``: a session drained
from node-a onto node-b). The same checks on the dev cluster, with a real drain:
tests/e2e/test_ui_browser.py.

Asserted: the session page shows run 1 on node-a passivated for ``node_drain``, run 2 on node-b
and tool calls on the execute lane, each of run 2's calls with its lane, duration and outcome, and
the conversation with the leaked credential masked; a new Event and a new tool call show on the
open page (live, no reload); a trace and a Grafana link are offered (configured); a user
whose access reviews say no sees the pages without actions; another origin's auto-submitted
form is refused. Writes the three pages' screenshots to docs/ (docs/ui.md) and prints the live
delay and the page weight.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import AsyncIterator, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from kubectl_berth.ui.links import Links
from kubectl_berth.ui.serve import start

from tests.unit.plugin.ui_world import LEAKED, NS, World, apiserver

ROOT = Path(__file__).resolve().parents[3]
CHROMIUM = Path("/usr/bin/chromium")
CHROMEDRIVER = Path("/usr/bin/chromedriver")

pytestmark = pytest.mark.skipif(
    not (CHROMIUM.exists() and CHROMEDRIVER.exists()),
    reason="Debian's chromium and chromium-driver are not installed (hack/host-packages.sh)",
)


@pytest.fixture
def driver() -> Iterator[Any]:
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    opts = webdriver.ChromeOptions()
    opts.binary_location = str(CHROMIUM)
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--window-size=1200,1000"):
        opts.add_argument(arg)
    browser = webdriver.Chrome(service=Service(str(CHROMEDRIVER)), options=opts)
    try:
        yield browser
    finally:
        browser.quit()


@pytest.fixture
async def view() -> AsyncIterator[tuple[str, World, str]]:
    """The view of a user who may act, its world, and the view of one whose reviews say no."""
    world, viewers = World(), World(allowed=False)
    world.add_event("Passivated", "node_drain: node node-a is draining; checkpointed at turn 3")
    with apiserver(world) as api, apiserver(viewers) as view_api:
        links = Links(
            "https://traces.example/trace?session={session}", "https://grafana.example/d/b"
        )
        runner, view_runner = await start(api, NS, 0, links), await start(view_api, NS, 0)
        try:
            yield (
                f"127.0.0.1:{runner.addresses[0][1]}",
                world,
                f"127.0.0.1:{view_runner.addresses[0][1]}",
            )
        finally:
            await runner.cleanup()
            await view_runner.cleanup()


def until(what: str, check: Any, cap: float = 20.0) -> Any:
    """Poll ``check`` (run in this thread) until truthy; AssertionError after ``cap`` s."""
    deadline = time.monotonic() + cap
    while time.monotonic() < deadline:
        if got := check():
            return got
        time.sleep(0.05)
    raise AssertionError(f"not seen in {cap}s: {what}")


def text_of(driver: Any, element_id: str) -> str:
    found: str = driver.execute_script(
        "var e = document.getElementById(arguments[0]); return e ? e.innerText : '';", element_id
    )
    return found


def runs_on_page(driver: Any) -> list[list[str]]:
    rows: list[list[str]] = driver.execute_script(
        "return Array.from(document.querySelectorAll('#runs-table tr[data-run]'))"
        ".map(function (r) { return [r.dataset.node, r.dataset.reason]; });"
    )
    return rows


def calls_on_page(driver: Any) -> list[list[str]]:
    rows: list[list[str]] = driver.execute_script(
        "return Array.from(document.querySelectorAll('table.calls-of-run tr[data-lane]'))"
        ".map(function (r) { return Array.from(r.cells).slice(1).map(function (c) {"
        " return c.innerText; }); });"
    )
    return rows


def forging_site(target: str) -> ThreadingHTTPServer:
    """Another origin whose page auto-submits a POST to ``target`` with a forged token."""
    page = (
        f'<form id="f" method="post" action="{target}"><input name="csrf" value="forged">'
        "</form><script>document.getElementById('f').submit()</script>"
    ).encode()

    class Evil(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(200)
            self.send_header("Content-Type", "text/html")
            self.send_header("Content-Length", str(len(page)))
            self.end_headers()
            self.wfile.write(page)

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Evil)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


async def test_ui_pages_live_guarded_and_shot(driver: Any, view: tuple[str, World, str]) -> None:
    await asyncio.to_thread(in_browser, driver, *view)


def in_browser(driver: Any, host: str, world: World, viewer_host: str) -> None:
    driver.get(f"http://{host}/sessions/{NS}/demo")
    until("the live stream open", lambda: driver.find_element("tag name", "body").get_attribute(
        "data-live-state") == "open")  # fmt: skip
    runs = runs_on_page(driver)
    assert runs[0] == ["node-a", "node_drain"] and runs[1][0] == "node-b", runs
    assert "execute" in text_of(driver, "calls") and "4" in text_of(driver, "calls")
    assert "Passivate…" in text_of(driver, "actions")  # this user may act
    assert calls_on_page(driver) == [
        ["bash", "execute", "1.240 s", "ok"],
        ["grep", "query", "0.085 s", "ok"],
        ["bash", "execute", "3.020 s", "error (exit 2)"],
    ]
    talk = text_of(driver, "conversation")
    assert "OPENAI_API_KEY=[REDACTED]" in talk and LEAKED not in driver.page_source
    assert "Trace" in text_of(driver, "actions") and "Grafana" in text_of(driver, "actions")
    weight: int = driver.execute_script(
        "return performance.getEntriesByType('navigation').concat("
        "performance.getEntriesByType('resource'))"
        ".reduce(function (s, e) { return s + (e.transferSize || e.encodedBodySize || 0); }, 0);"
    )
    print(f"\nsession page weight: {weight / 1024:.1f} KiB")

    world.add_event("Resumed", "resumed on node-b after 3.0 s")
    added = time.monotonic()
    until(
        "the new Event on the open page", lambda: "resumed on node-b" in text_of(driver, "events")
    )
    print(f"live-update delay (Event recorded to shown): {time.monotonic() - added:.2f}s")
    world.add_tool_call("call_live", "glob", 42, 0)
    added = time.monotonic()
    until("the new tool call on the open page", lambda: "0.042 s" in text_of(driver, "calls"))
    print(f"live-update delay (tool call recorded to shown): {time.monotonic() - added:.2f}s")
    tall: int = driver.execute_script("return document.documentElement.scrollHeight;")
    driver.set_window_size(1200, min(tall + 140, 4000))  # the whole page: calls, conversation
    driver.save_screenshot(str(ROOT / "docs" / "ui-session.png"))
    driver.set_window_size(1200, 1000)
    driver.get(f"http://{host}/sessions")
    driver.save_screenshot(str(ROOT / "docs" / "ui-sessions.png"))
    driver.get(f"http://{host}/workers/{NS}/exec-pool")
    time.sleep(1.5)  # a few samples for the chart
    driver.save_screenshot(str(ROOT / "docs" / "ui-worker.png"))

    evil = forging_site(f"http://{host}/sessions/{NS}/demo/passivate")
    try:
        driver.get(f"http://127.0.0.1:{evil.server_address[1]}/")
        until("the refusal", lambda: "cross-site request refused" in driver.page_source)
    finally:
        evil.shutdown()
        evil.server_close()
    assert world.posts == [] and world.patches == []

    driver.get(f"http://{viewer_host}/sessions/{NS}/demo")
    assert "node_drain" in text_of(driver, "runs")
    actions = text_of(driver, "actions")
    assert not any(label in actions for label in ("Send", "Passivate", "Suspend", "Resume"))
