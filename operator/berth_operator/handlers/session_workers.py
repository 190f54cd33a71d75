"""AgentSessions reconciled by a fixed pool of workers, controller-runtime's shape.

kopf's AgentSession watch fills :class:`SessionWorkers` (``handlers.agentsession``): each event
stores the object — without its ``managedFields``, which no decision reads and which are more
than half of a parsed session — and queues the session's uid (:class:`WorkQueue`).
``max_concurrent_reconciles`` workers take uids in order of arrival, one reconcile per uid at a
time, and queue each again after the delay its reconcile returned. Memory per session is the
stored object and what its reconcile keeps between passes (``state``); nothing waits per
session — the alternative, a kopf daemon per session, holds kopf's live view with its
managedFields and a chain of coroutines for each one.

The workers run in the context of the kopf handler that started them (:meth:`start`), so the
Events a reconcile posts go through kopf's poster as from any handler.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import kopf

from berth_operator.handlers.session_body import SessionBody
from berth_operator.handlers.workqueue import WorkQueue
from berth_operator.metrics import RECONCILES_WAITING
from berth_operator.reconcile.observe import ObservedNode

log = logging.getLogger("berth.operator")

Reconcile = Callable[[str], Awaitable[float | None]]
"""``await reconcile(uid)``: seconds until the session's next pass, None when it is gone (or
needs nothing until its next event)."""


def slim(body: Mapping[str, Any]) -> dict[str, Any]:
    """A top-level copy of ``body`` whose metadata leaves out ``managedFields`` (nested values
    are shared, not copied)."""
    out = dict(body)
    meta = body.get("metadata")
    if isinstance(meta, Mapping) and "managedFields" in meta:
        out["metadata"] = {k: v for k, v in meta.items() if k != "managedFields"}
    return out


@dataclass
class LiveSession:
    """What a session's reconcile keeps between passes: the newest known object (``body``,
    over the watched object ``view()``), the node watch cache (``nodes``; None outside kopf)
    and when it last wrote the status."""

    body: SessionBody
    view: Callable[[], Mapping[str, Any]]
    nodes: kopf.Index[str, ObservedNode] | None = None
    migrating: kopf.Index[str, bool] | None = None
    """The ``migrating_sessions`` index (None outside kopf)."""
    last_write: float | None = None
    """Monotonic time of this session's last status write (informational changes wait for
    ``status_coalesce_seconds`` after it, reconcile.coalesce)."""

    @property
    def live(self) -> Mapping[str, Any]:
        """The object as the watch last showed it (without managedFields)."""
        return self.view()


def _set_backlog(n: int) -> None:
    RECONCILES_WAITING.set(n)


@dataclass
class SessionWorkers:
    """The sessions the watch shows (``bodies``: uid → object without managedFields), the
    queue of uids to reconcile, what each session's reconcile keeps between passes
    (``state``), kopf's indices (``indices``: name → index; kopf's indices are live mappings,
    so those the first event handed over stay current) and the worker tasks."""

    queue: WorkQueue = field(default_factory=lambda: WorkQueue(_set_backlog))
    bodies: dict[str, dict[str, Any]] = field(default_factory=dict)
    state: dict[str, LiveSession] = field(default_factory=dict)
    indices: dict[str, Any] = field(default_factory=dict)
    _tasks: list[asyncio.Task[None]] = field(default_factory=list)
    _busy: set[asyncio.Task[None]] = field(default_factory=set)

    def observe(self, uid: str, body: Mapping[str, Any]) -> None:
        """Store the object of a watch event (ADDED, MODIFIED or a listing) and queue it."""
        self.bodies[uid] = slim(body)
        self.queue.add(uid)

    def wake(self, uid: str) -> None:
        """Queue session ``uid`` now, if the watch has shown it."""
        if uid in self.bodies:
            self.queue.add(uid)

    def gone(self, uid: str) -> None:
        """The object was deleted (a DELETED event): drop all kept for it."""
        self.bodies.pop(uid, None)
        self.settled(uid)

    def settled(self, uid: str) -> None:
        """Its reconcile has nothing more to do (the object is being deleted, or was replaced):
        drop its state and timer; its next event queues it again."""
        self.state.pop(uid, None)
        self.queue.forget(uid)

    @property
    def started(self) -> bool:
        """The workers were started."""
        return bool(self._tasks)

    def start(self, workers: int, reconcile: Reconcile) -> None:
        """Start ``workers`` tasks serving the queue with ``reconcile`` (once; later calls do
        nothing). Call from a kopf handler: the tasks keep its context."""
        if self._tasks:
            return
        self._tasks = [
            asyncio.create_task(self._work(reconcile), name=f"agentsession-worker-{i}")
            for i in range(workers)
        ]

    async def stop(self, grace_seconds: float = 2.0) -> None:
        """Stop the workers: idle ones at once, a reconcile in progress after at most
        ``grace_seconds`` (then cancelled; a reconcile may stop at any await: every decision
        is derived again from the apiserver)."""
        tasks, self._tasks = self._tasks, []
        for task in tasks:
            if task not in self._busy:
                task.cancel()
        busy = [t for t in tasks if t in self._busy]
        if busy:
            await asyncio.wait(busy, timeout=grace_seconds)
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task

    async def _work(self, reconcile: Reconcile) -> None:
        me = asyncio.current_task()
        assert me is not None
        while self._tasks:
            uid = await self.queue.get()
            self._busy.add(me)
            delay: float | None = None
            try:
                delay = await reconcile(uid)
            except Exception:  # reconcile handles its own errors; this is a last resort
                log.exception("reconcile of session %s failed", uid)
                delay = 5.0
            finally:
                self._busy.discard(me)
                self.queue.done(uid)
            if delay is None:
                self.settled(uid)
            else:
                self.queue.add_after(uid, delay)
