"""kubectl-berth: pure helpers as tables, and send/passivate against a real local HTTP server.

The Kubernetes read is replaced by a fixed object (``connect`` is the plugin's seam to the API;
tests/integration/chart/ runs the plugin against the real apiserver and a real session pod).
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
from berth_operator import plugin
from berth_operator.errors import NotFound
from rich.console import Console
from typer.testing import CliRunner

NOW = datetime(2026, 11, 21, 12, 0, 0, tzinfo=UTC)


def session(**status: Any) -> dict[str, Any]:
    return {
        "metadata": {"name": "demo", "namespace": "ns"},
        "spec": {
            "prompt": "p",
            "model": "openai/x",
            "keepAlive": True,
            "budget": {"maxTotalTokens": 5000},
        },
        "status": {
            "phase": "Running",
            "podName": "demo-e2",
            "podIP": "127.0.0.1",
            "nodeName": "proc-a",
            "epoch": 2,
            "runId": "run-2",
            "conditions": [
                {
                    "type": "Ready",
                    "status": "True",
                    "reason": "Running",
                    "message": "",
                    "lastTransitionTime": "2026-11-21T11:58:00Z",
                },
                {
                    "type": "Passivated",
                    "status": "False",
                    "reason": "Resumed",
                    "message": "resumed",
                    "lastTransitionTime": "2026-11-21T11:00:00Z",
                },
            ],
            "runs": [
                {
                    "runId": "run-1",
                    "podName": "demo-e1",
                    "nodeName": "proc-b",
                    "outcome": "passivated",
                    "reason": "node_drain",
                    "startedAt": "2026-11-21T10:00:00Z",
                    "endedAt": "2026-11-21T11:00:00Z",
                },
                {
                    "runId": "run-2",
                    "resumedFrom": "run-1",
                    "podName": "demo-e2",
                    "nodeName": "proc-a",
                    "outcome": "running",
                    "startedAt": "2026-11-21T11:00:05Z",
                },
            ],
            "checkpoint": {"runId": "run-2", "turn": 7, "toolCallsCount": 12},
            "usage": {"promptTokens": 1200, "completionTokens": 300, "totalTokens": 1500},
            "passivations": 1,
            **status,
        },
    }


@pytest.mark.parametrize(
    ("delta", "text"),
    [
        (None, "-"),
        (timedelta(seconds=5), "5s"),
        (timedelta(minutes=3), "3m"),
        (timedelta(hours=2, minutes=5), "2h"),
        (timedelta(days=3), "3d"),
        (timedelta(seconds=-5), "0s"),
    ],
)
def test_age(delta: timedelta | None, text: str) -> None:
    assert plugin.age(None if delta is None else NOW - delta, NOW) == text


def render_tables(body: dict[str, Any]) -> str:
    console = Console(width=200, record=True)
    for table in plugin.status_tables(body, NOW):
        console.print(table)
    return console.export_text()


def test_status_tables_show_conditions_lineage_and_usage() -> None:
    text = render_tables(session())
    for needle in (
        "AgentSession ns/demo",
        "Running",
        "demo-e2",
        "proc-a",
        "run-2",
        "Ready",
        "Passivated",
        "Resumed",
        "2m",
        "run-1",
        "node_drain",
        "passivated",
        "1200",
        "300",
        "1500",
        "5000",
        "12",
    ):
        assert needle in text, needle
    lineage = text[text.index("Runs (oldest first)") :]
    assert lineage.index("run-1") < lineage.index("run-2")


def test_status_tables_show_the_pods_image_when_known() -> None:
    body = session()
    assert "image " not in render_tables(body)
    body["status"]["image"] = "berth.dev.local/berth:1.2.3"
    assert "image berth.dev.local/berth:1.2.3" in render_tables(body)


def test_status_tables_of_a_new_session_and_last_error() -> None:
    body = {"metadata": {"name": "new", "namespace": "ns"}, "spec": {}, "status": {}}
    text = render_tables(body)
    assert "AgentSession ns/new" in text and "Last error" not in text
    text = render_tables(session(lastError="LLM said no"))
    assert "Last error" in text and "LLM said no" in text


def test_malformed_status_is_a_plugin_error() -> None:
    with pytest.raises(plugin.PluginError, match="unexpected AgentSession status"):
        plugin.parse_status({"status": {"conditions": [{"type": "Ready"}]}})


@pytest.mark.parametrize(
    ("status", "override", "url"),
    [
        ({"podIP": "127.0.0.9"}, None, "http://127.0.0.9:8080"),
        ({"podIP": "fd00::1"}, None, "http://[fd00::1]:8080"),
        ({}, "http://localhost:18080/", "http://localhost:18080"),
    ],
)
def test_session_endpoint(status: dict[str, Any], override: str | None, url: str) -> None:
    assert plugin.session_endpoint({"status": status}, override) == url


def test_session_endpoint_without_pod() -> None:
    with pytest.raises(plugin.PluginError, match="has no running pod \\(phase Passivated\\)"):
        plugin.session_endpoint(
            {"metadata": {"name": "x"}, "status": {"phase": "Passivated"}}, None
        )


@pytest.mark.parametrize(
    ("spec", "flag", "ms"),
    [
        ({}, None, 120_000),
        ({"passivation": {"deadlineSeconds": 30}}, None, 30_000),
        ({"passivation": {"deadlineSeconds": 30}}, 5, 5_000),
    ],
)
def test_passivate_body(spec: dict[str, Any], flag: int | None, ms: int) -> None:
    now = 1_790_000_000_000  # deadlineMs is an epoch time, not a duration
    body = plugin.passivate_body({"spec": spec}, flag, now)
    assert body == {"reason": "manual", "deadlineMs": now + ms}


# --- the CLI against a real HTTP server ---------------------------------------------------------


class Recorder(BaseHTTPRequestHandler):
    calls: list[tuple[str, dict[str, Any]]] = []
    tokens: list[str | None] = []
    answer: tuple[int, dict[str, Any]] = (202, {"accepted": True})

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        Recorder.calls.append((self.path, body))
        Recorder.tokens.append(self.headers.get("X-Berth-Token"))
        code, answer = Recorder.answer
        data = json.dumps(answer).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def pod_api() -> Iterator[str]:
    Recorder.calls = []
    Recorder.tokens = []
    Recorder.answer = (202, {"accepted": True})
    server = ThreadingHTTPServer(("127.0.0.1", 0), Recorder)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


class FixedClient:
    def __init__(self, body: dict[str, Any] | None) -> None:
        self.body = body
        self.namespace = "ns"

    def get_session(self, name: str) -> dict[str, Any]:
        if self.body is None:
            raise NotFound(f"agentsession ns/{name} not found", status=404)
        return self.body

    def session_token(self, name: str) -> str:
        return f"token-of-{name}"


def use(monkeypatch: pytest.MonkeyPatch, body: dict[str, Any] | None) -> None:
    monkeypatch.setattr(plugin, "connect", lambda **_: FixedClient(body))


def test_send_posts_the_prompt(monkeypatch: pytest.MonkeyPatch, pod_api: str) -> None:
    use(monkeypatch, session())
    result = CliRunner().invoke(plugin.app, ["send", "demo", "add tests", "--endpoint", pod_api])
    assert result.exit_code == 0, result.output
    assert Recorder.calls == [("/v1/messages", {"prompt": "add tests"})]
    assert Recorder.tokens == ["token-of-demo"]  # the session's API token, proxy-safe header


def test_send_refuses_a_session_without_keepalive(
    monkeypatch: pytest.MonkeyPatch, pod_api: str
) -> None:
    body = session()
    body["spec"]["keepAlive"] = False
    use(monkeypatch, body)
    result = CliRunner().invoke(plugin.app, ["send", "demo", "x", "--endpoint", pod_api])
    assert result.exit_code == 1
    assert "not keepAlive" in result.output
    assert Recorder.calls == []


def test_send_reports_the_pods_refusal(monkeypatch: pytest.MonkeyPatch, pod_api: str) -> None:
    use(monkeypatch, session())
    Recorder.answer = (409, {"error": "session is busy"})
    result = CliRunner().invoke(plugin.app, ["send", "demo", "x", "--endpoint", pod_api])
    assert result.exit_code == 1
    assert "session is busy" in result.output


def test_passivate_posts_reason_and_deadline(monkeypatch: pytest.MonkeyPatch, pod_api: str) -> None:
    use(monkeypatch, session())
    result = CliRunner().invoke(
        plugin.app, ["passivate", "demo", "--endpoint", pod_api, "--deadline-seconds", "9"]
    )
    after = int(time.time() * 1000)
    assert result.exit_code == 0, result.output
    [(path, sent)] = Recorder.calls
    assert path == "/v1/passivate" and sent["reason"] == "manual"
    assert after + 9000 - 5000 <= sent["deadlineMs"] <= after + 9000  # epoch ms, 9 s from now
    assert "deadline in 9s" in result.output


def test_unreachable_pod_is_a_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    use(monkeypatch, session())
    result = CliRunner().invoke(
        plugin.app, ["passivate", "demo", "--endpoint", "http://127.0.0.1:9"]
    )
    assert result.exit_code == 1
    assert "did not answer" in result.output


def test_status_of_a_missing_session(monkeypatch: pytest.MonkeyPatch) -> None:
    use(monkeypatch, None)
    result = CliRunner().invoke(plugin.app, ["status", "nope"])
    assert result.exit_code == 1
    assert "agentsession ns/nope not found" in result.output


def test_status_json(monkeypatch: pytest.MonkeyPatch) -> None:
    use(monkeypatch, session())
    result = CliRunner().invoke(plugin.app, ["status", "demo", "-o", "json"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.output)["podName"] == "demo-e2"


def test_plugin_does_not_import_kopf() -> None:
    import subprocess
    import sys

    code = "import sys, berth_operator.plugin; print('kopf' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
