"""``kubectl berth`` against the front door: URLs, one-line replies, and the SSE reader over a
real HTTP stream."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from kubectl_berth.errors import PluginError
from kubectl_berth.front_door import (
    describe_message,
    gateway_message_url,
    message_events,
    sse_lines,
)

STREAM = (
    'event: message\ndata: {"messageId": "m-1", "state": "queued"}\n\n'
    'event: run\ndata: {"type": "tool_start", "name": "bash"}\n\n'
    'event: run\ndata: {"type": "text", "text": "hello"}\n\n'
    'event: message\ndata: {"messageId": "m-1", "state": "done", "resultText": "hi"}\n\n'
)


class Handler(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        if self.headers.get("X-Berth-Token") != "tok":
            self.send_response(401)
            self.end_headers()
            self.wfile.write(b'{"error": "unauthenticated"}')
            return
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.end_headers()
        for chunk in STREAM.split("\n\n")[:-1]:
            self.wfile.write((chunk + "\n\n").encode())
            self.wfile.flush()

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def server() -> Iterator[str]:
    srv = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=srv.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{srv.server_address[1]}"
    srv.shutdown()
    srv.server_close()


def test_urls_and_one_line_replies() -> None:
    assert gateway_message_url("http://gw:8083/", "team", "a") == (
        "http://gw:8083/v1/sessions/team/a/messages"
    )
    assert gateway_message_url("http://gw", "team", "a", "m-1").endswith("/messages/m-1")
    assert describe_message({"state": "done", "resultText": "42"}) == "42"
    assert describe_message({"messageId": "m", "state": "failed", "error": "x"}) == (
        "message m failed: x"
    )
    assert describe_message({"messageId": "m", "state": "queued"}) == (
        "message m is queued (no reply yet)"
    )
    assert sse_lines("run", "not json") == "run: not json"
    assert sse_lines("run", json.dumps({"type": "tool_end", "output": "ok"})) == "tool_end ok"


def test_the_event_stream_is_printed_line_by_line_until_it_ends(server: str) -> None:
    lines = list(message_events(f"{server}/v1/sessions/team/a/messages/m-1/events", "tok"))
    assert lines == [
        "[queued] message m-1 is queued (no reply yet)",
        "tool_start bash",
        "text hello",
        "[done] hi",
    ]
    with pytest.raises(PluginError, match="HTTP 401"):
        list(message_events(f"{server}/x", "wrong"))
