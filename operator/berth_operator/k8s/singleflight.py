"""One call in flight per key: concurrent callers asking for the same thing share one answer.

A burst of placements in one namespace reads the same object (the LLM key Secret every session
names) once per session at the same moment; each GET is one more apiserver round trip while the
apiserver is busiest. :class:`SingleFlight` lets the first caller for a key make the call and
every caller that arrives before it finishes wait for that same answer (or exception). Nothing is
kept once the call ends: the next caller makes a new call, so an answer is never older than the
moment its call started (the pattern of Go's ``golang.org/x/sync/singleflight``).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Hashable
from typing import Generic, TypeVar

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")


class SingleFlight(Generic[K, V]):
    """Share one in-flight call per key among concurrent callers (module docstring).

    The shared answer is the same object for every caller: callers must not change it. A caller
    that is cancelled while waiting does not cancel the call the others wait for.
    """

    def __init__(self) -> None:
        self._flights: dict[K, asyncio.Future[V]] = {}

    def in_flight(self, key: K) -> bool:
        """A call for ``key`` has started and not finished."""
        return key in self._flights

    async def do(self, key: K, call: Callable[[], Awaitable[V]]) -> V:
        """``call()``'s answer, or the answer of the call for ``key`` already in flight (then
        ``call`` is not called). Raises what the shared call raised."""
        flight = self._flights.get(key)
        if flight is None:
            flight = asyncio.ensure_future(call())
            self._flights[key] = flight
            flight.add_done_callback(lambda done: self._landed(key, done))
        return await asyncio.shield(flight)

    def _landed(self, key: K, done: asyncio.Future[V]) -> None:
        if self._flights.get(key) is done:
            del self._flights[key]
        if not done.cancelled():
            done.exception()  # retrieved: no "never retrieved" warning when every waiter left
