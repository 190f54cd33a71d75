"""``berth-session`` with its execute lane on a LaneWorker pool over Redis (docs/architecture.md
§7).

Real processes only: Debian's ``redis-server``, one ``berth-worker`` and ``berth-session``. Tool
processes get a scrubbed environment (no ``$POD_NAME``), so where a tool ran is read from Redis:
a task on the pool's stream, delivered to the worker's consumer group, and one side effect.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest
import redis as redis_lib

from berth_contract import names
from session_runtime.transport import GROUP
from tests.integration.server.harness import bash, pod_world, wait_for

Workers = pytest.importorskip("tests.integration.lanes.conftest").Workers

pytestmark = [pytest.mark.redis, pytest.mark.timeout(120)]


def delivered_bash_tasks(redis_url: str, stream: str) -> tuple[int, int]:
    """(bash tasks published on ``stream``, entries the worker group read and acknowledged).
    Only LaneWorkers consume that group, and each test runs a single named worker."""
    client = redis_lib.Redis.from_url(redis_url, decode_responses=True)
    try:
        tasks = [f for _, f in client.xrange(stream) if f.get("command_type") == "bash"]
        [group] = [g for g in client.xinfo_groups(stream) if g["name"] == GROUP]
        return len(tasks), int(group["entries-read"]) - int(group["pending"])
    finally:
        client.close()


def test_execute_lane_runs_on_the_lane_worker(tmp_path: Path, redis_url: str) -> None:
    script = {
        "turns": [
            {
                "tool_calls": [
                    bash("echo ran >> who.txt"),
                    {"name": "ls", "arguments": {}},
                ]
            },
            {"text": "done remotely"},
        ]
    }
    lanes = {
        "execute": {
            "mode": "external",
            "timeoutSeconds": 30,
            "laneWorker": {"name": "pool", "taskStream": names.task_stream("team-a", "pool")},
        }
    }
    with pod_world(tmp_path, script, lanes=lanes) as world:
        workers = Workers(redis_url, world.namespace, "pool", tmp_path)
        workers.start("worker-1")
        try:
            pod = world.start(
                epoch=1, BERTH_REDIS_URL=redis_url, BERTH_WORKSPACE_ROOT=str(world.workspace)
            )
            assert pod.wait_exit() == 0, pod.stderr() + workers.log("worker-1")
        finally:
            workers.stop_all()
        msg = pod.termination()
        assert (msg["outcome"], msg["resultText"]) == ("completed", "done remotely")
        assert world.lines("who.txt") == ["ran"]  # once
        # On the worker, not in the session pod: published to the pool and delivered to it.
        assert delivered_bash_tasks(redis_url, names.task_stream("team-a", "pool")) == (1, 1)


def test_reply_delivered_while_passivated_is_used_on_resume(tmp_path: Path, redis_url: str) -> None:
    """A deadline cuts off a remote tool; its worker still answers; the next epoch reuses that
    answer from the session's reply stream instead of running the tool again (docs/architecture.md
    §6)."""
    script = {
        "turns": [
            {
                "tool_calls": [
                    bash(
                        "echo ran >> who.txt; "
                        "while [ ! -f go ]; do sleep 0.05; done; echo remote-finished"
                    )
                ]
            },
            {"text": "resumed with the worker's answer"},
        ]
    }
    lanes = {"execute": {"mode": "external", "timeoutSeconds": 60, "laneWorker": {"name": "p2"}}}
    with pod_world(tmp_path, script, lanes=lanes) as world:
        workers = Workers(redis_url, world.namespace, "p2", tmp_path)
        workers.start("worker-9")
        extra = {"BERTH_REDIS_URL": redis_url}
        try:
            first = world.start(epoch=1, tag="a", **extra)
            first.wait_ready()
            wait_for("the remote tool to start", lambda: world.lines("who.txt"))
            run_id = first.state()["runId"]
            deadline = int(time.time() * 1000) + 300
            status, _ = first.request(
                "POST", "/v1/passivate", {"reason": "node_drain", "deadlineMs": deadline}
            )
            assert status == 202
            assert first.wait_exit() == 0, first.stderr()
            msg = first.termination()
            assert msg["outcome"] == "passivated"
            assert msg["reason"].startswith("node_drain (deadline passed")

            world.touch("go")  # the worker's tool finishes and replies to the session's stream
            replies = names.reply_stream(world.namespace, world.uid)
            client = redis_lib.Redis.from_url(redis_url)
            try:
                wait_for("the worker's reply", lambda: client.xlen(replies) > 0)
            finally:
                client.close()

            second = world.start(epoch=2, resume_run_id=run_id, tag="b", **extra)
            assert second.wait_exit() == 0, second.stderr() + workers.log("worker-9")
        finally:
            workers.stop_all()
        done = second.termination()
        assert (done["outcome"], done["resultText"]) == (
            "completed",
            "resumed with the worker's answer",
        )
        assert world.lines("who.txt") == ["ran"]  # ran once, on the worker:
        stream = names.task_stream(world.namespace, "p2")
        assert delivered_bash_tasks(redis_url, stream) == (1, 1)
        last = world.model_requests()[-1]["messages"]
        tool_outputs = [m["content"] for m in last if m.get("role") == "tool"]
        assert len(tool_outputs) == 1 and "remote-finished" in tool_outputs[0]
