"""A private event loop in a daemon thread, so the synchronous API can drive async code.

Owned by ``session_runtime.agent``; each ``Agent`` has one (started on first use). The sync methods
of ``Session`` (``send``, ``stream``, ...) submit their ``*_async`` twin here and block on the
result; the async twins run on the caller's loop instead.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
from collections.abc import Coroutine
from typing import Any, TypeVar

T = TypeVar("T")


class LoopThread:
    """Runs coroutines on a background loop: ``run(coro)`` blocks, ``submit(coro)`` does not."""

    def __init__(self, name: str = "berth-session-loop") -> None:
        self._name = name
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()

    @property
    def loop(self) -> asyncio.AbstractEventLoop:
        """The background loop (started if needed)."""
        with self._lock:
            if self._loop is None:
                ready = threading.Event()
                loop = asyncio.new_event_loop()

                def main() -> None:
                    asyncio.set_event_loop(loop)
                    ready.set()
                    loop.run_forever()

                self._thread = threading.Thread(target=main, name=self._name, daemon=True)
                self._thread.start()
                ready.wait()
                self._loop = loop
            return self._loop

    def in_loop_thread(self) -> bool:
        """True when called from the background loop's own thread."""
        return self._thread is not None and threading.current_thread() is self._thread

    def submit(self, coro: Coroutine[Any, Any, T]) -> concurrent.futures.Future[T]:
        """Schedule ``coro`` on the background loop; returns a concurrent future."""
        return asyncio.run_coroutine_threadsafe(coro, self.loop)

    def run(self, coro: Coroutine[Any, Any, T]) -> T:
        """Run ``coro`` on the background loop and return its result (re-raises its error).

        Raises RuntimeError when called from the loop thread itself (it would deadlock): use the
        ``*_async`` twin there.
        """
        if self.in_loop_thread():
            coro.close()
            raise RuntimeError(
                "synchronous session methods cannot run on the session loop; use the *_async twin"
            )
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result()

    def stop(self) -> None:
        """Stop the loop and join the thread (idempotent)."""
        with self._lock:
            loop, thread = self._loop, self._thread
            self._loop = None
            self._thread = None
        if loop is not None and thread is not None:
            loop.call_soon_threadsafe(loop.stop)
            if threading.current_thread() is not thread:
                thread.join(timeout=5)
