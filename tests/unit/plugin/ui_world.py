"""A small apiserver for the web view's tests: a real HTTP server answering the paths the view
reads (AgentSessions, a LaneWorker, Events, a Secret, SelfSubjectAccessReviews, and the session
pod's ``/v1/state``, ``/metrics`` and ``/v1/runs/{runId}/events`` through the pod proxy) from a
``World`` the test changes. The run's answer is made by the runtime's own read
(``session_runtime.pod.runview.answer``: pairing, lanes, paging, masking) over events and
messages shaped as the session emits and keeps them.

The session tells the story of a drain: run 1 on node-a passivated with reason ``node_drain``,
run 2 resumed on node-b, tool calls on the execute lane.
"""

from __future__ import annotations

import base64
import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlparse

from kubectl_berth.client import PluginClient
from kubernetes import client

from session_runtime.pod.runview import answer

NS = "team-a"
SESSIONS = f"/apis/berth.dev/v1alpha1/namespaces/{NS}/agentsessions"
WORKER = f"/apis/berth.dev/v1alpha1/namespaces/{NS}/laneworkers/exec-pool"
PROXY = f"/api/v1/namespaces/{NS}/pods/demo-e2:8080/proxy"
RUN2_STARTED_MS = 1795086003000  # 2026-11-21T11:00:03Z
LEAKED = "sk-" + "live0123456789abcdefXYZ"
"""A credential a tool printed; the page must show it masked."""


def demo_messages() -> list[dict[str, Any]]:
    """Run 2's conversation as the session keeps it (OpenAI chat format)."""
    call = {"id": "call_1_0", "type": "function"}
    return [
        {"role": "system", "content": "You are a coding agent."},
        {"role": "user", "content": "fix the bug"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {**call, "function": {"name": "bash", "arguments": '{"command": "env"}'}}
            ],
        },
        {
            "role": "tool",
            "tool_call_id": "call_1_0",
            "content": f"OPENAI_API_KEY={LEAKED}\nHOME=/w",
        },
        {"role": "assistant", "content": "The test fails in parse(); running it again."},
    ]


def demo_session() -> dict[str, Any]:
    """The drained session as the operator writes it."""
    return {
        "apiVersion": "berth.dev/v1alpha1",
        "kind": "AgentSession",
        "metadata": {"name": "demo", "namespace": NS, "creationTimestamp": "2026-11-21T10:00:00Z"},
        "spec": {
            "prompt": "fix the bug",
            "model": "openai/x",
            "keepAlive": True,
            "budget": {"maxTotalTokens": 50000},
            "identity": {"tenantId": "acme"},
            "lanes": {"execute": {"mode": "external", "laneWorkerRef": {"name": "exec-pool"}}},
        },
        "status": {
            "phase": "Running",
            "podName": "demo-e2",
            "podIP": "127.0.0.1",
            "nodeName": "node-b",
            "epoch": 2,
            "runId": "run-2",
            "conditions": [
                {
                    "type": "Ready",
                    "status": "True",
                    "reason": "Running",
                    "message": "",
                    "lastTransitionTime": "2026-11-21T11:00:07Z",
                }
            ],
            "runs": [
                {
                    "runId": "run-1",
                    "podName": "demo-e1",
                    "nodeName": "node-a",
                    "outcome": "passivated",
                    "reason": "node_drain",
                    "startedAt": "2026-11-21T10:00:00Z",
                    "endedAt": "2026-11-21T11:00:00Z",
                },
                {
                    "runId": "run-2",
                    "resumedFrom": "run-1",
                    "podName": "demo-e2",
                    "nodeName": "node-b",
                    "outcome": "running",
                    "startedAt": "2026-11-21T11:00:03Z",
                },
            ],
            "usage": {"promptTokens": 1200, "completionTokens": 300, "totalTokens": 1500},
            "passivations": 1,
        },
    }


@dataclass
class World:
    """What the apiserver serves and what it was asked to change."""

    sessions: list[dict[str, Any]] = field(default_factory=lambda: [demo_session()])
    events: list[dict[str, Any]] = field(default_factory=list)
    allowed: bool = True
    patches: list[Any] = field(default_factory=list)
    posts: list[tuple[str, Any]] = field(default_factory=list)
    metrics: str = 'berth_session_tool_calls_total{lane="execute"} 4.0\n'
    run_events: list[dict[str, Any]] = field(default_factory=list)
    messages: list[dict[str, Any]] = field(default_factory=demo_messages)
    run_status: str = "running"
    run_asks: int = 0

    def __post_init__(self) -> None:
        self.add_tool_call("call_1_0", "bash", 1240, 0)
        self.add_tool_call("call_1_1", "grep", 85, 0)
        self.add_tool_call("call_1_2", "bash", 3020, 2)

    def add_tool_call(self, call_id: str, name: str, took_ms: int, exit_code: int) -> None:
        """A finished tool call of run 2 (its ``tool_start`` and ``tool_end`` events)."""
        self.start_call(call_id, name)
        self.end_call(call_id, name, took_ms, exit_code)

    def _event(self, kind: str, call_id: str, name: str, at: int | None = None) -> dict[str, Any]:
        seq = len(self.run_events) + 1
        event = {"type": kind, "seq": seq, "ts_ms": at or RUN2_STARTED_MS + 1000 * seq}
        event.update(run_id="run-2", session_id="team-a/demo", id=call_id, name=name)
        self.run_events.append(event)
        return event

    def start_call(self, call_id: str, name: str) -> None:
        """Run 2 starts tool call ``call_id`` (a ``tool_start`` event)."""
        self._event("tool_start", call_id, name)

    def end_call(self, call_id: str, name: str, took_ms: int, exit_code: int) -> None:
        """Tool call ``call_id`` ends ``took_ms`` after it started (a ``tool_end`` event)."""
        start = next(e for e in self.run_events if e["id"] == call_id)["ts_ms"]
        self._event("tool_end", call_id, name, start + took_ms).update(exit_code=exit_code)

    def run_answer(self, run_id: str, query: str) -> dict[str, Any] | None:
        """The pod's ``GET /v1/runs/{run_id}/events?query`` answer (None: not retained)."""
        if run_id != "run-2":
            return None
        self.run_asks += 1
        q = {k: v[0] for k, v in parse_qs(query).items()}
        record = {"id": run_id, "status": self.run_status, "event_count": len(self.run_events)}
        after, limit = int(q.get("after", -1)), int(q.get("limit", 100))
        return answer(record, self.run_events, self.messages, after, limit)

    def add_event(self, reason: str, message: str) -> None:
        """A new Event of the session (as the operator records one)."""
        self.events.append(
            {
                "metadata": {"name": f"demo.{len(self.events)}"},
                "involvedObject": {"kind": "AgentSession", "name": "demo"},
                "type": "Normal",
                "reason": reason,
                "message": message,
                "count": 1,
                "lastTimestamp": "2026-11-21T11:00:05Z",
            }
        )


def _selected(event: dict[str, Any], selector: str) -> bool:
    """Whether ``event`` matches an ``involvedObject.kind=K,involvedObject.name=N`` selector."""
    involved = event.get("involvedObject") or {}
    for term in filter(None, selector.split(",")):
        key, _, value = term.partition("=")
        if str(involved.get(key.removeprefix("involvedObject."))) != value:
            return False
    return True


def _handler(world: World) -> type[BaseHTTPRequestHandler]:
    class Apiserver(BaseHTTPRequestHandler):
        def _send(self, code: int, body: Any) -> None:
            text = body if isinstance(body, str) else json.dumps(body)
            data = text.encode()
            self.send_response(code)
            kind = "text/plain" if isinstance(body, str) else "application/json"
            self.send_header("Content-Type", kind)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def _body(self) -> Any:
            return json.loads(self.rfile.read(int(self.headers["Content-Length"] or 0)) or b"{}")

        def do_GET(self) -> None:
            path = urlparse(self.path).path
            if path in (SESSIONS, "/apis/berth.dev/v1alpha1/agentsessions"):
                self._send(200, {"kind": "AgentSessionList", "items": world.sessions})
            elif path == f"{SESSIONS}/demo":
                self._send(200, world.sessions[0])
            elif path == f"/api/v1/namespaces/{NS}/events":
                wanted = parse_qs(urlparse(self.path).query).get("fieldSelector", [""])[0]
                items = [e for e in world.events if _selected(e, wanted)]
                self._send(200, {"kind": "EventList", "items": items})
            elif path == f"/api/v1/namespaces/{NS}/secrets/demo-berth":
                token = base64.b64encode(b"tok").decode()
                self._send(200, {"kind": "Secret", "data": {"api-token": token}})
            elif path == f"{PROXY}/v1/state":
                self._send(200, {"state": "running", "turn": 3, "usage": {"totalTokens": 1500}})
            elif path == f"{PROXY}/metrics":
                self._send(200, world.metrics)
            elif path.startswith(f"{PROXY}/v1/runs/") and path.endswith("/events"):
                run_id = path.removeprefix(f"{PROXY}/v1/runs/").removesuffix("/events")
                found = world.run_answer(run_id, urlparse(self.path).query)
                self._send(200 if found else 404, found or {"error": "unknown_run"})
            elif path == WORKER:
                self._send(200, {"spec": {}, "status": {"replicas": 1, "pressure": {"backlog": 2}}})
            else:
                self._send(404, {"kind": "Status", "reason": "NotFound", "message": "not found"})

        def do_POST(self) -> None:
            path, body = urlparse(self.path).path, self._body()
            if path.endswith("/selfsubjectaccessreviews"):
                self._send(201, {**body, "status": {"allowed": world.allowed}})
                return
            world.posts.append((path, body))
            self._send(200, {"accepted": True})

        def do_PATCH(self) -> None:
            world.patches.append(self._body())
            self._send(200, world.sessions[0])

        def log_message(self, *args: Any) -> None:
            pass

    return Apiserver


@contextmanager
def apiserver(world: World) -> Iterator[PluginClient]:
    """A ``PluginClient`` for namespace ``team-a`` of an apiserver serving ``world``."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(world))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    cfg = client.Configuration(host=f"http://127.0.0.1:{server.server_address[1]}")
    try:
        yield PluginClient(api=client.ApiClient(cfg), namespace=NS)
    finally:
        server.shutdown()
        server.server_close()
