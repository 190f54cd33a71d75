"""``berth-a3s-bridge``: serve a real A3S Code session's external tasks with Berth LaneWorkers.

An A3S Code (``a3s-code`` 3.1, the native SDK) session whose Execute lane is ``external`` lists
its tool calls in ``pending_external_tasks()`` and waits for ``complete_external_task``. The
bridge polls that list, publishes each new task on the Redis task stream of a Berth LaneWorker
through the same transport Berth's own sessions use (``transport.RedisTaskTransport``: signed
tasks, the session's reply stream, the worker's at-most-once claim and workspace confinement),
and completes the A3S task with the worker's reply. It serves an a3s-code-core 9.x session
(``session_runtime.a3s_core.binding.CoreSession``, Berth's own binding) the same way; there,
9.1.3 makes external tasks of the host's tool calls only (docs/a3s-compatibility.md).

Quirks of the SDK this module guards against (measured with a3s-code 3.1.0):

- The lane queue exists only when the session is created inside a callback the SDK runs on its
  own runtime; ``SessionOptions.queue_config`` alone silently gives a session without a queue
  (``has_queue()`` False, every tool run locally). :func:`open_external_session` creates the
  session inside a slash-command handler of a bootstrap session.
- A task looks like ``{task_id "<session_id>-<n>", session_id, lane "Execute", command_type,
  payload (the model's raw tool arguments), timeout_ms}``; execute calls are dispatched one at a
  time.
- ``complete_external_task(task_id, success: bool, result)`` takes a bool (not the docs'
  dict); ``success=False`` makes the SDK retry the task three times and then **run the tool
  locally**, and so does a task never completed before its ``timeout_ms``. Both could run a side
  effect twice. So the bridge never answers ``success=False``: an infrastructure failure (worker
  lost, deadline) and a reply that does not come before the task's own deadline are answered
  ``success=True`` with an error text saying the side effects are unknown and exit code 1.
- Tools need a permission policy that allows them (without one, bash "requires confirmation").
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import os
import sys
import threading
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from session_runtime.lanes.external import ExternalReply, ExternalTask, ExternalTransport
from session_runtime.tools.base import ToolContext

log = logging.getLogger("berth.a3s_bridge")

#: How long before the A3S task's own timeout the bridge answers for a reply that has not come
#: (ms): later, the SDK would run the tool locally.
SAFETY_MARGIN_MS = 2_000


def unknown_outcome(error: str) -> dict[str, Any]:
    """The result given to A3S for a task whose outcome is unknown (never ``success=False``)."""
    return {
        "output": f"Error: {error}; the task may or may not have run (its side effects are "
        "unknown), check before retrying",
        "exit_code": 1,
    }


def result_of(reply: ExternalReply) -> dict[str, Any]:
    """The A3S result of a worker's reply: its ``{output, exit_code}`` when it ran the tool,
    :func:`unknown_outcome` for an infrastructure failure (worker lost, deadline, refused)."""
    if reply.success:
        return {
            "output": str(reply.result.get("output", "")),
            "exit_code": int(reply.result.get("exit_code", 0)),
        }
    return unknown_outcome(reply.error or "the external task failed")


def task_of(raw: dict[str, Any], now_ms: int, margin_ms: int = SAFETY_MARGIN_MS) -> ExternalTask:
    """A Berth ``ExternalTask`` for one entry of A3S's ``pending_external_tasks()``; the A3S task
    id doubles as the tool call id (it is unique per session). The worker's deadline is two
    margins before A3S's own timeout, so a worker stops the tool (and says so) before the bridge
    would have to answer for a reply that has not come."""
    a3s_timeout_ms = int(raw.get("timeout_ms") or 60_000)
    return ExternalTask(
        task_id=str(raw["task_id"]),
        session_id=str(raw.get("session_id", "")),
        lane="execute",
        command_type=str(raw["command_type"]),
        payload=dict(raw.get("payload") or {}),
        timeout_ms=max(1, a3s_timeout_ms - 2 * margin_ms),
        created_ms=now_ms,
        tool_call_id=str(raw["task_id"]),
    )


@dataclass
class A3sBridge:
    """Forward one A3S session's external tasks to a LaneWorker pool and complete them.

    ``session`` is an ``a3s_code.Session`` with a queue (see :func:`open_external_session`)
    or an a3s-code-core 9.x ``session_runtime.a3s_core.binding.CoreSession`` with an external
    Execute lane;
    ``transport`` a started-or-not :class:`ExternalTransport` (Berth's ``RedisTaskTransport``
    bound to this session's name, uid and key); ``workspace`` the session's workspace as the
    transport's ``shared_root`` sees it. :meth:`run` serves until ``stop`` is set.
    ``forwarded`` and ``completed`` count tasks (for tests and the benchmark)."""

    session: Any
    transport: ExternalTransport
    workspace: str
    poll_interval_s: float = 0.005
    safety_margin_ms: int = SAFETY_MARGIN_MS
    clock: Callable[[], int] = field(default=lambda: int(time.time() * 1000))
    forwarded: int = 0
    completed: int = 0
    _open: dict[str, int] = field(default_factory=dict)
    """Task id → epoch ms by which the bridge answers (before A3S's own timeout)."""
    _answered: set[str] = field(default_factory=set)

    async def run(self, stop: asyncio.Event) -> None:
        """Poll, publish, complete; answer tasks about to time out. Returns when ``stop`` is
        set (tasks still open are answered as unknown, so the SDK never runs them locally)."""
        await self.transport.start(self._on_reply)
        try:
            while not stop.is_set():
                await self._poll()
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(stop.wait(), self.poll_interval_s)
        finally:
            for task_id in list(self._open):
                self._complete(task_id, unknown_outcome("the bridge stopped before a reply came"))

    async def _poll(self) -> None:
        now = self.clock()
        for raw in self.session.pending_external_tasks():
            task_id = str(raw["task_id"])
            if task_id in self._open or task_id in self._answered:
                continue
            task = task_of(raw, now, self.safety_margin_ms)
            ctx = ToolContext(task.session_id, self.workspace, task.session_id, 0)
            try:
                await self.transport.publish(task, ctx)
            except Exception as exc:  # any transport failure: nothing was sent
                log.warning("a3s bridge: cannot publish %s: %s", task_id, exc)
                self._complete(task_id, unknown_outcome(f"cannot reach the workers: {exc}"))
                continue
            a3s_timeout_ms = int(raw.get("timeout_ms") or 60_000)
            self._open[task_id] = now + a3s_timeout_ms - self.safety_margin_ms
            self.forwarded += 1
        for task_id, answer_by in list(self._open.items()):
            if now >= answer_by:
                self._complete(task_id, unknown_outcome("no reply from a worker in time"))

    async def _on_reply(self, reply: ExternalReply) -> None:
        if reply.task_id in self._open:
            self._complete(reply.task_id, result_of(reply))
        await self.transport.settle(reply)

    def _complete(self, task_id: str, result: dict[str, Any]) -> None:
        self._open.pop(task_id, None)
        if task_id in self._answered:
            return
        self._answered.add(task_id)
        self.session.complete_external_task(task_id, True, result)
        self.completed += 1


def open_external_session(
    agent: Any, workspace: str, options: Any, *, timeout_ms: int = 60_000
) -> Any:
    """An ``a3s_code`` session on ``workspace`` whose Execute lane is external, with a queue.

    Works around the SDK's quirk that a queue exists only for sessions created on its own
    runtime: a bootstrap session runs a slash command whose handler creates the real one.
    ``options`` is an ``a3s_code.SessionOptions`` (its ``queue_config`` is replaced). Raises
    RuntimeError if the SDK still gives no queue."""
    from a3s_code import SessionQueueConfig  # the optional extra ``a3s``

    made: dict[str, Any] = {}
    command = f"berth-bridge-{uuid.uuid4().hex[:8]}"

    def create(args: str, ctx: dict[str, Any]) -> str:
        qc = SessionQueueConfig()
        qc.set_lane_handler("execute", "external", timeout_ms)
        options.queue_config = qc
        made["session"] = agent.session(workspace, options)
        return "created"

    boot = agent.session(workspace)
    boot.register_command(command, "create the bridged session", create)
    boot.send(f"/{command}")
    session = made.get("session")
    if session is None or not session.has_queue():
        raise RuntimeError("a3s-code gave the session no lane queue; external lanes need one")
    return session


def _parse(argv: Sequence[str] | None) -> argparse.Namespace:
    env = os.environ
    p = argparse.ArgumentParser(
        prog="berth-a3s-bridge",
        description="Run one prompt in an A3S Code session (a3s-code 3.1.0, or with --core "
        "a3s-code-core 9.x) whose external tasks run on Berth LaneWorkers.",
    )
    p.add_argument("--config", required=True, help="the A3S agent config (ACL) file")
    p.add_argument("--workspace", required=True)
    p.add_argument("--prompt", required=True)
    p.add_argument("--redis-url", default=env.get("BERTH_REDIS_URL"))
    p.add_argument("--namespace", default=env.get("BERTH_NAMESPACE", "default"))
    p.add_argument("--session", default=env.get("BERTH_SESSION_NAME", "a3s"))
    p.add_argument("--session-uid", default=env.get("BERTH_SESSION_UID", uuid.uuid4().hex))
    p.add_argument("--laneworker", required=True, help="LaneWorker serving the execute lane")
    p.add_argument("--task-key-file", default=env.get("BERTH_TASK_KEY_FILE"))
    p.add_argument("--timeout-ms", type=int, default=60_000)
    p.add_argument(
        "--core",
        action="store_true",
        help="host an a3s-code-core 9.x session (Berth's binding) instead of a3s-code 3.1.0",
    )
    a = p.parse_args(argv)
    if not a.redis_url or not a.task_key_file:
        p.error(
            "--redis-url and --task-key-file (or BERTH_REDIS_URL, BERTH_TASK_KEY_FILE) are required"
        )
    return a


def _open_sdk(a: argparse.Namespace) -> Any:
    """An a3s-code 3.1.0 session (the SDK, extra ``a3s``) with an external Execute lane."""
    from a3s_code import Agent, PermissionPolicy, SessionOptions

    agent = Agent.create(a.config)
    options = SessionOptions()
    options.permission_policy = PermissionPolicy(default_decision="allow")
    options.planning_mode = "disabled"
    return open_external_session(agent, a.workspace, options, timeout_ms=a.timeout_ms)


def _open_core(a: argparse.Namespace) -> Any:
    """An a3s-code-core 9.x session (Berth's binding, ``make a3s-core-binding``) with an
    external Execute lane and the host-served bash sandbox; raises ImportError saying how to
    build the binding when it is absent."""
    from session_runtime.a3s_core.binding import CoreAgent

    return CoreAgent(a.config).session(a.workspace, external_timeout_ms=a.timeout_ms)


def main(argv: Sequence[str] | None = None) -> int:
    """Console entry point: run ``--prompt`` in an A3S session bridged to Berth (``--core``:
    an a3s-code-core 9.x session; default: a3s-code 3.1.0); print the answer; exit 0."""
    from redis.asyncio import Redis

    from berth_contract.taskauth import read_key_file
    from session_runtime.transport import RedisTaskTransport
    from session_runtime.transport.connect import connect

    a = _parse(argv)
    logging.basicConfig(level=os.environ.get("BERTH_LOG_LEVEL", "INFO"), stream=sys.stderr)
    session = _open_core(a) if a.core else _open_sdk(a)
    answer: dict[str, Any] = {}

    async def serve() -> None:
        redis: Redis[Any] = connect(a.redis_url)
        transport = RedisTaskTransport(
            redis,
            namespace=a.namespace,
            session_name=a.session,
            session_uid=a.session_uid,
            epoch=1,
            lane_workers={"execute": a.laneworker},
            shared_root=a.workspace,
            task_key=read_key_file(a.task_key_file),
        )
        bridge = A3sBridge(session, transport, a.workspace)
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()

        def send() -> None:
            try:
                answer["text"] = session.send(a.prompt).text
            finally:
                loop.call_soon_threadsafe(stop.set)

        threading.Thread(target=send, daemon=True).start()
        await bridge.run(stop)
        await transport.close()
        client: Any = redis  # aclose() is newer than the redis stubs
        await client.aclose()

    asyncio.run(serve())
    print(answer.get("text", ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
