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
from berth_operator.errors import NotFound
from kubectl_berth import cli, session_api, views
from kubectl_berth.errors import PluginError
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
    assert views.age(None if delta is None else NOW - delta, NOW) == text


def render(body: dict[str, Any], width: int = 200) -> str:
    text = views.status_text(body, NOW, width)
    widest = max(len(line) for line in text.splitlines())
    longest_word = max(len(w) for w in text.split())
    assert widest <= max(width, longest_word + 24), f"a line of {widest} columns at width {width}"
    return text


@pytest.mark.parametrize("width", [80, 200])
def test_status_shows_conditions_lineage_and_usage_whole(width: int) -> None:
    text = render(session(), width)
    for needle in (
        "Name:",
        "demo",
        "Namespace:",
        "Running",
        "demo-e2",
        "proc-a",
        "run-2",
        "Ready:",
        "Passivated:",
        "Resumed",
        "2m ago",
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
    assert "…" not in text
    lineage = text[text.index("Runs (oldest first)") :]
    assert lineage.index("run-1") < lineage.index("run-2")


def test_status_shows_the_pods_image_when_known() -> None:
    body = session()
    assert "Image:" not in render(body)
    body["status"]["image"] = "berth.dev.local/berth:1.2.3"
    assert "berth.dev.local/berth:1.2.3" in render(body)


def test_status_of_a_new_session_and_last_error() -> None:
    body = {"metadata": {"name": "new", "namespace": "ns"}, "spec": {}, "status": {}}
    text = render(body)
    assert "new" in text and "Last error" not in text
    text = render(session(lastError="LLM said no"))
    assert "Last error" in text and "LLM said no" in text


def real_status() -> dict[str, Any]:
    """A status as the operator writes it after a drain: long generated names, a passivation
    reason, a long condition message (the values a narrow table used to cut)."""
    body = session()
    st = body["status"]
    st["phase"] = "Succeeded"
    st["podName"] = "fix-issue-4711-in-payments-service-e2-7x9kq"
    st["runId"] = "run-0193d7a4-7c2e-7b11-9f3e-2c1d44e0a9b1"
    st["runs"][0]["runId"] = "run-0193d7a1-22aa-7f00-8a10-77b3c0ffee01"
    st["runs"][0]["podName"] = "fix-issue-4711-in-payments-service-e1-p2m8d"
    st["runs"][0]["nodeName"] = "worker-pool-a-large-node-0001"
    st["runs"][1]["runId"] = st["runId"]
    st["runs"][1]["resumedFrom"] = st["runs"][0]["runId"]
    st["conditions"][1]["message"] = (
        "passivated for node_drain at turn 7 (checkpoint run-0193d7a1-22aa-7f00-8a10-"
        "77b3c0ffee01, 12 tool calls); resumed on worker-pool-b-large-node-0002 after 2.4 s"
    )
    st["lastError"] = "model call failed: 429 Too Many Requests " * 4
    return body


@pytest.mark.parametrize("width", [80, 200])
def test_status_never_cuts_the_values_a_user_came_for(width: int) -> None:
    body = real_status()
    text = render(body, width)
    st = body["status"]
    for value in (
        "Succeeded",
        st["podName"],
        st["runId"],
        st["runs"][0]["runId"],
        st["runs"][0]["podName"],
        "worker-pool-a-large-node-0001",
        "passivated",
        "Passivated",
        "node_drain",
    ):
        assert value in text, value
    flat = " ".join(text.split())
    assert " ".join(st["conditions"][1]["message"].split()) in flat
    assert " ".join(st["lastError"].split()) in flat
    if width == 80:
        assert all(len(line) <= 80 for line in text.splitlines() if " " in line.strip())


def test_status_piped_is_80_columns_wide(monkeypatch: pytest.MonkeyPatch) -> None:
    use(monkeypatch, real_status())
    monkeypatch.delenv("COLUMNS", raising=False)
    result = CliRunner().invoke(cli.app, ["status", "demo"])
    assert result.exit_code == 0, result.output
    assert "run-0193d7a4-7c2e-7b11-9f3e-2c1d44e0a9b1" in result.output
    assert max(len(line) for line in result.output.splitlines()) <= 80


def test_help_is_plain_text_wrapped_to_the_terminal() -> None:
    result = CliRunner().invoke(cli.app, ["send", "--help"], env={"COLUMNS": "80"})
    assert result.exit_code == 0, result.output
    assert "``" not in result.output
    assert max(len(line) for line in result.output.splitlines()) <= 80
    assert "front door" in result.output


def test_malformed_status_is_a_plugin_error() -> None:
    with pytest.raises(PluginError, match="unexpected AgentSession status"):
        session_api.parse_status({"status": {"conditions": [{"type": "Ready"}]}})


@pytest.mark.parametrize(
    ("status", "override", "url"),
    [
        ({"podIP": "127.0.0.9"}, None, "http://127.0.0.9:8080"),
        ({"podIP": "fd00::1"}, None, "http://[fd00::1]:8080"),
        ({}, "http://localhost:18080/", "http://localhost:18080"),
    ],
)
def test_session_endpoint(status: dict[str, Any], override: str | None, url: str) -> None:
    assert session_api.session_endpoint({"status": status}, override) == url


def test_session_endpoint_without_pod() -> None:
    with pytest.raises(PluginError, match="has no running pod \\(phase Passivated\\)"):
        session_api.session_endpoint(
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
    body = session_api.passivate_body({"spec": spec}, flag, now)
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
    monkeypatch.setattr(cli, "connect", lambda **_: FixedClient(body))


def test_send_posts_the_prompt(monkeypatch: pytest.MonkeyPatch, pod_api: str) -> None:
    use(monkeypatch, session())
    result = CliRunner().invoke(cli.app, ["send", "demo", "add tests", "--endpoint", pod_api])
    assert result.exit_code == 0, result.output
    assert Recorder.calls == [("/v1/messages", {"prompt": "add tests"})]
    assert Recorder.tokens == ["token-of-demo"]  # the session's API token, proxy-safe header


def test_send_refuses_a_session_without_keepalive(
    monkeypatch: pytest.MonkeyPatch, pod_api: str
) -> None:
    body = session()
    body["spec"]["keepAlive"] = False
    use(monkeypatch, body)
    result = CliRunner().invoke(cli.app, ["send", "demo", "x", "--endpoint", pod_api])
    assert result.exit_code == 1
    assert "not keepAlive" in result.output
    assert Recorder.calls == []


def test_send_reports_the_pods_refusal(monkeypatch: pytest.MonkeyPatch, pod_api: str) -> None:
    use(monkeypatch, session())
    Recorder.answer = (409, {"error": "session is busy"})
    result = CliRunner().invoke(cli.app, ["send", "demo", "x", "--endpoint", pod_api])
    assert result.exit_code == 1
    assert "session is busy" in result.output


def test_passivate_posts_reason_and_deadline(monkeypatch: pytest.MonkeyPatch, pod_api: str) -> None:
    use(monkeypatch, session())
    result = CliRunner().invoke(
        cli.app, ["passivate", "demo", "--endpoint", pod_api, "--deadline-seconds", "9"]
    )
    after = int(time.time() * 1000)
    assert result.exit_code == 0, result.output
    [(path, sent)] = Recorder.calls
    assert path == "/v1/passivate" and sent["reason"] == "manual"
    assert after + 9000 - 5000 <= sent["deadlineMs"] <= after + 9000  # epoch ms, 9 s from now
    assert "deadline in 9s" in result.output


def test_unreachable_pod_is_a_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    use(monkeypatch, session())
    result = CliRunner().invoke(cli.app, ["passivate", "demo", "--endpoint", "http://127.0.0.1:9"])
    assert result.exit_code == 1
    assert "did not answer" in result.output


def test_status_of_a_missing_session(monkeypatch: pytest.MonkeyPatch) -> None:
    use(monkeypatch, None)
    result = CliRunner().invoke(cli.app, ["status", "nope"])
    assert result.exit_code == 1
    assert "agentsession ns/nope not found" in result.output


def test_status_json(monkeypatch: pytest.MonkeyPatch) -> None:
    use(monkeypatch, session())
    result = CliRunner().invoke(cli.app, ["status", "demo", "-o", "json"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.output)["podName"] == "demo-e2"


def test_plugin_does_not_import_kopf() -> None:
    import subprocess
    import sys

    code = "import sys, kubectl_berth.cli; print('kopf' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_events_at_80_columns_keep_reasons_whole_and_wrap_messages() -> None:
    items = [
        {
            "type": "Normal",
            "reason": "PassivationRequested",
            "count": 1,
            "lastTimestamp": "2026-11-21T11:59:00Z",
            "message": "node_drain: node worker-pool-a-large-node-0001 is draining; the session "
            "checkpoints run-0193d7a1-22aa-7f00-8a10-77b3c0ffee01 and exits",
        }
    ]
    console = Console(width=80, record=True)
    console.print(views.events_table(items, NOW))
    text = console.export_text()
    assert "PassivationRequested" in text and "…" not in text
    assert "run-0193d7a1-22aa-7f00-8a10-77b3c0ffee01" in text.replace("\n", "").replace(" ", "")
