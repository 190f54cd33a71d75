"""Waiting for a run's task from any thread or loop (used by close and passivate)."""

from __future__ import annotations

import asyncio
import threading
from typing import Any


async def wait_task(
    task: asyncio.Task[Any], loop: asyncio.AbstractEventLoop, limit_s: float | None
) -> None:
    """Wait (without raising) until ``task`` ends or ``limit_s`` seconds pass. ``loop`` is the
    task's loop; from another loop the wait happens in a worker thread."""
    if asyncio.get_running_loop() is loop:
        await asyncio.wait({task}, timeout=limit_s)
        return
    done = threading.Event()

    def arm() -> None:
        task.add_done_callback(lambda _t: done.set())

    loop.call_soon_threadsafe(arm)
    await asyncio.to_thread(done.wait, limit_s)
