"""``kubectl berth suspend|resume|events|logs|status -o yaml|version`` against a small HTTP server
standing in for the apiserver (the real kubernetes client makes the calls)."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlparse

import pytest
import yaml
from kubectl_berth import __version__, cli, session_api
from kubectl_berth.client import PluginClient
from kubernetes import client
from typer.testing import CliRunner

BASE = "/apis/berth.dev/v1alpha1/namespaces/team-a/agentsessions/demo"


class World:
    """What the fake apiserver serves and records."""

    def __init__(self) -> None:
        self.patches: list[Any] = []
        self.log_queries: list[dict[str, list[str]]] = []
        self.event_selectors: list[str] = []
        # Each GET of the session returns the next status (the last one repeats).
        self.statuses: list[dict[str, Any]] = [{"phase": "Running", "podName": "demo-e1"}]
        self.logs = {"demo-e1": "first pod line\n", "demo-e2": "second pod line\n"}


WORLD = World()


class FakeApiserver(BaseHTTPRequestHandler):
    def _send(self, code: int, body: Any, content_type: str = "application/json") -> None:
        data = body if isinstance(body, bytes) else json.dumps(body).encode()
        self.send_response(code)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self) -> None:
        url = urlparse(self.path)
        query = parse_qs(url.query)
        if url.path == BASE:
            st = WORLD.statuses.pop(0) if len(WORLD.statuses) > 1 else WORLD.statuses[0]
            self._send(200, {"metadata": {"name": "demo", "namespace": "team-a"}, "status": st})
        elif url.path == "/api/v1/namespaces/team-a/events":
            WORLD.event_selectors.append(query["fieldSelector"][0])
            event = {
                "metadata": {"name": "e1"},
                "involvedObject": {"kind": "AgentSession", "name": "demo"},
                "type": "Warning",
                "reason": "ClaimMissing",
                "message": "create the claim",
                "count": 2,
                "lastTimestamp": "2026-01-01T00:00:00Z",
            }
            self._send(200, {"kind": "EventList", "apiVersion": "v1", "items": [event]})
        elif url.path.startswith("/api/v1/namespaces/team-a/pods/") and url.path.endswith("/log"):
            WORLD.log_queries.append(query)
            pod = url.path.split("/")[-2]
            self._send(200, WORLD.logs[pod].encode(), "text/plain")
        else:
            self._send(404, {"kind": "Status", "reason": "NotFound", "message": "not found"})

    def do_PATCH(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        WORLD.patches.append(body)
        self._send(200, {"metadata": {"name": "demo"}, "spec": body["spec"]})

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def api(monkeypatch: pytest.MonkeyPatch) -> Iterator[PluginClient]:
    global WORLD
    WORLD = World()
    server = ThreadingHTTPServer(("127.0.0.1", 0), FakeApiserver)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    cfg = client.Configuration(host=f"http://127.0.0.1:{server.server_address[1]}")
    api = PluginClient(api=client.ApiClient(cfg), namespace="team-a")
    monkeypatch.setattr(cli, "_client", lambda *_a: api)
    monkeypatch.setattr(session_api.time, "sleep", lambda _s: None)
    try:
        yield api
    finally:
        server.shutdown()
        server.server_close()


def run(*args: str) -> Any:
    return CliRunner().invoke(cli.app, list(args))


def test_suspend_and_resume_patch_spec_suspend(api: PluginClient) -> None:
    assert run("suspend", "demo").exit_code == 0
    assert run("resume", "demo").exit_code == 0
    assert WORLD.patches == [{"spec": {"suspend": True}}, {"spec": {"suspend": False}}]


def test_events_list_the_sessions_events(api: PluginClient) -> None:
    result = run("events", "demo")
    assert result.exit_code == 0, result.output
    assert WORLD.event_selectors == ["involvedObject.kind=AgentSession,involvedObject.name=demo"]
    assert "ClaimMissing" in result.output and "create the claim" in result.output


def test_logs_follow_the_session_from_pod_to_pod_until_it_ends(api: PluginClient) -> None:
    WORLD.statuses = [
        {"phase": "Running", "podName": "demo-e1", "epoch": 1},
        {"phase": "Resuming", "podName": "demo-e2", "epoch": 2},
        {"phase": "Succeeded", "podName": "demo-e2", "epoch": 2},
    ]
    result = run("logs", "demo", "-f")
    assert result.exit_code == 0, result.output
    assert result.output.splitlines() == [
        "--- pod demo-e1 (epoch 1)",
        "first pod line",
        "--- pod demo-e2 (epoch 2)",
        "second pod line",
    ]
    assert all(q["container"] == ["session"] for q in WORLD.log_queries)


def test_logs_without_a_pod_say_so(api: PluginClient) -> None:
    WORLD.statuses = [{"phase": "Pending"}]
    result = run("logs", "demo")
    assert result.exit_code == 1 and "has no pod now" in result.output


def test_status_as_yaml_and_the_version(api: PluginClient) -> None:
    result = run("status", "demo", "-o", "yaml")
    assert result.exit_code == 0
    assert yaml.safe_load(result.output) == {"phase": "Running", "podName": "demo-e1"}
    assert run("version").output.strip() == f"kubectl-berth {__version__}"
