"""The bound on AgentSession reconciles running at once (OperatorContext.reconcile_slot):
never more than ``max_concurrent_reconciles`` inside, waiters served in order of arrival, and
the waiting ones counted."""

from __future__ import annotations

import asyncio

import pytest
from berth_operator.handlers.context import OperatorContext
from berth_operator.settings import OperatorSettings, ServerSettings
from prometheus_client import REGISTRY


def _ctx(slots: int) -> OperatorContext:
    settings = OperatorSettings(server=ServerSettings(max_concurrent_reconciles=slots))
    return OperatorContext(settings=settings, kube=None, runtime=None)  # type: ignore[arg-type]


async def test_at_most_the_bound_run_at_once_and_the_rest_wait_in_order() -> None:
    ctx = _ctx(2)
    release = asyncio.Event()
    inside: list[int] = []
    entered: list[int] = []
    most = 0

    async def reconcile(i: int) -> None:
        nonlocal most
        async with ctx.reconcile_slot():
            entered.append(i)
            inside.append(i)
            most = max(most, len(inside))
            await release.wait()
            inside.remove(i)

    tasks = []
    for i in range(6):
        tasks.append(asyncio.create_task(reconcile(i)))
        await asyncio.sleep(0)  # arrive in order 0..5
    await asyncio.sleep(0.01)
    assert entered == [0, 1]
    assert REGISTRY.get_sample_value("berth_operator_reconciles_waiting") == 4
    release.set()
    await asyncio.gather(*tasks)
    assert most == 2
    assert entered == [0, 1, 2, 3, 4, 5]
    assert REGISTRY.get_sample_value("berth_operator_reconciles_waiting") == 0


async def test_a_reconcile_that_fails_gives_its_slot_back() -> None:
    ctx = _ctx(1)

    async def failing() -> None:
        async with ctx.reconcile_slot():
            raise RuntimeError("boom")

    for _ in range(3):
        with pytest.raises(RuntimeError):
            await failing()
    async with asyncio.timeout(1):
        async with ctx.reconcile_slot():
            pass


async def test_busy_once_every_slot_is_taken() -> None:
    ctx = _ctx(2)
    assert not ctx.slots_busy()
    async with ctx.reconcile_slot():
        assert not ctx.slots_busy()  # one left
        async with ctx.reconcile_slot():
            assert ctx.slots_busy()
    assert not ctx.slots_busy()
