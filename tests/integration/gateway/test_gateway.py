"""The front door over real HTTP, a real Redis and a real ``berth-session`` process.

The operator's watch is replaced by views the test writes into the directory (what the
handler would put there); everything else is the product: the Redis inbox with its Lua
scripts, the delivery loops, the aiohttp service, and the session pod API that dedupes
message ids in its store.

Asserted: authentication (the target's token; a peer's own token and uid), malformed input and
unknown sessions refused and counted; a message queued while the session has no pod is
delivered once the pod runs, even when the front door was stopped and a new one (new
``Delivery`` and service, same Redis) took over; a repeated message id returns the stored
message; two messages are answered in order, each by exactly one run; peer calls are allowed
only by ``spec.peers``, loops are refused with the chain in the message.
"""

from __future__ import annotations

import asyncio
import socket
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from aiohttp import web
from berth_operator.api.agentsession import PeersSpec
from berth_operator.errors import KubeError
from berth_operator.gateway.delivery import Delivery
from berth_operator.gateway.directory import GatewayDirectory
from berth_operator.gateway.inbox import Inbox, Message
from berth_operator.gateway.routing import SessionView
from berth_operator.gateway.service import GatewayService
from berth_operator.redis_client import connect
from berth_operator.runtime_client import RuntimeClient
from redis.asyncio import Redis

from tests.integration.lanes.conftest import redis_url  # noqa: F401  (fixture)
from tests.integration.server.harness import pod_world

pytestmark = pytest.mark.integration

SCRIPT = {
    "turns": [{"text": "ready"}, {"text": "answer one"}, {"text": "answer two"}],
    "cursor": "history",
    "on_exhausted": "repeat_last",
}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class FrontDoor:
    """The service and delivery on one port; :meth:`stop` and :meth:`start` replace them."""

    def __init__(self, redis: Redis[Any], runtime: RuntimeClient, tokens: dict[str, str]) -> None:
        self.deleted: set[str] = set()  # what the apiserver would say is gone
        self.redis = redis
        self.runtime = runtime
        self.tokens = tokens
        self.directory = GatewayDirectory()
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.runner: web.AppRunner | None = None
        self.delivery: Delivery | None = None
        self.wakes: list[str] = []
        self.token_error: KubeError | None = None  # the apiserver cannot be read

    async def _token(self, view: SessionView) -> str | None:
        if self.token_error is not None:
            raise self.token_error
        return self.tokens.get(view.uid)

    async def _wake(self, view: SessionView) -> None:
        self.wakes.append(view.key)

    async def _gone(self, key: str, uid: str) -> bool:
        return uid in self.deleted

    async def start(self) -> None:
        inbox = Inbox(self.redis, retention_seconds=300)
        self.delivery = Delivery(
            inbox,
            self.runtime,
            self.directory.by_uid,
            self._token,
            self._wake,
            0.05,
            self._gone,
        )
        service = GatewayService(
            inbox,
            self.delivery,
            self.directory.lookup,
            self.directory.by_uid,
            self._token,
            max_wait_seconds=60,
            max_peer_depth=3,
        )
        app = web.Application()
        service.routes(app)
        self.runner = web.AppRunner(app, access_log=None)
        await self.runner.setup()
        await web.TCPSite(self.runner, "127.0.0.1", self.port).start()
        await self.delivery.resume_all()

    async def stop(self) -> None:
        if self.delivery is not None:
            await self.delivery.close()
        if self.runner is not None:
            await self.runner.cleanup()

    def put(self, view: SessionView) -> None:
        self.directory.put(view)
        if self.delivery is not None:
            self.delivery.nudge(view.uid)


async def post(
    http: aiohttp.ClientSession, url: str, body: dict[str, Any], **headers: str
) -> tuple[int, dict[str, Any]]:
    async with http.post(url, json=body, headers=headers) as resp:
        return resp.status, await resp.json()


async def get(http: aiohttp.ClientSession, url: str, **headers: str) -> tuple[int, Any]:
    async with http.get(url, headers=headers) as resp:
        return resp.status, await resp.json()


@pytest.fixture
async def redis(redis_url: str) -> AsyncIterator[Redis[Any]]:  # noqa: F811
    client: Redis[Any] = connect(redis_url)
    await client.flushdb()
    yield client
    await client.aclose()


async def test_messages_survive_a_front_door_restart_and_run_once(
    tmp_path: Path, redis: Redis[Any]
) -> None:
    with pod_world(tmp_path, SCRIPT, keepAlive=True) as world:
        pod = world.start(epoch=1)
        await asyncio.to_thread(pod.wait_ready)
        await asyncio.to_thread(pod.wait_state, lambda s: s["state"] == "idle", "idle")
        port = int(pod.base_url.rsplit(":", 1)[1])
        runtime = RuntimeClient(10, session_port=port)
        door = FrontDoor(redis, runtime, {world.uid: world.token})
        view = SessionView(world.uid, world.namespace, world.name, keep_alive=True)
        door.put(view)  # no pod yet (phase unknown): messages wait
        await door.start()
        base = f"{door.url}/v1/sessions/{world.namespace}/{world.name}/messages"
        auth = {"Authorization": f"Bearer {world.token}"}
        try:
            async with aiohttp.ClientSession() as http:
                assert (await post(http, base, {"prompt": "x"}))[0] == 401
                bad = await post(http, base, {"prompt": "x"}, Authorization="Bearer nope")
                assert bad[0] == 401
                assert (await post(http, base, {"prompt": ""}, **auth))[0] == 400
                assert (await post(http, base, {"prompt": "x", "messageId": "../x"}, **auth))[
                    0
                ] == 400
                other = f"{door.url}/v1/sessions/{world.namespace}/nobody/messages"
                assert (await post(http, other, {"prompt": "x"}, **auth))[0] == 404

                one = {"prompt": "question one", "messageId": "m-1"}
                status, first = await post(http, base, one, **auth)
                assert (status, first["state"]) == (202, "queued"), first
                status, second = await post(
                    http, base, {"prompt": "question two", "messageId": "m-2"}, **auth
                )
                assert status == 202, second
                status, again = await post(http, base, one, **auth)
                assert (again["messageId"], again["createdMs"]) == ("m-1", first["createdMs"])

                await door.stop()  # the leader goes away with both messages queued
                door.put(
                    SessionView(
                        world.uid,
                        world.namespace,
                        world.name,
                        keep_alive=True,
                        phase="Running",
                        pod_ip="127.0.0.1",
                    )
                )
                await door.start()  # a new leader resumes the loops from Redis
                status, done = await get(http, f"{base}/m-1?waitSeconds=60", **auth)
                assert (status, done["state"], done["resultText"]) == (200, "done", "answer one")
                status, done = await get(http, f"{base}/m-2?waitSeconds=60", **auth)
                assert (status, done["state"], done["resultText"]) == (200, "done", "answer two")
                status, again = await post(http, base, one, **auth)
                assert (status, again["state"], again["resultText"]) == (200, "done", "answer one")
        finally:
            await door.stop()
            await runtime.close()
        prompts = [r["messages"][-1].get("content") for r in world.model_requests()]
        assert prompts.count("question one") == 1 and prompts.count("question two") == 1
        assert prompts.index("question one") < prompts.index("question two")
        assert await Inbox(redis, 300).active() == {}


async def test_peer_calls_follow_spec_peers_and_refuse_loops(redis: Redis[Any]) -> None:
    tokens = {"uid-a": "token-a", "uid-b": "token-b", "uid-c": "token-c"}
    door = FrontDoor(redis, RuntimeClient(5), tokens)
    a = SessionView(
        "uid-a", "team", "a", keep_alive=True, peers=PeersSpec(names=["b"]), tenant_id="acme"
    )
    b = SessionView(
        "uid-b",
        "team",
        "b",
        labels={"role": "expert"},
        keep_alive=True,
        peers=PeersSpec.model_validate({"selector": {"matchLabels": {"role": "asker"}}}),
    )
    c = SessionView("uid-c", "team", "c", labels={"role": "asker"}, keep_alive=True)
    for view in (a, b, c):
        door.put(view)
    await door.start()
    try:
        async with aiohttp.ClientSession() as http:

            def url(target: str) -> str:
                return f"{door.url}/v1/sessions/team/{target}/messages"

            def as_(uid: str, token: str) -> dict[str, str]:
                return {"Authorization": f"Bearer {token}", "X-Berth-Session-Uid": uid}

            forged = await post(http, url("b"), {"prompt": "q"}, **as_("uid-a", "token-c"))
            assert forged[0] == 401
            status, answer = await post(http, url("c"), {"prompt": "q"}, **as_("uid-a", "token-a"))
            assert status == 403 and "does not allow calling team/c" in answer["message"]
            status, asked = await post(
                http, url("b"), {"prompt": "q", "messageId": "p-1"}, **as_("uid-a", "token-a")
            )
            assert status == 202
            assert asked["peer"] == {
                "fromSessionId": "team/a",
                "fromTenantId": "acme",
                "correlationId": None,
            }
            # b answers a's message (delivered): its own call back to a is a loop
            inbox = Inbox(redis, 300)
            await inbox.delivered("uid-b", "p-1", "run-1")
            status, loop = await post(http, url("a"), {"prompt": "q"}, **as_("uid-b", "token-b"))
            assert status == 403 and "does not allow" in loop["message"]  # a is not b's peer
            door.put(
                SessionView(
                    "uid-b",
                    "team",
                    "b",
                    labels={"role": "expert"},
                    keep_alive=True,
                    peers=PeersSpec(names=["a", "c"]),
                )
            )
            status, loop = await post(http, url("a"), {"prompt": "q"}, **as_("uid-b", "token-b"))
            assert (status, loop["error"]) == (409, "loop"), loop
            assert "team/a → team/b → team/a" in loop["message"]
            status, deeper = await post(
                http, url("c"), {"prompt": "q", "messageId": "p-2"}, **as_("uid-b", "token-b")
            )
            assert status == 202 and (await inbox.get("uid-c", "p-2")) == Message(
                id="p-2",
                session="team/c",
                prompt="q",
                created_ms=deeper["createdMs"],
                peer={"fromSessionId": "team/b", "fromTenantId": None, "correlationId": None},
                chain=["team/a", "team/b"],
            )
    finally:
        await door.stop()


async def test_messages_of_an_unlisted_session_wait_until_it_is_known_to_be_gone(
    redis: Redis[Any],
) -> None:
    door = FrontDoor(redis, RuntimeClient(5), {"uid-a": "token-a"})
    door.put(SessionView("uid-a", "team", "a", keep_alive=True))
    await door.start()
    inbox = Inbox(redis, 300)
    try:
        async with aiohttp.ClientSession() as http:
            status, _ = await post(
                http,
                f"{door.url}/v1/sessions/team/a/messages",
                {"prompt": "q", "messageId": "m-1"},
                Authorization="Bearer token-a",
            )
            assert status == 202
        door.directory.drop("uid-a")  # a new leader whose watch has not listed it yet
        door.put(SessionView("uid-other", "team", "other"))
        await asyncio.sleep(0.5)  # ten polls
        message = await inbox.get("uid-a", "m-1")
        assert message is not None and message.state == "queued"
        door.deleted.add("uid-a")  # the apiserver says it is gone
        door.delivery.kick("uid-a")
        for _ in range(100):
            message = await inbox.get("uid-a", "m-1")
            if message is not None and message.state != "queued":
                break
            await asyncio.sleep(0.05)
        assert message is not None
        assert (message.state, message.error) == ("failed", "the session was deleted")
    finally:
        await door.stop()


async def test_a_token_the_apiserver_cannot_give_now_is_answered_503_with_retry_after(
    redis: Redis[Any],
) -> None:
    door = FrontDoor(redis, RuntimeClient(5), {"uid-a": "token-a"})
    door.put(SessionView("uid-a", "team", "a", keep_alive=True))
    await door.start()
    url = f"{door.url}/v1/sessions/team/a/messages"
    try:
        async with aiohttp.ClientSession() as http:
            door.token_error = KubeError("cannot reach the Kubernetes API")
            async with http.post(
                url, json={"prompt": "q"}, headers={"Authorization": "Bearer token-a"}
            ) as resp:
                body = await resp.json()
                assert (resp.status, resp.headers.get("Retry-After")) == (503, "1")
                assert body["error"] == "unavailable" and "cannot reach" in body["message"]
            assert await Inbox(redis, 300).active() == {}  # nothing was queued
            door.token_error = None
            status, queued = await post(
                http, url, {"prompt": "q", "messageId": "m-1"}, Authorization="Bearer token-a"
            )
            assert (status, queued["state"]) == (202, "queued")
    finally:
        await door.stop()
