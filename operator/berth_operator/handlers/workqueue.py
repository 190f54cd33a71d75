"""A work queue of object keys, with the semantics of client-go's ``workqueue`` as
controller-runtime uses it: a key waits in the queue at most once however often it is added,
is served to one worker at a time, and is queued again after that worker is done if it was
added meanwhile. Each key also has at most one timer (:meth:`WorkQueue.add_after`); the latest
call sets it, and taking the key from the queue cancels it, so the reconcile that runs sets the
next one — the requeue-after of controller-runtime's ``Result``.

No I/O; single event loop. Keys are strings (an AgentSession's uid).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable


class WorkQueue:
    """FIFO of keys without duplicates, with per-key timers.

    ``on_backlog(n)`` is called with the number of keys waiting to be served whenever it
    changes (a gauge)."""

    def __init__(self, on_backlog: Callable[[int], None] | None = None) -> None:
        self._ready: asyncio.Queue[str] = asyncio.Queue()
        self._dirty: set[str] = set()
        self._processing: set[str] = set()
        self._timers: dict[str, asyncio.TimerHandle] = {}
        self._on_backlog = on_backlog

    def add(self, key: str) -> None:
        """Queue ``key`` unless it waits already; a key being served is queued when it is
        :meth:`done`."""
        if key in self._dirty:
            return
        self._dirty.add(key)
        if key not in self._processing:
            self._ready.put_nowait(key)
            self._backlog_changed()

    def add_after(self, key: str, delay: float) -> None:
        """Queue ``key`` in ``delay`` seconds (now when ``delay <= 0``), replacing the key's
        earlier timer."""
        self._cancel_timer(key)
        if delay <= 0:
            self.add(key)
            return
        loop = asyncio.get_running_loop()
        self._timers[key] = loop.call_later(delay, self._fire, key)

    async def get(self) -> str:
        """The next key (waits for one). The key is being served until :meth:`done`; its timer
        is cancelled."""
        key = await self._ready.get()
        self._dirty.discard(key)
        self._processing.add(key)
        self._cancel_timer(key)
        self._backlog_changed()
        return key

    def done(self, key: str) -> None:
        """The worker that took ``key`` is done with it; queue it again if it was added
        meanwhile."""
        self._processing.discard(key)
        if key in self._dirty:
            self._ready.put_nowait(key)
            self._backlog_changed()

    def forget(self, key: str) -> None:
        """Cancel ``key``'s timer (the object is gone). A copy already queued is still served;
        the worker finds nothing to do."""
        self._cancel_timer(key)

    def backlog(self) -> int:
        """Keys waiting to be served."""
        return self._ready.qsize()

    def queued(self, key: str) -> bool:
        """``key`` waits to be served (or to be served again)."""
        return key in self._dirty

    def scheduled(self, key: str) -> bool:
        """``key`` has a timer."""
        return key in self._timers

    def _fire(self, key: str) -> None:
        self._timers.pop(key, None)
        self.add(key)

    def _cancel_timer(self, key: str) -> None:
        timer = self._timers.pop(key, None)
        if timer is not None:
            timer.cancel()

    def _backlog_changed(self) -> None:
        if self._on_backlog is not None:
            self._on_backlog(self._ready.qsize())
