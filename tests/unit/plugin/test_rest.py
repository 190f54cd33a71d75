"""``kubectl_berth.rest``: the plugin's synchronous requests by path over a real ``kubernetes``
``ApiClient``, to the local apiserver double of the operator's request tests (same server, same
error translation)."""

from __future__ import annotations

from typing import Any

import pytest
from berth_operator.errors import AlreadyExists, KubeError
from berth_operator.k8s import rest
from kubectl_berth import rest as sync_rest
from kubernetes import client

from tests.unit.operator.k8s.test_k8s_rest import _closed_port, _url, server

__all__ = ["server"]  # the apiserver double's fixture, shared with the operator's request tests


def _api(srv: Any) -> Any:
    cfg = client.Configuration(host=_url(srv))
    cfg.api_key = {"BearerToken": "t0ken"}
    cfg.api_key_prefix = {"BearerToken": "Bearer"}
    return client.ApiClient(cfg)


def test_sync_requests_carry_the_body_its_content_type_and_the_token(server: Any) -> None:
    r = sync_rest.Rest(_api(server))
    assert r.get("get pod", rest.core("ns", "pods", "p"))["kind"] == "Pod"
    r.patch("label pod", rest.core("ns", "pods", "p"), {"metadata": {"labels": {"k": None}}})
    r.delete("delete lease", rest.group("coordination.k8s.io", "v1", "ns", "leases", "l"))
    seen = server.seen
    assert [s["method"] for s in seen] == ["GET", "PATCH", "DELETE"]
    assert seen[1]["content_type"] == "application/merge-patch+json"
    assert seen[2]["path"] == "/apis/coordination.k8s.io/v1/namespaces/ns/leases/l"
    assert all(s["authorization"] == "Bearer t0ken" for s in seen)


def test_a_sync_error_answer_is_translated_like_the_operators(server: Any) -> None:
    server.answer = (409, {"kind": "Status", "reason": "AlreadyExists", "message": "taken"})
    r = sync_rest.Rest(_api(server))
    with pytest.raises(AlreadyExists, match="create pod ns/p: 409 AlreadyExists taken"):
        sync_rest.call_sync("create pod ns/p", r.create, "x", rest.core("ns", "pods"), {})


def test_open_returns_the_unread_response_for_streaming(server: Any) -> None:
    server.answer = (200, b"line 1\nline 2\n")
    response = sync_rest.call_sync(
        "read log", sync_rest.Rest(_api(server)).open, "GET", rest.core("ns", "pods", "p", "log")
    )
    assert b"".join(response.response.stream()) == b"line 1\nline 2\n"


def test_a_sync_call_to_an_apiserver_that_cannot_be_reached_is_a_kube_error() -> None:
    api = client.ApiClient(client.Configuration(host=f"http://127.0.0.1:{_closed_port()}"))
    api.configuration.retries = 0
    r = sync_rest.Rest(api)
    with pytest.raises(KubeError, match="get pod ns/p: cannot reach the Kubernetes API"):
        sync_rest.call_sync("get pod ns/p", r.get, "get pod ns/p", rest.core("ns", "pods", "p"))
