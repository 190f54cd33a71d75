"""Behaviour of LaneQueue against a real in-process runner: ordering, priority, modes, retries,
DLQ, rate limit, boost, timeouts, events and stats. Each test fails if its feature is removed."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import pytest

from session_runtime.lanes import (
    ExternalReply,
    LaneQueue,
    PriorityBoostConfig,
    RateLimitConfig,
    RetryPolicyConfig,
    SessionQueueConfig,
)
from session_runtime.tools.base import ToolCall, ToolResult

from .conftest import CTX, Events, GateRunner, ManualClock, until


def call(cid: str, name: str = "bash") -> ToolCall:
    return ToolCall(cid, name, {"command": cid} if name == "bash" else {"file_path": cid})


async def collect(_: ToolResult) -> None:
    return None


async def test_turn_runs_query_calls_in_parallel_and_the_rest_in_order() -> None:
    runner = GateRunner(auto=False)
    queue = LaneQueue(SessionQueueConfig(), runner=runner)
    calls = [
        call("r1", "read"),
        call("r2", "grep"),
        call("w1", "write"),
        call("b1"),
        call("r3", "ls"),
    ]
    seen: list[str] = []

    async def on_result(r: ToolResult) -> None:
        seen.append(r.tool_call_id)

    turn = asyncio.create_task(queue.execute(calls, CTX, on_result))
    await until(lambda: len(runner.started) == 2)
    assert runner.started == ["r1", "r2"] and runner.running == 2  # both reads at once
    runner.gate("r2").set()
    await until(lambda: seen == ["r2"])
    assert runner.started == ["r1", "r2"]  # the write waits for the whole read group
    runner.gate("r1").set()
    await until(lambda: "w1" in runner.started)
    assert runner.started[-1] == "w1" and "b1" not in runner.started  # execute calls one by one
    for cid in ("w1", "b1", "r3"):
        runner.gate(cid).set()
    results = await turn
    assert [r.tool_call_id for r in results] == ["r1", "r2", "w1", "b1", "r3"]
    assert runner.started == ["r1", "r2", "w1", "b1", "r3"]
    assert seen == ["r2", "r1", "w1", "b1", "r3"]  # on_result fires as each arrives


@pytest.mark.parametrize("total_cap", [None, 1])
async def test_query_submitted_after_queued_execute_runs_before_them(total_cap: int | None) -> None:
    runner = GateRunner(auto=False)
    cfg = SessionQueueConfig(execute_max_concurrency=1, max_total_concurrency=total_cap)
    queue = LaneQueue(cfg, runner=runner)
    e1 = asyncio.create_task(queue.submit(call("e1"), CTX))
    await until(lambda: runner.started == ["e1"])
    rest = [asyncio.create_task(queue.submit(call(c), CTX)) for c in ("e2", "e3")]
    await until(lambda: queue.queue_stats()["total_pending"] == 2)
    q = asyncio.create_task(queue.submit(call("q1", "read"), CTX))
    if total_cap is None:
        await until(lambda: "q1" in runner.started)  # query lane has its own free slots
    else:
        await asyncio.sleep(0)
        assert runner.started == ["e1"]  # the queue-wide slot is taken
        runner.gate("e1").set()
        await until(lambda: len(runner.started) == 2)
    assert runner.started[1] == "q1"
    for cid in ("e1", "q1", "e2", "e3"):
        runner.gate(cid).set()
    await asyncio.gather(e1, q, *rest)
    assert runner.started.index("q1") < runner.started.index("e2") < runner.started.index("e3")


@pytest.mark.parametrize(("boost", "first"), [("standard", "g1"), ("disabled", "q1")])
async def test_priority_boost_lets_an_old_command_jump_ahead(boost: str, first: str) -> None:
    clock = ManualClock()
    runner = GateRunner(auto=False)
    cfg = SessionQueueConfig(
        max_total_concurrency=1,
        priority_boost=PriorityBoostConfig(boost, deadline_ms=1000),  # type: ignore[arg-type]
    )
    queue = LaneQueue(cfg, runner=runner, clock=clock)
    blocker = asyncio.create_task(queue.submit(call("c0", "read"), CTX, lane="control"))
    await until(lambda: runner.started == ["c0"])
    g = asyncio.create_task(queue.submit(call("g1"), CTX, lane="generate"))  # priority 3
    await until(lambda: queue.queue_stats()["total_pending"] == 1)
    clock.advance(800)  # 20 % of g1's deadline left: +3 with "standard"
    q = asyncio.create_task(queue.submit(call("q1", "read"), CTX))  # priority 1, fresh
    await until(lambda: queue.queue_stats()["total_pending"] == 2)
    runner.gate("c0").set()
    await until(lambda: len(runner.started) == 2)
    assert runner.started[1] == first
    for cid in ("g1", "q1"):
        runner.gate(cid).set()
    await asyncio.gather(blocker, g, q)


async def test_retries_idempotent_lane_with_policy_then_succeeds(events: Events) -> None:
    runner = GateRunner()
    runner.fail = {"r1": 2}
    cfg = SessionQueueConfig(
        retry_policy=RetryPolicyConfig("fixed", 3, fixed_delay_ms=1)
    ).with_lane_features()
    queue = LaneQueue(cfg, runner=runner, emit=events)
    result = await queue.submit(call("r1", "read"), CTX)
    assert not result.is_error and runner.calls["r1"] == 3
    await queue.close()
    assert [e["attempt"] for e in events.of("command_retry")] == [1, 2]
    assert queue.dead_letters() == []
    metrics = queue.queue_metrics()
    assert metrics is not None and metrics["lanes"]["query"]["counters"]["retried"] == 2


async def test_execute_lane_is_not_retried_unless_configured() -> None:
    policy = RetryPolicyConfig("fixed", 3, fixed_delay_ms=1)
    runner = GateRunner()
    runner.fail = {"b1": 1, "b2": 1}
    queue = LaneQueue(SessionQueueConfig(retry_policy=policy), runner=runner)
    failed = await queue.submit(call("b1"), CTX)
    assert failed.is_error and runner.calls["b1"] == 1 and "transient failure" in failed.output
    opted_in = LaneQueue(
        SessionQueueConfig(retry_policy=policy, retry_lanes=frozenset({"query", "execute"})),
        runner=runner,
    )
    assert not (await opted_in.submit(call("b2"), CTX)).is_error
    assert runner.calls["b2"] == 2


async def test_dead_letter_after_retries_exhausted(events: Events) -> None:
    runner = GateRunner()
    runner.fail = {"r1": 99}
    cfg = SessionQueueConfig(
        retry_policy=RetryPolicyConfig("exponential", 2, initial_delay_ms=1)
    ).with_lane_features()
    queue = LaneQueue(cfg, runner=runner, emit=events)
    result = await queue.submit(call("r1", "read"), CTX)
    assert result.is_error and runner.calls["r1"] == 3
    [dead] = queue.dead_letters()
    assert (dead["command_id"], dead["command_type"], dead["lane"], dead["attempts"]) == (
        "r1",
        "read",
        "query",
        3,
    )
    assert "transient failure" in dead["error"] and isinstance(dead["failed_at"], int)
    await queue.close()
    assert events.of("command_dead_lettered")[0]["command_id"] == "r1"
    # DLQ off: nothing recorded; DLQ bounded by dlq_max_size.
    off = LaneQueue(SessionQueueConfig(), runner=runner)
    await off.submit(call("r1", "read"), CTX)
    assert off.dead_letters() == []
    small = LaneQueue(SessionQueueConfig(enable_dlq=True, dlq_max_size=2), runner=runner)
    runner.fail.update({"x1": 1, "x2": 1, "x3": 1})
    for cid in ("x1", "x2", "x3"):
        await small.submit(call(cid), CTX)
    assert [d["command_id"] for d in small.dead_letters()] == ["x2", "x3"]


async def test_rate_limit_holds_starts_beyond_the_window() -> None:
    clock = ManualClock()
    runner = GateRunner()
    cfg = SessionQueueConfig(rate_limit=RateLimitConfig("per_second", 2), enable_metrics=True)
    queue = LaneQueue(cfg, runner=runner, clock=clock)
    tasks = [asyncio.create_task(queue.submit(call(f"r{i}", "read"), CTX)) for i in range(3)]
    await until(lambda: len(runner.started) == 2)
    for _ in range(50):
        await asyncio.sleep(0)
    assert len(runner.started) == 2 and queue.queue_stats()["total_pending"] == 1
    metrics = queue.queue_metrics()
    assert metrics is not None and metrics["lanes"]["query"]["counters"]["rate_limited"] >= 1
    clock.advance(1000)  # the window has passed: the limiter's wake-up admits the third
    await asyncio.gather(*tasks)
    assert len(runner.started) == 3


async def test_external_mode_waits_for_completion(events: Events) -> None:
    queue = LaneQueue(SessionQueueConfig(), runner=GateRunner(), emit=events)
    queue.set_lane_handler("execute", "external", 60_000)
    pending = asyncio.create_task(queue.submit(call("b1"), CTX))
    await until(lambda: len(queue.pending_external_tasks()) == 1)
    [task] = queue.pending_external_tasks()
    assert task["command_type"] == "bash" and task["payload"] == {"command": "b1"}
    assert task["lane"] == "execute" and task["session_id"] == "s-1" and task["remaining_ms"] > 0
    assert queue.queue_stats()["external_pending"] == 1
    assert queue.complete_external_task(task["task_id"], True, {"output": "ok", "exit_code": 0})
    result = await pending
    assert (result.output, result.is_error) == ("ok", False)
    assert not queue.complete_external_task(task["task_id"], True, {})  # already done
    # failure without a message
    second = asyncio.create_task(queue.submit(call("b2"), CTX))
    await until(lambda: len(queue.pending_external_tasks()) == 1)
    queue.complete_external_task(queue.pending_external_tasks()[0]["task_id"], False)
    assert (await second).output == "External task failed"
    await queue.close()
    assert len(events.of("external_task_pending")) == 2
    assert [e["success"] for e in events.of("external_task_completed")] == [True, False]


async def test_external_completion_from_another_thread() -> None:
    queue = LaneQueue(SessionQueueConfig(), runner=GateRunner())
    queue.set_lane_handler("execute", "external")
    pending = asyncio.create_task(queue.submit(call("b1"), CTX))
    await until(lambda: len(queue.pending_external_tasks()) == 1)
    task_id = queue.pending_external_tasks()[0]["task_id"]
    worker = threading.Thread(
        target=queue.complete_external_task, args=(task_id, True, {"output": "x", "exit_code": 0})
    )
    worker.start()
    result = await pending
    worker.join()
    assert result.output == "x"


async def test_external_task_times_out_as_tool_failure() -> None:
    queue = LaneQueue(SessionQueueConfig(), runner=GateRunner())
    queue.set_lane_handler("execute", "external", timeout_ms=20)
    result = await queue.submit(call("b1"), CTX)
    assert result.is_error and "timed out after 20 ms" in result.output
    # A worker may have run it and its reply been lost (a Redis restart): the model must not
    # read the failure as "it did not happen" (found by the crash campaign, seed 121).
    assert "side effects are unknown" in result.output
    assert queue.pending_external_tasks() == []


async def test_modes_switch_at_run_time_and_hybrid_announces(events: Events) -> None:
    runner = GateRunner()
    queue = LaneQueue(SessionQueueConfig(), runner=runner, emit=events)
    await queue.submit(call("b1"), CTX)
    queue.set_lane_handler("execute", "hybrid")
    assert (await queue.submit(call("b2"), CTX)).output == "ran b2"
    queue.set_lane_handler("execute", "internal")
    await queue.submit(call("b3"), CTX)
    await queue.close()
    assert runner.started == ["b1", "b2", "b3"]
    assert [e["command_type"] for e in events.of("external_task_pending")] == ["bash"]
    assert queue.queue_stats()["lanes"]["execute"]["handler_mode"] == "internal"


async def test_lane_timeout_overrides_default_timeout() -> None:
    runner = GateRunner()
    runner.hang = {"r1", "b1"}
    cfg = SessionQueueConfig(default_timeout_ms=30, lane_timeouts={"query": 10})
    queue = LaneQueue(cfg, runner=runner)
    r = await queue.submit(call("r1", "read"), CTX)
    b = await queue.submit(call("b1"), CTX)
    assert "timed out after 10 ms" in r.output and "timed out after 30 ms" in b.output


async def test_pressure_idle_and_depth_alert_events(events: Events) -> None:
    runner = GateRunner(auto=False)
    cfg = SessionQueueConfig(
        execute_max_concurrency=1,
        pressure_threshold=2,
        enable_alerts=True,
        alert_warning_depth=1,
        alert_critical_depth=2,
    )
    queue = LaneQueue(cfg, runner=runner, emit=events)
    tasks = [asyncio.create_task(queue.submit(call(f"b{i}"), CTX)) for i in range(4)]
    await until(lambda: queue.queue_stats()["total_pending"] == 3)
    for i in range(4):
        runner.gate(f"b{i}").set()
    await asyncio.gather(*tasks)
    await queue.close()
    assert [e["lane"] for e in events.of("queue_lane_pressure")] == ["execute"]
    assert [e["level"] for e in events.of("queue_alert")] == ["warning", "critical"]
    assert [e["lane"] for e in events.of("queue_lane_idle")] == ["execute"]


async def test_stats_and_metrics_shapes() -> None:
    queue = LaneQueue(SessionQueueConfig(), runner=GateRunner())
    await queue.submit(call("r1", "read"), CTX)
    stats = queue.queue_stats()
    assert set(stats) == {"total_pending", "total_active", "external_pending", "lanes"}
    assert stats["lanes"]["query"] == {
        "pending": 0,
        "active": 0,
        "max_concurrency": 4,
        "handler_mode": "internal",
        "completed": 1,
        "failed": 0,
    }
    assert queue.queue_metrics() is None  # metrics off
    on = LaneQueue(SessionQueueConfig(enable_metrics=True), runner=GateRunner())
    await on.submit(call("r1", "read"), CTX)
    m = on.queue_metrics()
    assert m is not None
    assert m["lanes"]["query"]["counters"]["completed"] == 1
    assert m["lanes"]["query"]["latency_ms"]["run"]["count"] == 1.0


async def test_cancelled_waiter_frees_its_place() -> None:
    runner = GateRunner(auto=False)
    queue = LaneQueue(SessionQueueConfig(execute_max_concurrency=1), runner=runner)
    first = asyncio.create_task(queue.submit(call("b1"), CTX))
    await until(lambda: runner.started == ["b1"])
    second = asyncio.create_task(queue.submit(call("b2"), CTX))
    await until(lambda: queue.queue_stats()["total_pending"] == 1)
    second.cancel()
    with pytest.raises(asyncio.CancelledError):
        await second
    assert queue.queue_stats()["total_pending"] == 0
    runner.gate("b1").set()
    await first
    third = asyncio.create_task(queue.submit(call("b3"), CTX))
    runner.gate("b3").set()
    await third
    assert runner.started == ["b1", "b3"] and queue.queue_stats()["total_active"] == 0


class FlakyTransport:
    """An ExternalTransport whose reply lookups fail ``failures`` times (Redis restarting)
    before they answer; publishing is never used here."""

    reply_grace_ms = 0

    def __init__(self, failures: int) -> None:
        self.failures = failures
        self.lookups = 0

    async def start(self, sink: Any) -> None:
        return None

    async def publish(self, task: Any, ctx: Any) -> None:
        raise AssertionError("not used")

    async def settle(self, reply: ExternalReply) -> None:
        return None

    async def find_reply(self, tool_call_id: str) -> ExternalReply | None:
        self.lookups += 1
        if self.lookups <= self.failures:
            raise ConnectionError("Connection reset by peer")
        return ExternalReply("t1", tool_call_id, True, {"output": "ran on a worker"})

    async def close(self) -> None:
        return None


async def test_recover_rides_out_a_transport_blip_and_never_fails_the_resume() -> None:
    """A resume asks the transport for replies delivered while the session was down. Redis
    restarting at that moment must not fail the whole resume (found by the crash campaign,
    seed 700): the lookup is retried, and if the transport stays unreachable the call is
    settled as not recovered (reported interrupted, side effects unknown)."""
    blip = FlakyTransport(failures=1)
    queue = LaneQueue(SessionQueueConfig(), runner=GateRunner(), transport=blip)
    recovered = await queue.recover(call("b1"), CTX)
    assert recovered is not None and recovered.output == "ran on a worker"
    down = FlakyTransport(failures=10**6)
    queue = LaneQueue(SessionQueueConfig(), runner=GateRunner(), transport=down)
    assert await queue.recover(call("b1"), CTX) is None
    assert down.lookups > 1
