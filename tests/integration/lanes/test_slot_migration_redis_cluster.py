"""Slots move between primaries of a real local Redis Cluster while a session runs tasks through
real ``berth-worker`` processes, and nothing is lost or run twice.

The pool's slot (task stream, liveness keys) and the session's slot (reply stream, task-id
claims) are migrated back and forth, a few keys per ``MIGRATE``, for as long as the tasks run, so
clients meet ``ASK`` redirections, ``TRYAGAIN`` on scripts whose keys are split mid-move, and
``MOVED`` afterwards — all handled by redis-py's cluster client. Every task appends its id to a
file: each id must be there exactly once, and every call must be answered with its own output.
"""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path
from typing import Any

import pytest
from redis.asyncio import Redis
from redis.cluster import key_slot

from session_runtime.transport import alive_key, reply_stream, task_stream
from tests.integration.redis_cluster import LocalCluster

from .conftest import Workers
from .test_redis_lanes import NS, Session, bash, consumers, until

pytestmark = [pytest.mark.redis, pytest.mark.timeout(180)]

ROUNDS, CALLS = 6, 8


@pytest.fixture(scope="module")
def redis_url(redis_cluster_url: str) -> str:
    """The shared local cluster."""
    return redis_cluster_url


def _keep_moving(cluster: LocalCluster, slots: list[int], stop: threading.Event) -> list[int]:
    """Migrate each of ``slots`` to another primary, 10 keys per ``MIGRATE`` (as ``redis-cli
    --cluster reshard`` does), round after round with a short rest, until ``stop``; the ports
    the slots went to."""
    moves: list[int] = []
    while not stop.wait(0.1):
        for slot in slots:
            moves.append(cluster.migrate_slot(slot, batch=10))
    return moves


async def test_tasks_survive_slot_migrations_and_run_once(
    redis: Redis[Any],
    shared_root: Path,
    workers_factory: Any,
    local_redis_cluster: LocalCluster,
) -> None:
    workers: Workers = workers_factory(NS, "pool-move")
    workers.start("m-1", concurrency=4)
    workers.start("m-2", concurrency=4)
    await until(lambda: consumers(redis, "pool-move", 2), "both workers up")
    s = Session(redis, shared_root, "pool-move", execute_max_concurrency=8)
    slots = [
        key_slot(task_stream(NS, "pool-move").encode()),
        key_slot(reply_stream(NS, s.uid).encode()),
    ]
    assert key_slot(alive_key(NS, "pool-move", "m-1").encode()) == slots[0]
    stop = threading.Event()
    mover = asyncio.create_task(asyncio.to_thread(_keep_moving, local_redis_cluster, slots, stop))
    answered: dict[str, str] = {}
    try:
        for r in range(ROUNDS):
            ids = [f"r{r}c{i}" for i in range(CALLS)]
            calls = [bash(cid, f"echo {cid} >> ran.txt; echo {cid}") for cid in ids]
            for result in await s.run(*calls):
                answered[result.tool_call_id] = result.output
    finally:
        stop.set()
        moves = await mover
    print(f"{len(moves)} slot moves during the run")
    assert len(moves) >= 2, "the slots never moved during the run"
    expected = {f"r{r}c{i}" for r in range(ROUNDS) for i in range(CALLS)}
    assert set(answered) == expected
    for call_id, output in answered.items():
        assert output.strip() == call_id, (call_id, output)
    ran = s.workspace.joinpath("ran.txt").read_text().split()
    assert sorted(ran) == sorted(expected), "a task ran twice or never"
