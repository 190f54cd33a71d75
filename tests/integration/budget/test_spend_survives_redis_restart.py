"""A BudgetPolicy's spend survives a restart of the chart's bundled Redis.

Real pieces: Debian's ``redis-server`` started from the redis.conf and ACL file the chart renders
(``helm template``, persistence on by default: ``appendonly yes``), the budget ledger
(berth_operator/budget/ledger.py, its Lua scripts) as the ``berth-operator`` ACL user. Redis is
stopped as Kubernetes stops its pod (SIGTERM) and started again on the same data directory, as
the pod is on its claim. Skipped without helm or redis-server.

Redis replays its append-only file as the ``default`` user, re-checking permissions at each EXEC
(the Lua scripts' writes are logged as MULTI/EXEC): with the chart's disabled default user
stripped of permissions, this test saw every counter dropped on restart (users.acl.tmpl).
"""

from __future__ import annotations

from pathlib import Path

from berth_operator.budget.ledger import Ledger, window_key

from tests.integration.chart_redis import ChartRedis
from tests.unit.chart.test_redis_acl import chart_files

KEY = window_key("team-a", "tokens", "2026-12-05")


async def spend(ledger: Ledger, reservation: str, tokens: int) -> None:
    """One call's reserve-then-settle, as the budget service does it."""
    got = await ledger.reserve(KEY, reservation, "s-1", {"tokens": 500}, {"tokens": 10_000}, 3600)
    assert got.ok
    assert await ledger.settle(KEY, reservation, "s-1", {"tokens": tokens}, 3600) is not None


async def test_spend_and_reservations_survive_a_redis_restart(chart_redis: ChartRedis) -> None:
    assert "appendonly yes" in chart_redis.files["redis.conf"].splitlines()
    client = chart_redis.operator()
    ledger = Ledger(client)
    await spend(ledger, "r-1", 120)
    await spend(ledger, "r-2", 80)
    in_flight = await ledger.reserve(KEY, "r-3", "s-2", {"tokens": 300}, {"tokens": 10_000}, 3600)
    assert in_flight.ok
    before = await ledger.state(KEY)
    assert before.used == {"tokens": 200} and before.reserved == {"tokens": 300}
    await client.aclose()

    chart_redis.restart()

    client = chart_redis.operator()
    ledger = Ledger(client)  # a new process: its scripts are loaded again
    after = await ledger.state(KEY)
    assert (after.used, after.reserved) == (before.used, before.reserved)
    # The call in flight across the restart settles against its reservation.
    assert await ledger.settle(KEY, "r-3", "s-2", {"tokens": 250}, 3600) == {"tokens": 450}
    await client.aclose()


async def test_without_persistence_a_restart_loses_the_spend(tmp_path: Path) -> None:
    # What redis.persistence.enabled: false gives up (docs/install.md): the test can tell.
    server = ChartRedis(chart_files({"redis": {"persistence": {"enabled": False}}}), tmp_path)
    try:
        client = server.operator()
        await spend(Ledger(client), "r-1", 120)
        await client.aclose()
        server.restart()
        client = server.operator()
        assert (await Ledger(client).state(KEY)).used == {}
        await client.aclose()
    finally:
        server.stop()
