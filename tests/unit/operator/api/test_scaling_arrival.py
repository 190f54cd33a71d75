"""Between ticks, the scaling loop waits for tasks newer than its last reading of the stream,
so the rest of a burst that lands while a tick decides and scales is never missed (it would
otherwise wait for the next tick)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from berth_operator.api.laneworker import LaneWorkerSpec
from berth_operator.builders.laneworker import LaneWorkerRef
from berth_operator.handlers import laneworker
from berth_operator.pressure import BrokerPressure

REF = LaneWorkerRef("ns", "pool", "uid-1")
SPEC = LaneWorkerSpec.model_validate(
    {"minReplicas": 0, "maxReplicas": 10, "scaling": {"targetTasksPerReplica": 10}}
)


class Stopped:
    """kopf.DaemonStopped as the loop uses it: falsy, and a wait that sleeps."""

    def __bool__(self) -> bool:
        return False

    async def wait(self, seconds: float) -> None:
        await asyncio.sleep(min(seconds, 0.01))


class Stream:
    """The pool's task stream as the loop sees it: each arrival wait records the ID it waits
    after, and answers True while a queued reading is left (each arrival is then read as the
    next of ``readings``)."""

    def __init__(self, *readings: BrokerPressure) -> None:
        self.readings = list(readings)
        self.after: list[str] = []

    async def arrival(self, redis: Any, ns: str, name: str, wait: float, after: str) -> bool:
        self.after.append(after)
        if self.readings:
            return True
        await asyncio.sleep(wait)
        return False

    async def pressure(self, redis: Any, ns: str, name: str) -> BrokerPressure:
        return self.readings.pop(0)


@pytest.fixture
def stream(monkeypatch: pytest.MonkeyPatch) -> Any:
    def install(*readings: BrokerPressure) -> Stream:
        s = Stream(*readings)
        monkeypatch.setattr(laneworker, "task_arrival", s.arrival)
        monkeypatch.setattr(laneworker, "broker_pressure", s.pressure)
        return s

    return install


async def wait_for_tick(last: Any) -> float:
    """Run the wait (due in 5 s); seconds it took."""
    loop = asyncio.get_running_loop()
    started = loop.time()
    ctx: Any = type("Ctx", (), {"redis": None})()
    await laneworker._until_next_tick(
        ctx,
        REF,
        SPEC,
        last,
        laneworker.LoopState(),
        started + 5,
        Stopped(),  # type: ignore[arg-type]
    )
    return loop.time() - started


async def test_tasks_newer_than_the_ticks_reading_end_the_wait_at_once(stream: Any) -> None:
    """The tick read 10 tasks (1 replica) up to entry 7-0; 30 more landed while it scaled."""
    s = stream(BrokerPressure(backlog=40, in_flight=0, last_entry_id="9-0"))
    tick = laneworker.Tick(
        current=1,
        desired=1,
        pressure=10,
        broker=BrokerPressure(backlog=10, in_flight=0, last_entry_id="7-0"),
    )
    assert await wait_for_tick(tick) < 1  # not the 5 s to the next tick
    assert s.after == ["7-0"]  # waited for tasks after the tick's reading, not from now on


async def test_each_reading_moves_the_wait_on(stream: Any) -> None:
    """An arrival that does not call for more replicas: the next wait is for tasks after that
    reading; the one after it that does ends the wait."""
    s = stream(
        BrokerPressure(backlog=5, in_flight=0, last_entry_id="8-0"),
        BrokerPressure(backlog=25, in_flight=0, last_entry_id="12-0"),
    )
    tick = laneworker.Tick(
        current=1, desired=1, pressure=4, broker=BrokerPressure(4, 0, last_entry_id="4-0")
    )
    assert await wait_for_tick(tick) < 1
    assert s.after == ["4-0", "8-0"]


async def test_without_a_reading_the_wait_is_for_tasks_from_now_on(stream: Any) -> None:
    s = stream(BrokerPressure(backlog=40, in_flight=0, last_entry_id="9-0"))
    tick = laneworker.Tick(current=1, desired=1, pressure=None, broker=None)
    await wait_for_tick(tick)
    assert s.after == ["$"]
