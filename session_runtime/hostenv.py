"""Deterministic ids and time for the runtime (A3S ``HostEnv { id_generator, clock }``).

Owned by the runtime core. Every id (session ids, run ids, tool-call fallbacks, event sequence
stamps) and every timestamp the runtime produces comes from a :class:`HostEnv`, so a replay with a
:class:`SequentialIdGenerator` and a :class:`FixedClock` produces byte-identical run records and
checkpoints on any node. The default pairs UUID4 ids with the system clock.
"""

from __future__ import annotations

import itertools
import threading
import time
import uuid
from dataclasses import dataclass, field
from typing import Protocol


class IdGenerator(Protocol):
    """Produces unique opaque ids (strings)."""

    def next_id(self) -> str:
        """A new id, never returned before by this generator."""
        ...


class Clock(Protocol):
    """Returns wall time in epoch milliseconds."""

    def now_ms(self) -> int:
        """Current time, epoch milliseconds."""
        ...


class UuidIdGenerator:
    """Random UUID4 ids (default)."""

    def next_id(self) -> str:
        """A random UUID4 string."""
        return str(uuid.uuid4())


class SequentialIdGenerator:
    """``<prefix>-0``, ``<prefix>-1``, ... (A3S replay id generator). Thread-safe."""

    def __init__(self, prefix: str = "id", start: int = 0) -> None:
        self.prefix = prefix
        self._counter = itertools.count(start)
        self._lock = threading.Lock()

    def next_id(self) -> str:
        """``<prefix>-<n>`` with n counting up from ``start``."""
        with self._lock:
            return f"{self.prefix}-{next(self._counter)}"


class SystemClock:
    """The system wall clock in epoch milliseconds (default)."""

    def now_ms(self) -> int:
        """``time.time_ns() // 1_000_000``."""
        return time.time_ns() // 1_000_000


class FixedClock:
    """A clock that only moves when told to (A3S replay clock): ``set(ms)``, ``advance(ms)``."""

    def __init__(self, start_ms: int = 0) -> None:
        self._now = start_ms

    def now_ms(self) -> int:
        """The time last set (epoch ms)."""
        return self._now

    def set(self, ms: int) -> None:
        """Set the current time to ``ms`` epoch milliseconds."""
        self._now = ms

    def advance(self, ms: int) -> None:
        """Move the clock forward by ``ms`` milliseconds."""
        self._now += ms


@dataclass(slots=True)
class HostEnv:
    """Where the runtime gets ids and time. ``HostEnv()`` = UUIDs + system clock.

    ``HostEnv.replay(prefix, start_ms)`` gives the deterministic pair used for replay tests.
    """

    id_generator: IdGenerator = field(default_factory=UuidIdGenerator)
    clock: Clock = field(default_factory=SystemClock)

    @classmethod
    def replay(cls, prefix: str = "id", start_ms: int = 0) -> HostEnv:
        """A sequential id generator and a fixed clock (byte-identical replays)."""
        return cls(SequentialIdGenerator(prefix), FixedClock(start_ms))

    def new_id(self) -> str:
        """A fresh id from the id generator."""
        return self.id_generator.next_id()

    def new_run_id(self) -> str:
        """A run id, ``run-<id>`` (A3S contract)."""
        return f"run-{self.id_generator.next_id()}"

    def now_ms(self) -> int:
        """Current time in epoch milliseconds."""
        return self.clock.now_ms()


__all__ = [
    "Clock",
    "FixedClock",
    "HostEnv",
    "IdGenerator",
    "SequentialIdGenerator",
    "SystemClock",
    "UuidIdGenerator",
]
