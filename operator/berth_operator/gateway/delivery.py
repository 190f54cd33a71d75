"""The front door's delivery loops: one task per session with unfinished messages.

A loop takes the session's oldest unfinished message and follows :func:`routing.next_step`:
wake the session when it is at rest (the ``berth.dev/wake-requested-at`` annotation, the same
wake as ``kubectl berth wake``), deliver the message to the running pod (``POST /v1/messages``
with the message id, so a repeat after a lost answer or a leader change starts no second run),
then poll the pod (``GET /v1/messages/{id}``) until the run that message started, resumed across
pods if need be, has ended, and store its reply. Only then does the next message go: messages
of a session are delivered in order, one at a time.

Everything a loop knows is in Redis (:mod:`inbox`) or the cluster, so a new leader resumes every
loop from :meth:`Delivery.resume_all` and nothing is lost or delivered twice.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any

from prometheus_client import Counter, Histogram

from berth_operator.errors import RuntimeUnreachable
from berth_operator.gateway.inbox import Inbox, Message
from berth_operator.gateway.routing import SessionView, next_step
from berth_operator.runtime_client import RuntimeClient
from berth_telemetry.tracing import TRACEPARENT

log = logging.getLogger(__name__)

DELIVERED = Counter(
    "berth_operator_gateway_messages_total",
    "Messages of the front door by how they ended (done, failed).",
    ["outcome"],
)
WAKES = Counter(
    "berth_operator_gateway_wakes_total",
    "Sessions at rest the front door woke for a message.",
)
LATENCY = Histogram(
    "berth_operator_gateway_delivery_seconds",
    "Message queued → accepted by the session's pod (includes waking a session at rest).",
    buckets=(0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120),
)

Lookup = Callable[[str], SessionView | None]
Token = Callable[[SessionView], Awaitable[str | None]]
Wake = Callable[[SessionView], Awaitable[None]]
Gone = Callable[[str, str], Awaitable[bool]]


async def _never_gone(session: str, uid: str) -> bool:
    return True


class Delivery:
    """Runs the delivery loops (see the module docstring).

    ``sessions(uid)`` and ``await tokens(view)`` read the operator's view of AgentSessions and
    their API tokens (an error reading a token is logged and the loop tries again);
    ``wake(view)`` asks a session at rest to wake; ``poll_seconds`` is how often a loop looks
    again while it waits. ``gone(key, uid)`` confirms that a session missing from the view
    really was deleted (``<namespace>/<name>``, uid) before its messages fail: a session
    created after the directory was filled may not have been watched yet."""

    def __init__(
        self,
        inbox: Inbox,
        runtime: RuntimeClient,
        sessions: Lookup,
        tokens: Token,
        wake: Wake,
        poll_seconds: float,
        gone: Gone = _never_gone,
    ) -> None:
        self.inbox = inbox
        self.runtime = runtime
        self.sessions = sessions
        self.tokens = tokens
        self.wake = wake
        self.poll_seconds = poll_seconds
        self.gone = gone
        self._tasks: dict[str, asyncio.Task[None]] = {}
        self._kicks: dict[str, asyncio.Event] = {}
        self._changed: dict[str, asyncio.Event] = {}
        self._closed = False

    # ---- waiting for a message -----------------------------------------------------------

    def changed(self, message_id: str) -> asyncio.Event:
        """An event set whenever message ``message_id`` changes state (re-armed by waiters)."""
        event = self._changed.get(message_id)
        if event is None:
            event = self._changed[message_id] = asyncio.Event()
        return event

    def _notify(self, message_id: str) -> None:
        event = self._changed.pop(message_id, None)
        if event is not None:
            event.set()

    # ---- loops ---------------------------------------------------------------------------

    def kick(self, uid: str) -> None:
        """Make sure session ``uid``'s loop runs and looks again now (a new message, or the
        session changed)."""
        self._kicks.setdefault(uid, asyncio.Event()).set()
        task = self._tasks.get(uid)
        if not self._closed and (task is None or task.done()):
            self._tasks[uid] = asyncio.get_running_loop().create_task(self._run(uid))

    def nudge(self, uid: str) -> None:
        """Make session ``uid``'s loop look again now, if it runs (its session changed)."""
        task = self._tasks.get(uid)
        if task is not None and not task.done():
            self._kicks.setdefault(uid, asyncio.Event()).set()

    async def resume_all(self) -> int:
        """Start a loop for every session with unfinished messages; how many."""
        active = await self.inbox.active()
        for uid in active:
            self.kick(uid)
        return len(active)

    async def close(self) -> None:
        """Stop every loop (their messages stay queued in Redis). A loop also stops by itself
        at its next turn, should a client library swallow its cancellation."""
        self._closed = True
        for task in self._tasks.values():
            task.cancel()
        for task in self._tasks.values():
            with contextlib.suppress(BaseException):
                await task
        self._tasks.clear()

    async def _pause(self, uid: str) -> None:
        kick = self._kicks.setdefault(uid, asyncio.Event())
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(kick.wait(), self.poll_seconds)
        kick.clear()

    async def _run(self, uid: str) -> None:
        while not self._closed:
            try:
                pending = await self.inbox.pending(uid)
                if not pending:
                    return
                message = await self.inbox.get(uid, pending[0])
                if message is None:  # its record expired while queued: drop the id
                    await self.inbox.finish(uid, pending[0], "failed", error="record lost")
                    continue
                await self._step(uid, message)
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("delivery loop of session %s failed; retrying", uid)
            await self._pause(uid)

    async def _step(self, uid: str, message: Message) -> None:
        view = self.sessions(uid)
        step, why = next_step(view, message.state)
        if view is None and not await self.gone(message.session, uid):
            return  # not watched yet: wait for the view
        if step == "fail":
            await self._finish(uid, message, "failed", error=why)
        elif step == "wake" and view is not None:
            log.info("message %s: waking %s", message.id, view.key)
            WAKES.inc()
            await self.wake(view)
        elif step == "deliver" and view is not None and view.pod_ip:
            await self._deliver(view, view.pod_ip, message)
        elif step == "poll" and view is not None and view.pod_ip:
            await self._poll(view, view.pod_ip, message)

    async def _deliver(self, view: SessionView, pod_ip: str, message: Message) -> None:
        uid = view.uid
        body: dict[str, Any] = {"prompt": message.prompt, "messageId": message.id}
        if message.peer:
            body["peer"] = message.peer
        try:
            token, trace = await self.tokens(view), {TRACEPARENT: message.traceparent}
            status, answer = await self.runtime.call(
                "POST", pod_ip, "/v1/messages", token, body, trace if message.traceparent else None
            )
        except RuntimeUnreachable as exc:
            log.info("message %s: pod not reachable yet (%s)", message.id, exc)
            return
        if status in (200, 202) and answer.get("runId"):
            await self.inbox.delivered(uid, message.id, str(answer["runId"]))
            LATENCY.observe(max(0.0, _now_ms() - message.created_ms) / 1000)
            self._notify(message.id)
            self.kick(uid)  # poll at once: a short run may already be done
        elif status == 400 or answer.get("error") in ("not_keep_alive", "finished"):
            await self._finish(uid, message, "failed", error=f"session refused: {answer}")
        # busy, starting, passivating, a run that failed to start: try again shortly

    async def _poll(self, view: SessionView, pod_ip: str, message: Message) -> None:
        uid = view.uid
        try:
            status, answer = await self.runtime.call(
                "GET", pod_ip, f"/v1/messages/{message.id}", await self.tokens(view)
            )
        except RuntimeUnreachable:
            return
        if status == 404:  # a pod without the run (never saved): deliver again, it dedupes
            await self.inbox.redeliver(uid, message.id)
            return
        if status != 200:
            return
        run_status = answer.get("status")
        if run_status == "completed":
            await self._finish(
                uid,
                message,
                "done",
                result_text=str(answer.get("resultText") or ""),
                run_id=str(answer.get("runId") or ""),
            )
        elif run_status in ("failed", "cancelled"):
            await self._finish(uid, message, "failed", error=str(answer.get("error") or run_status))
        # running, or interrupted/passivated: the operator resumes it; keep polling

    async def _finish(self, uid: str, message: Message, state: Any, **values: str) -> None:
        await self.inbox.finish(uid, message.id, state, **values)
        DELIVERED.labels(state).inc()
        log.info(
            "message %s of %s: %s %s", message.id, message.session, state, values.get("error", "")
        )
        self._notify(message.id)


def _now_ms() -> int:
    return int(time.time() * 1000)
