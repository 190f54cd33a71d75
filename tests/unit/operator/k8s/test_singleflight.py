"""SingleFlight: concurrent callers of one key share one call; nothing is kept after it ends."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from berth_operator.k8s.singleflight import SingleFlight


class _Gate:
    """A call that counts how often it was made and finishes when released."""

    def __init__(self, answer: Any = None, error: Exception | None = None) -> None:
        self.calls = 0
        self.answer = answer
        self.error = error
        self.release = asyncio.Event()

    async def __call__(self) -> Any:
        self.calls += 1
        await self.release.wait()
        if self.error is not None:
            raise self.error
        return self.answer


def test_concurrent_callers_of_one_key_share_one_call_and_its_answer() -> None:
    async def go() -> None:
        flights: SingleFlight[str, dict[str, int]] = SingleFlight()
        gate = _Gate({"n": 1})
        waiters = [asyncio.create_task(flights.do("a", gate)) for _ in range(5)]
        await asyncio.sleep(0)
        assert flights.in_flight("a")
        gate.release.set()
        answers = await asyncio.gather(*waiters)
        assert gate.calls == 1
        assert all(answer is answers[0] for answer in answers)
        assert not flights.in_flight("a")

    asyncio.run(go())


def test_other_keys_make_their_own_calls() -> None:
    async def go() -> None:
        flights: SingleFlight[str, str] = SingleFlight()
        a, b = _Gate("A"), _Gate("B")
        tasks = [asyncio.create_task(flights.do("a", a)), asyncio.create_task(flights.do("b", b))]
        await asyncio.sleep(0)
        a.release.set()
        b.release.set()
        assert await asyncio.gather(*tasks) == ["A", "B"]
        assert (a.calls, b.calls) == (1, 1)

    asyncio.run(go())


def test_a_caller_after_the_call_ended_makes_a_new_call() -> None:
    async def go() -> None:
        flights: SingleFlight[str, int] = SingleFlight()
        gate = _Gate(7)
        gate.release.set()
        assert await flights.do("a", gate) == 7
        assert await flights.do("a", gate) == 7
        assert gate.calls == 2

    asyncio.run(go())


def test_every_waiter_gets_the_shared_calls_exception_and_the_next_call_is_new() -> None:
    async def go() -> None:
        flights: SingleFlight[str, int] = SingleFlight()
        gate = _Gate(error=RuntimeError("apiserver said no"))
        waiters = [asyncio.create_task(flights.do("a", gate)) for _ in range(3)]
        await asyncio.sleep(0)
        gate.release.set()
        results = await asyncio.gather(*waiters, return_exceptions=True)
        assert [str(r) for r in results] == ["apiserver said no"] * 3
        assert gate.calls == 1
        assert not flights.in_flight("a")

    asyncio.run(go())


def test_a_cancelled_waiter_does_not_cancel_the_call_the_others_wait_for() -> None:
    async def go() -> None:
        flights: SingleFlight[str, str] = SingleFlight()
        gate = _Gate("done")
        leaving = asyncio.create_task(flights.do("a", gate))
        staying = asyncio.create_task(flights.do("a", gate))
        await asyncio.sleep(0)
        leaving.cancel()
        await asyncio.sleep(0)
        gate.release.set()
        assert await staying == "done"
        with pytest.raises(asyncio.CancelledError):
            await leaving
        assert gate.calls == 1

    asyncio.run(go())
