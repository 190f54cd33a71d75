"""One trace across the lane transport: a real Session sends a bash call over Redis Streams to a
LaneWorker (in this process, so one in-memory exporter sees both sides), and the worker's
execution span is a child of the session's tool-call span, with the task's session and labels."""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind
from redis.asyncio import Redis

from berth_contract import tracing as names
from berth_contract.taskauth import derive_session_key
from session_runtime import Agent, SessionOptions
from session_runtime.lanes import LaneQueue, SessionQueueConfig
from session_runtime.llm.scripted import ScriptedServer
from session_runtime.tools import DirectExecutor
from session_runtime.transport import RedisTaskTransport
from session_runtime.worker.lane import LaneWorker
from session_runtime.worker.settings import WorkerSettings
from tests.trace_support import exporter, ids, parent_id

from .conftest import MASTER
from .test_redis_lanes import NS

pytestmark = [pytest.mark.redis, pytest.mark.timeout(120)]

SCRIPT = [
    {"tool_calls": [{"name": "bash", "arguments": {"command": "echo traced > t.txt"}}]},
    {"text": "done"},
]


@pytest.fixture
def spans() -> Iterator[InMemorySpanExporter]:
    exp = exporter()
    exp.clear()
    yield exp
    exp.clear()


async def test_worker_span_is_a_child_of_the_tool_call_span(
    redis: Redis[Any], redis_url: str, shared_root: Path, spans: InMemorySpanExporter
) -> None:
    model = ScriptedServer(SCRIPT)
    await model.start()
    workspace = shared_root / "workspaces" / NS / "s1"
    workspace.mkdir(parents=True)
    settings = WorkerSettings.from_env(
        {
            "BERTH_REDIS_URL": redis_url,
            "BERTH_NAMESPACE": NS,
            "BERTH_LANEWORKER": "pool-trace",
            "POD_NAME": "pool-trace-0",
            "BERTH_WORKSPACES_ROOT": str(shared_root / "workspaces"),
            "BERTH_TASK_MASTER_KEY_FILE": str(shared_root.parent / "master"),
        },
        [],
    )
    ready = asyncio.Event()
    worker = LaneWorker(settings, Redis.from_url(redis_url))
    serving = asyncio.create_task(worker.run(ready=ready.set))
    await ready.wait()
    config = SessionQueueConfig().with_lane_features()
    config.set_lane_handler("execute", "external", 30_000)
    transport = RedisTaskTransport(
        redis,
        namespace=NS,
        session_name="s1",
        session_uid=uuid.uuid4().hex,
        epoch=2,
        lane_workers={"execute": "pool-trace"},
        shared_root=str(workspace),
        task_key=derive_session_key(MASTER, NS, "s1"),
        labels={"tenant_id": "acme", "principal": None},
    )
    queue = LaneQueue(config, runner=DirectExecutor(), transport=transport)
    agent = Agent.create({"providers": {"openai": {"base_url": model.base_url, "api_key": "k"}}})
    options = SessionOptions(llm_backoff_ms=1, tenant_id="acme")
    session = agent.session(str(workspace), options, executor=queue)
    try:
        result = await session.send_async("run it")
    finally:
        await agent.close_async()
        worker.stop()
        with contextlib.suppress(asyncio.CancelledError):
            await serving
        await model.stop()
    assert result.text == "done" and (workspace / "t.txt").read_text() == "traced\n"
    got = spans.get_finished_spans()
    (call,) = [s for s in got if s.name == "execute_tool bash" and s.kind == SpanKind.INTERNAL]
    (run,) = [s for s in got if s.name == "execute_tool bash" and s.kind == SpanKind.CONSUMER]
    assert ids(run)[0] == ids(call)[0] and parent_id(run) == ids(call)[1]
    attrs = run.attributes or {}
    assert (attrs[names.SESSION], attrs[names.EPOCH]) == (f"{NS}/s1", 2)
    assert attrs[names.TENANT] == "acme" and names.PRINCIPAL not in attrs
    assert (call.attributes or {})[names.LANE] == "execute"
    assert (call.attributes or {})[names.WORKER] == "pool-trace-0"
