"""``berth_operator.k8s.rest``: API paths, and requests by path over a real ``ApiClient`` to a
local HTTP server that records what it was sent and answers like an apiserver."""

from __future__ import annotations

import asyncio
import json
import socket
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
from berth_operator.errors import AlreadyExists, Conflict, KubeError, NotFound
from berth_operator.k8s import calls, rest
from kubernetes import client


def test_paths_of_core_group_and_cluster_resources() -> None:
    assert rest.core("ns", "pods") == "/api/v1/namespaces/ns/pods"
    assert rest.core("ns", "pods", "p-1", "log") == "/api/v1/namespaces/ns/pods/p-1/log"
    assert rest.cluster("nodes", "n1") == "/api/v1/nodes/n1"
    assert (
        rest.group("berth.dev", "v1alpha1", "ns", "agentsessions", "s", "status")
        == "/apis/berth.dev/v1alpha1/namespaces/ns/agentsessions/s/status"
    )
    assert rest.group("berth.dev", "v1alpha1", None, "agentsessions") == (
        "/apis/berth.dev/v1alpha1/agentsessions"
    )


@pytest.mark.parametrize("name", ["..", "."])
def test_a_name_that_would_address_another_path_is_refused(name: str) -> None:
    with pytest.raises(ValueError, match="not a valid object name"):
        rest.core("ns", "pods", name)
    with pytest.raises(ValueError, match="not a valid object name"):
        rest.core(name, "pods")


def test_an_empty_namespace_is_refused() -> None:
    with pytest.raises(ValueError, match="not a valid object name"):
        rest.core("", "pods")


def test_a_slash_in_a_name_is_encoded_not_followed() -> None:
    assert rest.core("ns", "pods", "a/../b") == "/api/v1/namespaces/ns/pods/a%2F..%2Fb"


class _Apiserver(BaseHTTPRequestHandler):
    """Answers every request with ``server.answer`` (status, body) and records the request."""

    def _handle(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        self.server.seen.append(  # type: ignore[attr-defined]
            {
                "method": self.command,
                "path": self.path,
                "content_type": self.headers.get("Content-Type"),
                "authorization": self.headers.get("Authorization"),
                "body": json.loads(raw) if raw else None,
            }
        )
        status, body = self.server.answer  # type: ignore[attr-defined]
        data = body if isinstance(body, bytes) else json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = _handle

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def server() -> Iterator[Any]:
    srv = ThreadingHTTPServer(("127.0.0.1", 0), _Apiserver)
    srv.seen = []  # type: ignore[attr-defined]
    srv.answer = (200, {"kind": "Pod", "metadata": {"name": "p"}})  # type: ignore[attr-defined]
    thread = threading.Thread(target=srv.serve_forever, daemon=True)
    thread.start()
    try:
        yield srv
    finally:
        srv.shutdown()
        srv.server_close()


def _api(srv: Any) -> Any:
    cfg = client.Configuration(host=f"http://127.0.0.1:{srv.server_address[1]}")
    cfg.api_key = {"BearerToken": "t0ken"}
    cfg.api_key_prefix = {"BearerToken": "Bearer"}
    return client.ApiClient(cfg)


def test_requests_carry_the_query_the_body_its_content_type_and_the_token(server: Any) -> None:
    r = rest.Rest(_api(server))
    assert r.get("get pod", rest.core("ns", "pods", "p")) == {
        "kind": "Pod",
        "metadata": {"name": "p"},
    }
    r.get("list pods", rest.core("ns", "pods"), labelSelector="a=b,c", watch=False)
    r.create("create pod", rest.core("ns", "pods"), {"metadata": {"name": "p"}}, dryRun="All")
    r.patch("label pod", rest.core("ns", "pods", "p"), {"metadata": {"labels": {"k": None}}})
    r.patch("patch deploy", "/apis/apps/v1/namespaces/ns/deployments/d", [{"op": "test"}])
    r.replace("put status", rest.core("ns", "pods", "p", "status"), {"status": {}})
    r.delete("delete pod", rest.core("ns", "pods", "p"), {"gracePeriodSeconds": 0})
    seen = server.seen
    assert [s["method"] for s in seen] == ["GET", "GET", "POST", "PATCH", "PATCH", "PUT", "DELETE"]
    assert seen[1]["path"] == "/api/v1/namespaces/ns/pods?labelSelector=a%3Db%2Cc&watch=false"
    assert seen[2]["path"] == "/api/v1/namespaces/ns/pods?dryRun=All"
    assert seen[2]["body"] == {"metadata": {"name": "p"}}
    assert seen[3]["content_type"] == "application/merge-patch+json"
    assert seen[3]["body"] == {"metadata": {"labels": {"k": None}}}
    assert seen[4]["content_type"] == "application/json-patch+json"
    assert seen[5]["content_type"] == "application/json"
    assert seen[6]["body"] == {"gracePeriodSeconds": 0}
    assert all(s["authorization"] == "Bearer t0ken" for s in seen)


@pytest.mark.parametrize(
    ("status", "reason", "error"),
    [
        (404, "NotFound", NotFound),
        (409, "AlreadyExists", AlreadyExists),
        (409, "Conflict", Conflict),
        (403, "Forbidden", KubeError),
        (500, "InternalError", KubeError),
    ],
)
def test_an_error_answer_becomes_the_berth_error_with_the_apiservers_message(
    server: Any, status: int, reason: str, error: type[KubeError]
) -> None:
    server.answer = (
        status,
        {"kind": "Status", "status": "Failure", "reason": reason, "message": f"said {reason}"},
    )
    r = rest.AsyncRest(_api(server))
    with pytest.raises(error) as caught:
        asyncio.run(r.get("get pod ns/p", rest.core("ns", "pods", "p")))
    assert caught.value.status == status and caught.value.reason == reason
    assert str(caught.value).startswith(f"get pod ns/p: {status} {reason} said {reason}")


def test_an_answer_that_is_not_a_json_object_is_a_kube_error(server: Any) -> None:
    server.answer = (200, b"[1, 2]")
    with pytest.raises(KubeError, match="non-object"):
        rest.Rest(_api(server)).get("get pod ns/p", rest.core("ns", "pods", "p"))


def test_a_secret_call_error_keeps_no_chain(server: Any) -> None:
    server.answer = (500, {"kind": "Status", "message": "data: c2VjcmV0"})
    with pytest.raises(KubeError) as caught:
        asyncio.run(rest.AsyncRest(_api(server), secret=True).get("get secret ns/s", "/api/v1/x"))
    assert caught.value.__cause__ is None and caught.value.__suppress_context__


def test_open_returns_the_unread_response_for_streaming(server: Any) -> None:
    server.answer = (200, b"line 1\nline 2\n")
    response = calls.call_sync(
        "read log", rest.Rest(_api(server)).open, "GET", rest.core("ns", "pods", "p", "log")
    )
    assert b"".join(response.response.stream()) == b"line 1\nline 2\n"


def test_an_apiserver_that_cannot_be_reached_is_a_kube_error() -> None:
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    api = client.ApiClient(client.Configuration(host=f"http://127.0.0.1:{port}"))
    api.configuration.retries = 0
    with pytest.raises(KubeError, match="get pod ns/p: cannot reach the Kubernetes API"):
        asyncio.run(rest.AsyncRest(api).get("get pod ns/p", rest.core("ns", "pods", "p")))
