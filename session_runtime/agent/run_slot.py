"""The operation slot of a session: one operation at a time, and the handle of its running task.

Owned by ``session_runtime.agent``; used by :class:`~session_runtime.agent.session.Session` (begin
and end an operation, close), :class:`~session_runtime.agent.run_driver.RunDriver` (bind the
run's task) and :mod:`~session_runtime.agent.passivation`. Thread-safe: synchronous callers, the
agent's background loop and host threads (cancel, passivate) all go through ``lock``.

A3S contract: a second ``send``/``stream``/``resume_run`` while one runs raises
``SessionBusyError``; anything after ``close()`` raises ``SessionClosedError``.
"""

from __future__ import annotations

import asyncio
import threading
from typing import Any

from session_runtime.agent.loop import RunControl
from session_runtime.errors import SessionBusyError, SessionClosedError


class RunSlot:
    """``closed``, ``active`` (an operation holds the slot), and while a run is in flight its
    ``task``, the loop it runs on (``task_loop``), its ``control`` and the ``cancel_reason`` of a
    pending cancellation; ``passivating`` while a passivation request is being served."""

    def __init__(self, session_id: str) -> None:
        self.session_id = session_id
        self.lock = threading.Lock()
        self.closed = False
        self.active = False
        self.passivating = False
        self.task: asyncio.Task[Any] | None = None
        self.task_loop: asyncio.AbstractEventLoop | None = None
        self.control: RunControl | None = None
        self.cancel_reason: str | None = None

    def begin(self) -> None:
        """Take the slot. Raises ``SessionClosedError`` or ``SessionBusyError``."""
        with self.lock:
            if self.closed:
                raise SessionClosedError(self.session_id)
            if self.active:
                raise SessionBusyError(self.session_id)
            self.active = True

    def end(self) -> None:
        """Release the slot and forget the run's task."""
        with self.lock:
            self.active = False
            self.task = None
            self.task_loop = None
            self.control = None
            self.cancel_reason = None

    def bind(self, control: RunControl) -> None:
        """Record the current task (the run's own) and its loop as the running run."""
        with self.lock:
            self.task = asyncio.current_task()
            self.task_loop = asyncio.get_running_loop()
            self.control = control

    def running(self) -> tuple[asyncio.Task[Any], asyncio.AbstractEventLoop, RunControl] | None:
        """(task, loop, control) of the run in flight, or None."""
        with self.lock:
            task, loop, control = self.task, self.task_loop, self.control
        if task is None or loop is None or control is None or task.done():
            return None
        return task, loop, control

    def cancel(self, reason: str) -> bool:
        """Cancel the run in flight (from any thread), remembering ``reason``; True if there was
        one to cancel."""
        with self.lock:
            task, loop = self.task, self.task_loop
            if task is None or loop is None or task.done():
                return False
            self.cancel_reason = reason
        if loop.is_closed():
            return False
        loop.call_soon_threadsafe(task.cancel)
        return True

    def close(self) -> tuple[bool, asyncio.Task[Any] | None, asyncio.AbstractEventLoop | None]:
        """Mark the slot closed. Returns (first close, the run's task, its loop): closing is
        idempotent and only the first call has anything to do."""
        with self.lock:
            if self.closed:
                return False, None, None
            self.closed = True
            return True, self.task, self.task_loop
