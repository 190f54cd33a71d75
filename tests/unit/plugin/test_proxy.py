"""``kubectl berth send/passivate`` reach the session through the apiserver's pod proxy with the
session's token in ``X-Berth-Token`` (``Authorization`` carries the caller's own credentials).
A small HTTP server stands in for the apiserver and records what arrives."""

from __future__ import annotations

import json
import socket
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
from berth_operator.errors import KubeError
from kubectl_berth import session_api
from kubectl_berth.client import PluginClient
from kubectl_berth.errors import PluginError
from kubernetes import client

SEEN: list[dict[str, Any]] = []


class FakeApiserver(BaseHTTPRequestHandler):
    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        SEEN.append(
            {
                "path": self.path,
                "headers": {k.lower(): v for k, v in self.headers.items()},
                "body": body,
            }
        )
        code = 403 if self.headers.get("X-Berth-Token") != "tok" else 202
        data = json.dumps({"accepted": code == 202}).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def api() -> Iterator[PluginClient]:
    SEEN.clear()
    server = ThreadingHTTPServer(("127.0.0.1", 0), FakeApiserver)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    cfg = client.Configuration(host=f"http://127.0.0.1:{server.server_address[1]}")
    cfg.api_key = {"BearerToken": "user-credential"}
    cfg.api_key_prefix = {"BearerToken": "Bearer"}
    try:
        yield PluginClient(api=client.ApiClient(cfg), namespace="team-a")
    finally:
        server.shutdown()
        server.server_close()


SESSION = {
    "metadata": {"name": "demo", "namespace": "team-a"},
    "spec": {"keepAlive": True},
    "status": {"podName": "demo-e3", "podIP": "10.0.0.7", "phase": "Running"},
}


def test_proxy_path_names_the_current_pod() -> None:
    assert session_api.pod_proxy_path(SESSION, "/v1/messages") == (
        "/api/v1/namespaces/team-a/pods/demo-e3:8080/proxy/v1/messages"
    )
    with pytest.raises(PluginError, match="no running pod"):
        session_api.pod_proxy_path({"metadata": {"name": "x"}, "status": {}}, "/v1/state")


def test_proxy_post_sends_the_session_token_beside_the_callers_credential(
    api: PluginClient,
) -> None:
    path = session_api.pod_proxy_path(SESSION, "/v1/messages")
    assert api.proxy_post(path, {"prompt": "hi"}, "tok", 5.0) == (202, {"accepted": True})
    seen = SEEN[-1]
    assert seen["path"] == path and seen["body"] == {"prompt": "hi"}
    assert seen["headers"]["x-berth-token"] == "tok"
    assert seen["headers"]["authorization"] == "Bearer user-credential"
    status, answer = api.proxy_post(path, {"prompt": "hi"}, "wrong", 5.0)
    assert (status, answer) == (403, {"accepted": False})


def test_proxy_post_to_an_apiserver_that_refuses_is_a_kube_error() -> None:
    """urllib3 gives up on a refused connection with ``MaxRetryError`` (not an ``OSError``):
    the caller gets the plugin's error, not a traceback."""
    with socket.socket() as sock:  # a port nothing listens on once closed
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    cfg = client.Configuration(host=f"http://127.0.0.1:{port}")
    cfg.retries = 0
    refused = PluginClient(api=client.ApiClient(cfg), namespace="team-a")
    path = session_api.pod_proxy_path(SESSION, "/v1/messages")
    with pytest.raises(KubeError, match="cannot reach the Kubernetes API"):
        refused.proxy_post(path, {"prompt": "hi"}, "tok", 5.0)
