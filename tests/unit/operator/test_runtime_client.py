"""The operator's client of the session pod API against a real aiohttp server: it sends the
session's token, tells a refused token apart, and never buffers more than 1 MiB of /v1/state
(a pod answering 200 MB used to cost the operator 605 MiB)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any

import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer
from berth_operator import runtime_client
from berth_operator.errors import RuntimeUnauthorized, RuntimeUnreachable
from berth_operator.runtime_client import RuntimeClient

TOKEN = "tok-" + "x" * 39
STATE = {"state": "running", "runId": "run-1"}


class Pod:
    """A stand-in session pod: checks the token like berth-session and serves a chosen body."""

    def __init__(self) -> None:
        self.body: bytes = json.dumps(STATE).encode()
        self.chunked = False
        self.seen: list[dict[str, str]] = []
        self.peers: list[Any] = []

    async def handle(self, request: web.Request) -> web.StreamResponse:
        self.seen.append(dict(request.headers))
        self.peers.append(
            request.transport.get_extra_info("peername") if request.transport else None
        )
        if request.headers.get("Authorization") != f"Bearer {TOKEN}":
            return web.json_response({"error": "forbidden"}, status=403)
        if request.method == "POST":
            return web.json_response({"accepted": True}, status=202)
        if not self.chunked:
            return web.Response(body=self.body, content_type="application/json")
        resp = web.StreamResponse()
        resp.enable_chunked_encoding()
        await resp.prepare(request)
        for start in range(0, len(self.body), 1 << 16):
            await resp.write(self.body[start : start + (1 << 16)])
        await resp.write_eof()
        return resp


@pytest.fixture
async def pod() -> AsyncIterator[tuple[Pod, str, int]]:
    fake = Pod()
    app = web.Application()
    app.router.add_get("/v1/state", fake.handle)
    app.router.add_post("/v1/passivate", fake.handle)
    server = TestServer(app, host="127.0.0.1")
    await server.start_server()
    try:
        yield fake, "127.0.0.1", int(server.port or 0)
    finally:
        await server.close()


async def state(ip: str, port: int, token: str | None, **kw: Any) -> Any:
    client = RuntimeClient(5.0)
    try:
        client.base_url = staticmethod(lambda pod_ip, _port=port: f"http://{pod_ip}:{_port}")  # type: ignore[method-assign]
        return await client.state(ip, token, **kw)
    finally:
        await client.close()


async def test_sends_the_token_and_reads_state(pod: tuple[Pod, str, int]) -> None:
    fake, ip, port = pod
    st = await state(ip, port, TOKEN)
    assert st.state == "running"
    assert fake.seen[-1]["Authorization"] == f"Bearer {TOKEN}"


async def test_a_refused_token_is_reported_without_the_token(pod: tuple[Pod, str, int]) -> None:
    _, ip, port = pod
    for token in (None, "wrong"):
        with pytest.raises(RuntimeUnauthorized) as info:
            await state(ip, port, token)
        assert "403" in str(info.value) and TOKEN not in str(info.value)


@pytest.mark.parametrize("chunked", [False, True])
async def test_an_oversized_state_body_is_refused(pod: tuple[Pod, str, int], chunked: bool) -> None:
    """Attack: a pod answers /v1/state with 8 MiB (with and without Content-Length)."""
    fake, ip, port = pod
    fake.chunked = chunked
    fake.body = b'{"state": "running", "pad": "' + b"a" * (8 << 20) + b'"}'
    with pytest.raises(RuntimeUnreachable, match="exceeds"):
        await state(ip, port, TOKEN)
    fake.body = json.dumps(STATE).encode()
    assert (await state(ip, port, TOKEN, limit=len(fake.body))).state == "running"


async def test_passivate_sends_the_token(pod: tuple[Pod, str, int]) -> None:
    fake, ip, port = pod
    client = RuntimeClient(5.0)
    client.base_url = staticmethod(lambda pod_ip, _port=port: f"http://{pod_ip}:{_port}")  # type: ignore[method-assign]
    try:
        await client.passivate(ip, "manual", 1000, TOKEN)
        assert fake.seen[-1]["Authorization"] == f"Bearer {TOKEN}"
        with pytest.raises(RuntimeUnauthorized):
            await client.passivate(ip, "manual", 1000, None)
    finally:
        await client.close()


async def test_an_idle_connection_to_a_pod_is_not_kept_past_the_keepalive(
    pod: tuple[Pod, str, int], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Requests in quick succession share a connection; one after the keep-alive opens a new
    one (the operator does not hold a socket per session between state refreshes)."""
    monkeypatch.setattr(runtime_client, "KEEPALIVE_SECONDS", 0.3)
    fake, ip, port = pod
    client = RuntimeClient(5.0)
    client.base_url = staticmethod(lambda pod_ip, _port=port: f"http://{pod_ip}:{_port}")  # type: ignore[method-assign]
    try:
        await client.state(ip, TOKEN)
        await client.state(ip, TOKEN)
        await asyncio.sleep(1.0)
        await client.state(ip, TOKEN)
    finally:
        await client.close()
    first, second, later = fake.peers
    assert first == second
    assert later != first


async def test_outcome_long_polls_and_reads_the_termination_message() -> None:
    """``GET /v1/outcome?waitSeconds=N``: 204 is "not yet" (None), 200 the message text; the
    wait is the pod's, so the request may take longer than the client's usual timeout; a
    refused token and an oversized body are errors."""
    message = json.dumps({"outcome": "passivated", "runId": "run-1"})
    answers: list[web.Response] = [
        web.Response(status=204),
        web.Response(text=message, content_type="application/json"),
        web.Response(status=403),
        web.Response(text="x" * (runtime_client.MAX_OUTCOME_BYTES + 1)),
    ]
    waits: list[str] = []

    async def outcome(request: web.Request) -> web.Response:
        waits.append(request.query["waitSeconds"])
        await asyncio.sleep(0.3)  # longer than the client's timeout below
        return answers.pop(0)

    app = web.Application()
    app.router.add_get("/v1/outcome", outcome)
    server = TestServer(app, host="127.0.0.1")
    await server.start_server()
    client = RuntimeClient(0.2)
    client.base_url = staticmethod(lambda pod_ip, _p=server.port: f"http://{pod_ip}:{_p}")  # type: ignore[method-assign]
    try:
        assert await client.outcome("127.0.0.1", TOKEN, 1) is None
        assert await client.outcome("127.0.0.1", TOKEN, 1) == message
        with pytest.raises(RuntimeUnauthorized):
            await client.outcome("127.0.0.1", TOKEN, 1)
        with pytest.raises(RuntimeUnreachable, match="exceeds"):
            await client.outcome("127.0.0.1", TOKEN, 1)
    finally:
        await client.close()
        await server.close()
    assert waits == ["1", "1", "1", "1"]
