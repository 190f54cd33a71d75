"""``berth_operator.k8s.rest``: API paths, and the operator's requests by path over its aiohttp
``ApiSession`` to a local HTTP server that records what it was sent and answers like an
apiserver (the plugin's over the ``kubernetes`` client: tests/unit/plugin/test_rest.py)."""

from __future__ import annotations

import asyncio
import json
import socket
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs

import kopf
import pytest
from berth_operator.errors import AlreadyExists, Conflict, KubeError, NotFound
from berth_operator.k8s import rest
from berth_operator.k8s.client import KubeClient, sharing_unchanged, without_managed_fields
from berth_operator.k8s.connection import ApiSession
from berth_operator.k8s.secrets import SecretApi


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
        answers = self.server.answers  # type: ignore[attr-defined]
        status, body = answers.pop(0) if answers else self.server.answer  # type: ignore[attr-defined]
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
    srv.answers = []  # type: ignore[attr-defined]  (answered first, in order)
    thread = threading.Thread(target=srv.serve_forever, daemon=True)
    thread.start()
    try:
        yield srv
    finally:
        srv.shutdown()
        srv.server_close()


def _url(srv: Any) -> str:
    return f"http://127.0.0.1:{srv.server_address[1]}"


def _session(url: str, tokens: list[str] | None = None) -> ApiSession:
    """An ApiSession logging in with kopf's ConnectionInfo; each login takes the next token."""
    left = list(tokens or ["t0ken"])

    def login() -> kopf.ConnectionInfo:
        return kopf.ConnectionInfo(server=url, token=left.pop(0) if len(left) > 1 else left[0])

    return ApiSession(login, limit=4)


def _run(session: ApiSession, call: Any) -> Any:
    async def go() -> Any:
        try:
            return await call(rest.AsyncRest(session))
        finally:
            await session.close()

    return asyncio.run(go())


def test_requests_carry_the_query_the_body_its_content_type_and_the_token(server: Any) -> None:
    async def calls(r: rest.AsyncRest) -> Any:
        got = await r.get("get pod", rest.core("ns", "pods", "p"))
        await r.get("list pods", rest.core("ns", "pods"), labelSelector="a=b,c", watch=False)
        await r.create(
            "create pod", rest.core("ns", "pods"), {"metadata": {"name": "p"}}, dryRun="All"
        )
        await r.patch(
            "label pod", rest.core("ns", "pods", "p"), {"metadata": {"labels": {"k": None}}}
        )
        await r.patch("patch deploy", "/apis/apps/v1/namespaces/ns/deployments/d", [{"op": "test"}])
        await r.replace("put status", rest.core("ns", "pods", "p", "status"), {"status": {}})
        await r.delete("delete pod", rest.core("ns", "pods", "p"), {"gracePeriodSeconds": 0})
        return got

    assert _run(_session(_url(server)), calls) == {"kind": "Pod", "metadata": {"name": "p"}}
    seen = server.seen
    assert [s["method"] for s in seen] == ["GET", "GET", "POST", "PATCH", "PATCH", "PUT", "DELETE"]
    path, _, query = seen[1]["path"].partition("?")
    assert path == "/api/v1/namespaces/ns/pods"
    assert parse_qs(query) == {"labelSelector": ["a=b,c"], "watch": ["false"]}
    assert seen[2]["path"] == "/api/v1/namespaces/ns/pods?dryRun=All"
    assert seen[2]["body"] == {"metadata": {"name": "p"}}
    assert seen[3]["content_type"] == "application/merge-patch+json"
    assert seen[3]["body"] == {"metadata": {"labels": {"k": None}}}
    assert seen[4]["content_type"] == "application/json-patch+json"
    assert seen[5]["content_type"] == "application/json"
    assert seen[6]["body"] == {"gracePeriodSeconds": 0}
    assert all(s["authorization"] == "Bearer t0ken" for s in seen)


def test_an_encoded_name_reaches_the_server_encoded(server: Any) -> None:
    _run(_session(_url(server)), lambda r: r.get("get pod", rest.core("ns", "pods", "a/../b")))
    assert server.seen[0]["path"] == "/api/v1/namespaces/ns/pods/a%2F..%2Fb"


def test_a_401_logs_in_again_and_sends_the_request_once_more(server: Any) -> None:
    server.answers = [(401, {"kind": "Status", "reason": "Unauthorized", "message": "expired"})]
    session = _session(_url(server), tokens=["old", "new"])
    got = _run(session, lambda r: r.get("get pod ns/p", rest.core("ns", "pods", "p")))
    assert got["kind"] == "Pod"
    assert [s["authorization"] for s in server.seen] == ["Bearer old", "Bearer new"]


def test_a_second_401_is_the_callers_error(server: Any) -> None:
    server.answer = (401, {"kind": "Status", "reason": "Unauthorized", "message": "no"})
    with pytest.raises(KubeError, match="get pod ns/p: 401 Unauthorized no") as caught:
        _run(_session(_url(server)), lambda r: r.get("get pod ns/p", rest.core("ns", "pods", "p")))
    assert caught.value.status == 401 and len(server.seen) == 2


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
    with pytest.raises(error) as caught:
        _run(_session(_url(server)), lambda r: r.get("get pod ns/p", rest.core("ns", "pods", "p")))
    assert caught.value.status == status and caught.value.reason == reason
    assert str(caught.value).startswith(f"get pod ns/p: {status} {reason} said {reason}")


def test_an_answer_that_is_not_a_json_object_is_a_kube_error(server: Any) -> None:
    server.answer = (200, b"[1, 2]")
    with pytest.raises(KubeError, match="non-object"):
        _run(_session(_url(server)), lambda r: r.get("get pod ns/p", rest.core("ns", "pods", "p")))


def test_a_secret_call_error_keeps_no_chain(server: Any) -> None:
    server.answer = (500, {"kind": "Status", "message": "data: c2VjcmV0"})
    session = _session(_url(server))

    async def go() -> Any:
        try:
            return await rest.AsyncRest(session, secret=True).get("get secret ns/s", "/api/v1/x")
        finally:
            await session.close()

    with pytest.raises(KubeError) as caught:
        asyncio.run(go())
    assert caught.value.__cause__ is None and caught.value.__suppress_context__


def _closed_port() -> int:
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
    return port


def test_an_apiserver_that_cannot_be_reached_is_a_kube_error() -> None:
    session = _session(f"http://127.0.0.1:{_closed_port()}")
    with pytest.raises(KubeError, match="get pod ns/p: cannot reach the Kubernetes API"):
        _run(session, lambda r: r.get("get pod ns/p", rest.core("ns", "pods", "p")))


def test_a_failed_login_is_a_kube_error_naming_it() -> None:
    def login() -> kopf.ConnectionInfo:
        raise kopf.LoginError("no service account, no kubeconfig")

    with pytest.raises(KubeError, match="cannot log in to the Kubernetes API: no service account"):
        _run(ApiSession(login), lambda r: r.get("get pod ns/p", rest.core("ns", "pods", "p")))


def test_concurrent_shared_secret_reads_make_one_get(server: Any) -> None:
    server.answer = (200, {"kind": "Secret", "metadata": {"name": "llm"}, "data": {}})
    session = _session(_url(server))

    async def go() -> list[Any]:
        secrets = SecretApi(session)
        try:
            together = await asyncio.gather(
                *(secrets.read_secret_shared("ns", "llm") for _ in range(5))
            )
            after = await secrets.read_secret_shared("ns", "llm")
            return [*together, after]
        finally:
            await session.close()

    answers = asyncio.run(go())
    assert all(a["metadata"]["name"] == "llm" for a in answers)
    gets = [s for s in server.seen if s["path"] == "/api/v1/namespaces/ns/secrets/llm"]
    assert len(gets) == 2  # one for the five concurrent readers, one for the later reader


_MANAGED = [{"manager": "kopf", "operation": "Update", "fieldsV1": {"f:metadata": {}}}]


def _stored_session() -> dict[str, Any]:
    return {
        "apiVersion": "berth.dev/v1alpha1",
        "kind": "AgentSession",
        "metadata": {
            "name": "s",
            "namespace": "ns",
            "resourceVersion": "7",
            "finalizers": ["berth.dev/finalizer"],
            "managedFields": _MANAGED,
        },
        "spec": {"prompt": "hi"},
        "status": {"phase": "Running"},
    }


def test_a_session_is_read_without_managed_fields(server: Any) -> None:
    server.answer = (200, _stored_session())
    session = _session(_url(server))

    async def go() -> dict[str, Any]:
        try:
            return await KubeClient(session).get_session("ns", "s")
        finally:
            await session.close()

    got = asyncio.run(go())
    assert "managedFields" not in got["metadata"]
    assert got["metadata"]["finalizers"] == ["berth.dev/finalizer"]
    assert got["metadata"]["resourceVersion"] == "7"


def _write_status(server: Any, body: dict[str, Any]) -> dict[str, Any]:
    """``replace_session_status(body)`` against the fake apiserver; what it returned."""
    session = _session(_url(server))

    async def go() -> dict[str, Any]:
        try:
            return await KubeClient(session).replace_session_status(body)
        finally:
            await session.close()

    return asyncio.run(go())


def test_a_status_write_sends_and_keeps_no_managed_fields_and_leaves_the_body_alone(
    server: Any,
) -> None:
    server.answer = (200, _stored_session())
    body = _stored_session()
    stored = _write_status(server, body)
    sent = server.seen[-1]
    assert sent["method"] == "PUT"
    assert sent["path"] == "/apis/berth.dev/v1alpha1/namespaces/ns/agentsessions/s/status"
    assert "managedFields" not in sent["body"]["metadata"]
    assert sent["body"]["metadata"]["resourceVersion"] == "7"  # optimistic concurrency kept
    assert "managedFields" not in stored["metadata"]
    assert body["metadata"]["managedFields"] == _MANAGED  # the caller's (kopf's) object


def test_an_object_without_managed_fields_is_returned_as_is() -> None:
    obj = {"metadata": {"name": "s"}, "spec": {}}
    assert without_managed_fields(obj) is obj
    assert without_managed_fields({"kind": "Status"}) == {"kind": "Status"}


def test_a_status_write_answer_shares_what_it_left_equal_with_the_body(server: Any) -> None:
    body = _stored_session()
    body["status"] = {"phase": "Placed", "conditions": [{"type": "Ready", "status": "False"}]}
    answer = _stored_session()
    answer["metadata"]["resourceVersion"] = "8"
    answer["metadata"]["labels"] = {"changed": "by-a-webhook"}
    answer["status"] = json.loads(json.dumps(body["status"]))
    server.answer = (200, answer)
    stored = _write_status(server, body)
    assert stored["spec"] is body["spec"] and stored["status"] is body["status"]
    assert stored["metadata"]["finalizers"] is body["metadata"]["finalizers"]
    assert stored["metadata"]["resourceVersion"] == "8"  # the answer's, where it differs
    assert stored["metadata"]["labels"] == {"changed": "by-a-webhook"}
    assert stored["metadata"]["labels"] is not body["metadata"].get("labels")
    assert "managedFields" not in stored["metadata"]


def test_sharing_leaves_the_sent_object_unchanged() -> None:
    sent = {"metadata": {"name": "s", "resourceVersion": "1"}, "spec": {"a": [1]}}
    answer = {"metadata": {"name": "s", "resourceVersion": "2"}, "spec": {"a": [1]}, "x": 1}
    before = json.loads(json.dumps(sent))
    shared = sharing_unchanged(answer, sent)
    assert shared is answer and shared["spec"] is sent["spec"]
    assert shared["metadata"]["resourceVersion"] == "2" and shared["x"] == 1
    assert sent == before
