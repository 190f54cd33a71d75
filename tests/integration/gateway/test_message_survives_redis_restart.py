"""A front-door message queued before a restart of the chart's Redis is delivered once after it.

Real pieces: the chart's bundled Redis (``ChartRedis``: its rendered redis.conf with the
append-only file, its ACL users; the front door connects as ``berth-operator``), the front door's
inbox, delivery loops and aiohttp service, and a real ``berth-session`` process that dedupes
message ids in its store. Redis is stopped as the kubelet stops its pod (SIGTERM) while the
message waits for a pod, started again on the same files, and a new front door (a new leader
after the restart) delivers it.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import aiohttp
from berth_operator.gateway.inbox import Inbox
from berth_operator.gateway.routing import SessionView
from berth_operator.runtime_client import RuntimeClient

from tests.integration.chart_redis import ChartRedis
from tests.integration.gateway.test_gateway import SCRIPT, FrontDoor, get, post
from tests.integration.server.harness import pod_world


async def test_a_queued_message_survives_a_redis_restart_and_runs_once(
    tmp_path: Path, chart_redis: ChartRedis
) -> None:
    with pod_world(tmp_path / "world", SCRIPT, keepAlive=True) as world:
        pod = world.start(epoch=1)
        await asyncio.to_thread(pod.wait_ready)
        await asyncio.to_thread(pod.wait_state, lambda s: s["state"] == "idle", "idle")
        runtime = RuntimeClient(10, session_port=int(pod.base_url.rsplit(":", 1)[1]))
        redis = chart_redis.operator()
        door = FrontDoor(redis, runtime, {world.uid: world.token})
        door.put(SessionView(world.uid, world.namespace, world.name, keep_alive=True))
        await door.start()  # no pod known yet: the message waits in Redis
        base = f"{door.url}/v1/sessions/{world.namespace}/{world.name}/messages"
        auth = {"Authorization": f"Bearer {world.token}"}
        try:
            async with aiohttp.ClientSession() as http:
                status, queued = await post(
                    http, base, {"prompt": "question one", "messageId": "m-1"}, **auth
                )
                assert (status, queued["state"]) == (202, "queued"), queued
                await door.stop()
                await redis.aclose()

                chart_redis.restart()

                redis = chart_redis.operator()
                door = FrontDoor(redis, runtime, {world.uid: world.token})
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
                await door.start()  # resumes the queues it finds in Redis
                base = f"{door.url}/v1/sessions/{world.namespace}/{world.name}/messages"
                status, done = await get(http, f"{base}/m-1?waitSeconds=60", **auth)
                assert (status, done["state"], done["resultText"]) == (200, "done", "answer one")
                assert done["createdMs"] == queued["createdMs"]  # the same record, not a new one
        finally:
            await door.stop()
            await runtime.close()
        assert await Inbox(redis, 300).active() == {}
        await redis.aclose()
        prompts = [r["messages"][-1].get("content") for r in world.model_requests()]
        assert prompts.count("question one") == 1, prompts
