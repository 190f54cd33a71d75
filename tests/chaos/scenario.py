"""Scenarios of the crash campaign: what runs and which faults hit it, drawn from one seed.

Owned by the chaos harness; :func:`generate` is pure (a seed always gives the same scenario), so a
violation is replayed from its seed alone (``python -m tests.chaos --replay SEED``). What the
faults do is in :mod:`tests.chaos.runner` (harness side) and :mod:`tests.chaos.child` (inside the
session process); timing still varies between runs, so a replay repeats the schedule, not the
exact interleaving.

A scenario runs one or two sessions, either with tools run inside the session process
(``lanes=False``) or with the execute lane served by ``berth-worker`` processes over Redis
(``lanes=True``). Each session has a few tool rounds; each round asks for one or two bash calls
(side effects, see :mod:`tests.chaos.ledger`) and sometimes a read-only ``ls``. Each session
process ("attempt") gets at most one fault; after the planned faults, clean attempts resume the
session until it completes.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

#: Every fault kind, with what it does (see the module docstrings of runner and child).
FAULT_KINDS: dict[str, str] = {
    "kill_session": "SIGKILL of the session process after a random delay",
    "kill_store_op": "SIGKILL of the session process at its Nth fsync/fdatasync/rename/link",
    "passivate": "passivation request (30 ms or 3 s deadline) mid-run or as the last tool ends",
    "zombie": "a new placement (epoch+1) starts while the old process still runs (node lost)",
    "clock_skew": "the session process's wall clock shifted, then SIGKILL after a delay",
    "slow_volume": "every fsync of the session process slowed, then SIGKILL after a delay",
    "full_volume": "the store volume fills up (ENOSPC after N bytes) during the attempt",
    "llm_fail": "the model endpoint answers 500 or drops the connection at random",
    "kill_worker": "SIGKILL of the LaneWorker holding a task (a new worker replaces it)",
    "redis_restart": "redis-server restarted without persistence (every stream and group lost)",
    "redis_loss": "unacked entries lost: the task stream trimmed and/or the reply stream deleted",
}
LANE_ONLY = frozenset({"kill_worker", "redis_restart", "redis_loss"})


@dataclass(frozen=True, slots=True)
class Fault:
    """One fault of one attempt: ``kind`` (a key of :data:`FAULT_KINDS`), ``at_ms`` (delay
    after the attempt starts, ms; -1 for ``passivate``: as the session's last tool ends) and
    ``param`` (kind-specific: store-op number, skew ms, fsync
    delay ms, free bytes, failure percent, passivation deadline ms, Redis loss variant)."""

    kind: str
    at_ms: int
    param: int = 0


@dataclass(frozen=True, slots=True)
class SessionPlan:
    """One session: its name (a valid store id), tool rounds (per round the call kinds,
    ``bash`` or ``ls``), how long each bash call works (ms) and the faults of its first
    attempts, in order."""

    name: str
    rounds: tuple[tuple[str, ...], ...]
    linger_ms: int
    faults: tuple[Fault, ...]


@dataclass(frozen=True, slots=True)
class Scenario:
    """A scenario: its seed, whether the execute lane is external (Redis + workers), and its
    sessions."""

    seed: int
    lanes: bool
    sessions: tuple[SessionPlan, ...]

    def fault_kinds(self) -> list[str]:
        """Every planned fault kind, in order (for the report)."""
        return [f.kind for s in self.sessions for f in s.faults]


def _fault(rng: random.Random, kind: str) -> Fault:
    at = rng.randint(0, 300)  # an attempt of a few rounds lasts a few hundred ms
    if kind == "kill_store_op":
        return Fault(kind, 0, rng.randint(1, 40))
    if kind == "passivate":  # at_ms -1: as the session's last tool ends (racing its finish)
        return Fault(kind, rng.choice((-1, at)), rng.choice((30, 3000)))
    if kind == "clock_skew":
        magnitude = rng.choice((1500, 60_000, 3_600_000))
        return Fault(kind, at, magnitude * rng.choice((-1, 1)))
    if kind == "slow_volume":
        return Fault(kind, at, rng.randint(2, 40))
    if kind == "full_volume":
        return Fault(kind, 0, rng.randint(0, 6000))
    if kind == "llm_fail":
        return Fault(kind, 0, rng.randint(15, 60))
    if kind == "redis_loss":
        return Fault(kind, at, rng.randint(0, 2))
    return Fault(kind, at)


def generate(seed: int) -> Scenario:
    """The scenario of ``seed`` (pure)."""
    rng = random.Random(seed)
    lanes = rng.random() < 0.4
    kinds = [k for k in FAULT_KINDS if lanes or k not in LANE_ONLY]
    n_sessions = 2 if rng.random() < 0.2 else 1
    sessions = []
    for i in range(n_sessions):
        rounds = []
        for _ in range(rng.randint(2, 5)):
            calls = ["bash"] * rng.choice((1, 1, 2))
            if rng.random() < 0.25:
                calls.append("ls")
            rounds.append(tuple(calls))
        faults = tuple(_fault(rng, rng.choice(kinds)) for _ in range(rng.randint(1, 3)))
        sessions.append(SessionPlan(f"c{seed}-{i}", tuple(rounds), rng.choice((0, 10, 40)), faults))
    return Scenario(seed, lanes, tuple(sessions))
