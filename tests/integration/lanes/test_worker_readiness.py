"""A LaneWorker pod's readiness probe (``GET /metrics``) is taken by a socket that listens from
the process's first instructions, and answered once the worker is in its consumer group: the
kubelet's first probe, sent as soon as it sees the container running, waits for the worker
instead of being refused and tried again a probe period later."""

from __future__ import annotations

import asyncio
import os
import shutil
import signal
import socket
from typing import Any

import pytest
from redis.asyncio import Redis

from session_runtime.transport import GROUP, task_stream
from tests.unit.runtime.pod.test_early_signals import wait_until_importing

from .conftest import Workers, free_port

NS = "team-r"

pytestmark = pytest.mark.skipif(
    shutil.which("unshare") is None, reason="needs unshare(1) (util-linux)"
)


def probe_while_importing(pid: int, port: int) -> socket.socket:
    """Once ``pid`` imports the runtime: connect to ``port`` and send a probe's request. The
    connection must be taken (not refused) though nothing serves yet."""
    wait_until_importing(pid, "_pydantic_core")
    conn = socket.create_connection(("127.0.0.1", port), timeout=2)
    conn.sendall(b"GET /metrics HTTP/1.1\r\nHost: probe\r\nConnection: close\r\n\r\n")
    conn.settimeout(30)
    return conn


def answer(conn: socket.socket) -> bytes:
    """Everything the server sends until it closes (or resets) the connection."""
    chunks = []
    with conn:
        try:
            while chunk := conn.recv(65536):
                chunks.append(chunk)
        except ConnectionResetError:  # closed with our request unread: never answered
            pass
    return b"".join(chunks)


async def test_a_probe_sent_while_the_worker_imports_is_answered_once_it_joined(
    redis: Redis[Any], workers_factory: Any
) -> None:
    workers: Workers = workers_factory(NS, "pool-ready")
    port = free_port()
    pid = workers.start("w-r", metrics_port=port, pid_1=True)
    conn = probe_while_importing(pid, port)
    reply = await asyncio.to_thread(answer, conn)
    assert reply.startswith(b"HTTP/1.0 200"), reply[:200]
    assert b"berth_worker_capacity 1.0" in reply
    groups = await redis.xinfo_groups(task_stream(NS, "pool-ready"))
    assert [g["name"] for g in groups] in ([GROUP], [GROUP.encode()])
    os.kill(pid, signal.SIGTERM)  # stops, metrics server and all
    assert await asyncio.to_thread(workers.procs["w-r"].wait, 30) == 0, workers.log("w-r")[-2000:]


async def test_a_worker_that_cannot_join_never_answers_the_probe(
    workers_factory: Any,
) -> None:
    """Its Redis refuses connections: the worker exits with an error, and the probe waiting
    in its socket gets no answer (the pod never turns Ready), where it used to get metrics."""
    workers: Workers = workers_factory(NS, "pool-noredis")
    workers.redis_url = f"redis://127.0.0.1:{free_port()}/0"
    port = free_port()
    pid = workers.start("w-n", metrics_port=port, pid_1=True)
    conn = probe_while_importing(pid, port)
    reply = await asyncio.to_thread(answer, conn)
    assert not reply.startswith(b"HTTP/1.0 200"), reply[:200]
    code = await asyncio.to_thread(workers.procs["w-n"].wait, 30)
    assert code != 0
