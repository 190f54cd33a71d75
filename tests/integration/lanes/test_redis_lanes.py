"""The lane queue over Redis Streams with real ``berth-worker`` processes (docs/architecture.md §7).

Every wait here is "until a condition holds" (bounded by the test timeout); no assertion is about
elapsed time. Side effects are counted in files the tools append to.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import signal
import subprocess
import urllib.request
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from berth_operator.stream_pressure import stream_pressure
from redis.asyncio import Redis

from berth_contract.taskauth import derive_session_key, sign_fields
from session_runtime.lanes import LaneQueue, SessionQueueConfig
from session_runtime.tools import DirectExecutor, ToolCall, ToolContext, ToolResult
from session_runtime.transport import (
    GROUP,
    RedisTaskTransport,
    TaskMessage,
    alive_key,
    dead_letter_stream,
    task_stream,
)
from tests.unit.runtime.pod.test_early_signals import wait_until_importing

from .conftest import MASTER, Workers, free_port

pytestmark = [pytest.mark.redis, pytest.mark.timeout(120)]

NS = "team-a"


async def until(predicate: Callable[[], Any], what: str, tries: int = 1200) -> None:
    """Poll ``predicate`` (sync or async) every 50 ms until true; fail after ``tries``."""
    for _ in range(tries):
        value = predicate()
        if asyncio.iscoroutine(value):
            value = await value
        if value:
            return
        await asyncio.sleep(0.05)
    raise AssertionError(f"never happened: {what}")


def lines(path: Path) -> int:
    return len(path.read_text().splitlines()) if path.exists() else 0


class Session:
    """A session's side: workspace, context, queue with an external execute lane over Redis."""

    def __init__(
        self,
        redis: Redis[Any],
        shared_root: Path,
        laneworker: str,
        uid: str | None = None,
        timeout_ms: int = 30_000,
        grace_ms: int = 10_000,
        **config: Any,
    ) -> None:
        self.uid = uid or uuid.uuid4().hex
        self.workspace = shared_root / "workspaces" / NS / "s1"
        self.workspace.mkdir(parents=True, exist_ok=True)
        self.key = derive_session_key(MASTER, NS, "s1")
        self.ctx = ToolContext("s1", str(self.workspace), "run-1", 1)
        cfg = SessionQueueConfig(**config).with_lane_features()
        cfg.set_lane_handler("execute", "external", timeout_ms)
        self.transport = RedisTaskTransport(
            redis,
            namespace=NS,
            session_name="s1",
            session_uid=self.uid,
            epoch=1,
            lane_workers={"execute": laneworker},
            shared_root=str(self.workspace),
            task_key=self.key,
            reply_grace_ms=grace_ms,
        )
        self.events: list[dict[str, Any]] = []
        self.queue = LaneQueue(
            cfg, emit=self._emit, runner=DirectExecutor(), transport=self.transport
        )
        self.journal: list[ToolResult] = []

    async def _emit(self, event: dict[str, Any]) -> None:
        self.events.append(event)

    async def on_result(self, result: ToolResult) -> None:
        self.journal.append(result)

    async def run(self, *calls: ToolCall) -> list[ToolResult]:
        return await self.queue.execute(list(calls), self.ctx, self.on_result)


async def consumers(redis: Redis[Any], laneworker: str, n: int) -> bool:
    """``n`` workers of the pool are up (their liveness keys exist; SCAN visits every primary
    of a cluster)."""
    pattern = alive_key(NS, laneworker, "x")[:-1] + "*"
    return len([key async for key in redis.scan_iter(match=pattern)]) == n


async def all_acknowledged(redis: Redis[Any], laneworker: str) -> bool:
    """The pool's stream has no entry waiting or held. (On a cluster the worker's XACK follows
    the reply, the task stream being in another slot, so a test that has its result waits.)"""
    pressure = await stream_pressure(redis, task_stream(NS, laneworker), GROUP)
    return pressure["backlog"] == 0 and pressure["inFlight"] == 0


def bash(cid: str, command: str) -> ToolCall:
    return ToolCall(cid, "bash", {"command": command})


GATED = "echo run >> count.txt; while [ ! -f go ]; do sleep 0.05; done; echo finished"


async def holder_of(redis: Redis[Any], stream: str) -> str:
    pending = await redis.xpending_range(stream, GROUP, min="-", max="+", count=10)
    [entry] = pending
    holder = entry["consumer"]
    return holder.decode() if isinstance(holder, bytes) else str(holder)


async def test_multi_tool_run_served_by_two_workers(
    redis: Redis[Any], shared_root: Path, workers_factory: Any
) -> None:
    workers: Workers = workers_factory(NS, "pool-run")
    port = free_port()
    workers.start("w-1", metrics_port=port)
    workers.start("w-2")
    await until(lambda: consumers(redis, "pool-run", 2), "both workers joined the group")
    s = Session(redis, shared_root, "pool-run")
    calls = [
        ToolCall("c1", "write", {"file_path": "notes/a.txt", "content": "alpha\n"}),
        bash("c2", "cat notes/a.txt >> log.txt && echo appended"),
        ToolCall(
            "c3", "edit", {"file_path": "notes/a.txt", "old_string": "alpha", "new_string": "beta"}
        ),
        ToolCall("c4", "read", {"file_path": "notes/a.txt"}),
        ToolCall("c5", "ls", {"path": "notes"}),
        bash("c6", "exit 3"),
        ToolCall(
            "c7", "edit", {"file_path": "notes/a.txt", "old_string": "nope", "new_string": "x"}
        ),
    ]
    results = await s.run(*calls)
    assert [r.tool_call_id for r in results] == [c.id for c in calls]
    journaled = [r.tool_call_id for r in s.journal]
    assert sorted(journaled) == sorted(c.id for c in calls)  # each result journaled once
    # c4 (read) and c5 (ls) are consecutive query-lane calls: they run in parallel and are
    # journaled as they finish; every other call runs alone, in order.
    assert [i for i in journaled if i not in ("c4", "c5")] == ["c1", "c2", "c3", "c6", "c7"]
    by_id = {r.tool_call_id: r for r in results}
    assert (s.workspace / "notes" / "a.txt").read_text() == "beta\n"
    assert (s.workspace / "log.txt").read_text() == "alpha\n"
    assert "appended" in by_id["c2"].output and by_id["c2"].exit_code == 0
    assert "beta" in by_id["c4"].output and "worker" not in by_id["c4"].metadata  # query: here
    for cid in ("c1", "c2", "c3", "c6", "c7"):
        assert by_id[cid].metadata["worker"] in {"w-1", "w-2"}  # execute: on a LaneWorker
    # A tool that ran and failed is a result (success on the wire), not an infrastructure failure.
    assert by_id["c6"].exit_code == 3 and "External task failed" not in by_id["c6"].output
    assert by_id["c7"].is_error and by_id["c7"].metadata["worker"] in {"w-1", "w-2"}
    assert s.queue.dead_letters() == []
    # Replies are dropped from the reply stream once journaled.
    await until(lambda: _xlen_is(redis, s.transport.reply_stream, 0), "settled replies deleted")
    assert len([e for e in s.events if e["type"] == "external_task_pending"]) == 5
    await until(lambda: all_acknowledged(redis, "pool-run"), "every task acknowledged")
    # Two sessions whose tasks wait on one gate: both can only be running at once if both
    # workers (concurrency 1 each) serve the pool. Each tool runs exactly once.
    others = [Session(redis, shared_root, "pool-run") for _ in range(2)]
    gated = "echo x >> many.txt; while [ ! -f gate ]; do sleep 0.05; done"
    both = asyncio.gather(*(o.run(bash("x", gated)) for o in others))
    await until(lambda: lines(s.workspace / "many.txt") == 2, "both gated tasks running")
    pressure = await stream_pressure(redis, task_stream(NS, "pool-run"), GROUP)
    assert pressure["per_consumer_pending"] == {"w-1": 1, "w-2": 1}
    (s.workspace / "gate").write_text("")
    done = await both
    assert {r[0].metadata["worker"] for r in done} == {"w-1", "w-2"}
    assert lines(s.workspace / "many.txt") == 2
    body = await asyncio.to_thread(
        lambda: urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics").read().decode()
    )
    assert 'berth_worker_tasks_total{lane="execute",outcome="ok"}' in body
    assert "berth_worker_task_duration_seconds_count" in body and "berth_worker_busy" in body
    await s.queue.close()
    for o in others:
        await o.queue.close()


async def test_killed_worker_task_fails_once_and_other_worker_keeps_serving(
    redis: Redis[Any], shared_root: Path, workers_factory: Any
) -> None:
    workers: Workers = workers_factory(NS, "pool-kill")
    workers.start("w-a")
    workers.start("w-b")
    await until(lambda: consumers(redis, "pool-kill", 2), "both workers joined the group")
    s = Session(redis, shared_root, "pool-kill", timeout_ms=60_000)
    count = s.workspace / "count.txt"
    running = asyncio.create_task(s.run(bash("k1", GATED)))
    await until(lambda: lines(count) == 1, "the task started")
    holder = await holder_of(redis, task_stream(NS, "pool-kill"))
    survivor = "w-b" if holder == "w-a" else "w-a"
    workers.signal(holder, signal.SIGKILL)
    [result] = await running
    # Answered by the survivor's reclaimer (liveness key expired), long before the 60 s deadline
    # would have produced a local "timed out" failure.
    assert result.is_error and "worker lost" in result.output, result.output
    assert result.metadata["worker"] == survivor
    (s.workspace / "go").write_text("")  # release the orphaned shell of the killed worker
    [after] = await s.run(bash("k2", "echo served"))
    assert after.output.strip() == "served" and after.metadata["worker"] == survivor
    assert lines(count) == 1  # never re-run
    await until(lambda: all_acknowledged(redis, "pool-kill"), "both tasks acknowledged")
    pressure = await stream_pressure(redis, task_stream(NS, "pool-kill"), GROUP)
    assert holder not in pressure["per_consumer_pending"]  # the lost pod left the group
    await s.queue.close()


@pytest.mark.skipif(shutil.which("unshare") is None, reason="needs unshare(1) (util-linux)")
async def test_a_worker_signalled_while_it_imports_stops_cleanly(
    redis: Redis[Any], workers_factory: Any
) -> None:
    """``berth-worker`` as PID 1 of its PID namespace (a container's process), signalled while
    it still imports: it stops as soon as it runs (exit 0, out of the group) instead of
    dropping the signal (PID 1 has no default action) and serving until SIGKILL."""
    workers: Workers = workers_factory(NS, "pool-early")
    pid = workers.start("w-e", pid_1=True)
    wait_until_importing(pid, "_pydantic_core")
    os.kill(pid, signal.SIGTERM)
    try:
        code = await asyncio.to_thread(workers.procs["w-e"].wait, 30)
    except subprocess.TimeoutExpired:
        raise AssertionError("the SIGTERM sent while it imported was dropped") from None
    assert code == 0, workers.log("w-e")[-2000:]
    assert "stopped" in workers.log("w-e")


async def test_sigterm_finishes_held_task_and_takes_no_new_one(
    redis: Redis[Any], shared_root: Path, workers_factory: Any
) -> None:
    workers: Workers = workers_factory(NS, "pool-term")
    workers.start("w-t", concurrency=1)
    s = Session(redis, shared_root, "pool-term")
    count = s.workspace / "count.txt"
    first = asyncio.create_task(s.run(bash("t1", GATED)))
    await until(lambda: lines(count) == 1, "the task started")
    workers.signal("w-t", signal.SIGTERM)
    second = asyncio.create_task(s.queue.submit(bash("t2", "echo second >> count.txt"), s.ctx))
    stream = task_stream(NS, "pool-term")
    await until(lambda: _xlen_is(redis, stream, 2), "the second task was published")
    (s.workspace / "go").write_text("")
    [result] = await first
    assert result.output.strip() == "finished" and not result.is_error
    assert workers.procs["w-t"].wait(timeout=30) == 0
    pressure = await stream_pressure(redis, stream, GROUP)
    assert pressure["backlog"] == 1 and pressure["inFlight"] == 0  # t2 was never taken
    assert pressure["per_consumer_pending"] == {}  # a drained worker leaves the group
    assert lines(count) == 1
    second.cancel()
    await s.queue.close()


async def _xlen_is(redis: Redis[Any], stream: str, n: int) -> bool:
    return int(await redis.xlen(stream)) == n


async def test_result_delivered_while_passivated_is_used_after_resume(
    redis: Redis[Any], shared_root: Path, workers_factory: Any
) -> None:
    workers: Workers = workers_factory(NS, "pool-resume")
    workers.start("w-r")
    before = Session(redis, shared_root, "pool-resume")
    count = before.workspace / "count.txt"
    call = bash("call_7", GATED)
    running = asyncio.create_task(before.run(call))
    await until(lambda: lines(count) == 1, "the task started")
    running.cancel()  # the session stops (passivation) while the worker still runs the tool
    with pytest.raises(asyncio.CancelledError):
        await running
    await before.queue.close()
    (before.workspace / "go").write_text("")
    await until(lambda: _xlen_is(redis, before.transport.reply_stream, 1), "reply delivered")
    after = Session(redis, shared_root, "pool-resume", uid=before.uid)  # the resumed pod
    recovered = await after.queue.recover(call, after.ctx)
    assert recovered is not None and recovered.output.strip() == "finished"
    assert recovered.metadata["worker"] == "w-r"
    assert await after.queue.recover(bash("call_other", "true"), after.ctx) is None
    assert lines(count) == 1  # the tool was not re-run
    # Once the loop moves on (next execute), the journaled reply leaves the reply stream.
    await after.run(ToolCall("r", "read", {"file_path": "count.txt"}))
    await until(lambda: _xlen_is(redis, after.transport.reply_stream, 0), "replies deleted")
    await after.queue.close()


def task_fields(s: Session, task_id: str, command: str, **over: str) -> dict[str, str]:
    """A well-formed task of session ``s`` (unsigned)."""
    fields = TaskMessage(
        task_id=task_id,
        session=f"{NS}/s1",
        session_uid=s.uid,
        epoch=1,
        run_id="run-1",
        tool_call_id=f"call-{task_id}",
        lane="execute",
        command_type="bash",
        payload={"command": command},
        workspace=".",
        deadline_ms=2**42,  # year 2109
        reply_to=s.transport.reply_stream,
    ).to_fields()
    return {**fields, **over}


async def rejected(workers: Workers, name: str, port: int, reason: str) -> float:
    """berth_worker_tasks_rejected_total{reason} of a worker, from its real /metrics."""

    def read() -> float:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
            text = r.read().decode()
        for line in text.splitlines():
            if line.startswith(f'berth_worker_tasks_rejected_total{{reason="{reason}"}}'):
                return float(line.split()[-1])
        return 0.0

    return await asyncio.to_thread(read)


async def test_bad_input_is_dead_lettered_or_refused_and_worker_survives(
    redis: Redis[Any], shared_root: Path, workers_factory: Any, private_tmp: Path
) -> None:
    workers: Workers = workers_factory(NS, "pool-bad")
    workers.start("w-x")
    s = Session(redis, shared_root, "pool-bad")
    stream = task_stream(NS, "pool-bad")
    # 1. garbage: no fields we know (and no MAC): dropped, never answered
    await redis.xadd(stream, {"hello": "world"})
    # 2. a signed task with a broken payload: the session is told at once
    good = task_fields(s, "t-bad", "echo never >> count.txt")
    await redis.xadd(stream, sign_fields(s.key, {**good, "payload": "[1, 2"}))
    # 3. a reply_to that is not the session's own stream (would let a message write anywhere)
    evil = {**good, "task_id": "t-evil", "reply_to": "berth:other:s:{x}:results"}
    await redis.xadd(stream, sign_fields(s.key, evil))
    dead = dead_letter_stream(NS, "pool-bad")
    await until(lambda: _xlen_is(redis, dead, 3), "three dead letters")
    entries = await redis.xrange(dead)
    reasons = [fields[b"reason"].decode() for _, fields in entries]
    assert any("rejected: namespace" in r for r in reasons)  # garbage names no session
    assert any("payload" in r for r in reasons)
    assert any("reply_to" in r for r in reasons)
    replies = await redis.xrange(s.transport.reply_stream)
    assert [f[b"task_id"] for _, f in replies] == [b"t-bad"]
    assert replies[0][1][b"success"] == b"false"
    # 4. a workspace outside the session's own directory is refused (through the real path)
    outside = private_tmp / "elsewhere"
    outside.mkdir()
    s.ctx = ToolContext("s1", str(outside), "run-1", 1)
    [refused] = await s.run(bash("r1", "echo escaped >> /dev/null; touch pwned"))
    assert refused.is_error and "leaves the session's workspace" in refused.output
    s.ctx = ToolContext("s1", str(s.workspace / ".." / "other"), "run-1", 1)
    (s.workspace.parent / "other").mkdir()
    [sibling] = await s.run(bash("r2", "touch pwned"))
    assert sibling.is_error and "leaves the session's workspace" in sibling.output
    assert (
        not (outside / "pwned").exists() and not (s.workspace.parent / "other" / "pwned").exists()
    )
    # The worker is alive and serving.
    s.ctx = ToolContext("s1", str(s.workspace), "run-1", 1)
    [ok] = await s.run(bash("r3", "echo still-here"))
    assert ok.output.strip() == "still-here"
    assert workers.procs["w-x"].poll() is None
    assert not (s.workspace / "count.txt").exists()
    await s.queue.close()


async def test_forged_tasks_never_run_and_a_task_id_runs_once(
    redis: Redis[Any], shared_root: Path, workers_factory: Any
) -> None:
    """Attacks on the task stream by someone who can write it: an unsigned task, one signed with
    another session's key naming this session, one naming another namespace, and one valid task
    delivered three times (to two workers). Side effects are counted in the workspace."""
    port_a, port_b = free_port(), free_port()
    workers: Workers = workers_factory(NS, "pool-forge")
    workers.start("w-a", metrics_port=port_a)
    workers.start("w-b", metrics_port=port_b)
    await until(lambda: consumers(redis, "pool-forge", 2), "two workers up")
    s = Session(redis, shared_root, "pool-forge")
    stream = task_stream(NS, "pool-forge")
    attacks = {
        "unsigned": task_fields(s, "f1", "echo forged >> pwned.txt"),
        "other-key": sign_fields(
            derive_session_key(MASTER, NS, "mallory"), task_fields(s, "f2", "echo x >> pwned.txt")
        ),
        "other-ns": sign_fields(
            derive_session_key(MASTER, "other", "s1"),
            task_fields(s, "f3", "echo x >> pwned.txt", session="other/s1"),
        ),
    }
    for fields in attacks.values():
        await redis.xadd(stream, fields)
    once = sign_fields(s.key, task_fields(s, "dup", "echo ran >> count.txt"))
    for _ in range(3):
        await redis.xadd(stream, once)

    async def settled() -> bool:
        total = 0.0
        for reason in ("mac", "namespace", "duplicate"):
            total += await rejected(workers, "w-a", port_a, reason)
            total += await rejected(workers, "w-b", port_b, reason)
        replied = int(await redis.xlen(s.transport.reply_stream)) >= 1  # after the tool's run
        return total >= 5 and lines(s.workspace / "count.txt") >= 1 and replied

    await until(settled, "forged tasks rejected and the valid one run and answered")
    assert not (s.workspace / "pwned.txt").exists()  # no forged side effect
    assert lines(s.workspace / "count.txt") == 1  # three deliveries, one run
    replies = await redis.xrange(s.transport.reply_stream)
    assert [f[b"task_id"] for _, f in replies] == [b"dup"]  # forged ones are never answered
    counts = {
        r: await rejected(workers, "w-a", port_a, r) + await rejected(workers, "w-b", port_b, r)
        for r in ("mac", "namespace", "duplicate")
    }
    assert counts == {"mac": 1 + 1, "namespace": 1, "duplicate": 2}, counts
    await s.queue.close()


async def test_forged_replies_are_dropped_and_counted(
    redis: Redis[Any], shared_root: Path, workers_factory: Any
) -> None:
    """A reply written straight to the session's stream (unsigned, or signed with another
    session's key) is deleted, counted, and never reaches the queue; a flood of them does not
    grow what the session keeps."""
    workers: Workers = workers_factory(NS, "pool-replies")
    workers.start("w-r")
    rejected_reasons: list[str] = []
    s = Session(redis, shared_root, "pool-replies")
    s.transport._on_rejected = rejected_reasons.append
    forged = {
        "task_id": "t-x",
        "tool_call_id": "call-1",
        "success": "true",
        "result": '{"output": "forged"}',
    }
    await redis.xadd(s.transport.reply_stream, forged)
    other = derive_session_key(MASTER, NS, "mallory")
    await redis.xadd(s.transport.reply_stream, sign_fields(other, forged))
    [result] = await s.run(bash("call-1", "echo real"))
    assert result.output.strip() == "real"  # the worker's signed reply, not the forged one
    assert rejected_reasons.count("mac") == 2
    assert await s.transport.find_reply("call-1") is None or (
        (await s.transport.find_reply("call-1")).result.get("output", "").strip() == "real"  # type: ignore[union-attr]
    )
    await s.queue.close()


async def test_stream_pressure_counts_lag_and_pending(redis: Redis[Any]) -> None:
    stream = task_stream(NS, "pool-pressure")
    assert await stream_pressure(redis, stream, GROUP) == {
        "backlog": 0,
        "inFlight": 0,
        "per_consumer_pending": {},
    }
    for i in range(3):
        await redis.xadd(stream, {"n": str(i)})
    assert (await stream_pressure(redis, stream, GROUP))["backlog"] == 3  # no group yet
    await redis.xgroup_create(stream, GROUP, id="0")
    await redis.xreadgroup(GROUP, "pod-1", {stream: ">"}, count=1)
    assert await stream_pressure(redis, stream, GROUP) == {
        "backlog": 2,
        "inFlight": 1,
        "per_consumer_pending": {"pod-1": 1},
    }
    # After an XDEL Redis may not know the lag; the fallback still counts undelivered entries.
    entries = await redis.xrange(stream)
    await redis.xdel(stream, entries[-1][0])
    assert (await stream_pressure(redis, stream, GROUP))["backlog"] == 1


async def test_expired_task_is_answered_not_run(
    redis: Redis[Any], shared_root: Path, workers_factory: Any
) -> None:
    s = Session(redis, shared_root, "pool-late", timeout_ms=200, grace_ms=30_000)
    # Published while no worker runs; the worker starts after the deadline has passed.
    pending = asyncio.create_task(s.run(bash("late", "echo ran >> count.txt")))
    await until(lambda: _xlen_is(redis, task_stream(NS, "pool-late"), 1), "published")
    await asyncio.sleep(0.3)  # let the 200 ms deadline pass (setup, not an assertion)
    workers: Workers = workers_factory(NS, "pool-late")
    workers.start("w-late")
    [result] = await pending
    assert result.is_error and "deadline passed" in result.output
    assert not (s.workspace / "count.txt").exists()
    await s.queue.close()


async def test_reclaim_reaches_lost_tasks_behind_many_live_ones(
    redis: Redis[Any], shared_root: Path, workers_factory: Any
) -> None:
    """The reclaimer pages through the whole pending list: 250 older entries held by a live
    consumer and one held by a consumer whose name no worker can have do not hide 5 tasks of a
    lost worker, which are answered "worker lost" and never run."""
    stream = task_stream(NS, "pool-reclaim")
    await redis.xgroup_create(stream, GROUP, id="0", mkstream=True)
    s = Session(redis, shared_root, "pool-reclaim")
    await redis.xadd(stream, {"junk": "odd holder"})
    await redis.xreadgroup(GROUP, "Not A Pod Name!", {stream: ">"}, count=1)
    await redis.set(alive_key(NS, "pool-reclaim", "busy-pod"), "1", ex=600)
    for i in range(250):
        await redis.xadd(stream, sign_fields(s.key, task_fields(s, f"old{i}", "sleep 600")))
    await redis.xreadgroup(GROUP, "busy-pod", {stream: ">"}, count=250)
    lost = [f"lost{i}" for i in range(5)]
    for task_id in lost:
        await redis.xadd(stream, sign_fields(s.key, task_fields(s, task_id, "echo x >> ran.txt")))
    await redis.xreadgroup(GROUP, "gone-pod", {stream: ">"}, count=5)  # no liveness key: lost

    workers: Workers = workers_factory(NS, "pool-reclaim")
    workers.start("w-reclaim")
    reply_stream = s.transport.reply_stream
    await until(lambda: _xlen_is(redis, reply_stream, 5), "the lost worker's tasks answered")
    replies = {f[b"task_id"].decode(): f for _, f in await redis.xrange(reply_stream)}
    assert sorted(replies) == sorted(lost)
    assert all(b"worker lost" in f[b"error"] for f in replies.values())
    assert not (s.workspace / "ran.txt").exists()  # answered, never re-run
    pending = await redis.xpending(stream, GROUP)
    assert pending["pending"] == 250  # the live holder keeps its tasks
    await s.queue.close()


async def test_task_whose_reply_key_is_not_a_stream_is_refused_unrun(
    redis: Redis[Any], shared_root: Path, workers_factory: Any
) -> None:
    """A reply key turned into another Redis type would swallow the reply while the task is
    acknowledged: the worker refuses such a task before running it, counts it and keeps it on
    the dead-letter stream."""
    port = free_port()
    workers: Workers = workers_factory(NS, "pool-wrongtype")
    workers.start("w-wt", metrics_port=port)
    await until(lambda: consumers(redis, "pool-wrongtype", 1), "the worker is up")
    s = Session(redis, shared_root, "pool-wrongtype")
    await redis.set(s.transport.reply_stream, "not a stream")
    stream = task_stream(NS, "pool-wrongtype")
    await redis.xadd(stream, sign_fields(s.key, task_fields(s, "wt", "echo ran >> count.txt")))

    async def refused() -> bool:
        return await rejected(workers, "w-wt", port, "reply_to") == 1

    await until(refused, "the task refused")
    dead_letters = dead_letter_stream(NS, "pool-wrongtype")

    async def settled() -> bool:  # counted first; kept and acknowledged right after
        pending = (await redis.xpending(stream, GROUP))["pending"]
        return bool(await redis.xlen(dead_letters)) and pending == 0

    await until(settled, "the task dead-lettered and acknowledged")
    assert not (s.workspace / "count.txt").exists()
    [(_, dead)] = await redis.xrange(dead_letters)
    assert b"is a string" in dead[b"reason"]
    assert (await redis.xpending(stream, GROUP))["pending"] == 0  # settled, not left hanging
    await s.queue.close()
