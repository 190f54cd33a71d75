"""The chart's Redis ACL and the budget counters: the operator's user runs the ledger (reserve,
settle, status), and neither the session nor the worker user can read or change them, whatever
a namespace or policy is called (a real ``redis-server`` loads the ACL as the chart renders it)."""

from __future__ import annotations

import pytest
from berth_operator.budget.ledger import Ledger, window_key
from redis.asyncio import Redis
from redis.exceptions import NoPermissionError

from tests.unit.chart.test_redis_acl import Server, server  # noqa: F401  (fixture)

pytestmark = pytest.mark.redis

# Policy names that spell other key families: no berth:* glob may match the budget keys.
KEYS = [window_key("team", name, "d20261125") for name in ("task", "lw", "s", "p")]


async def test_budget_policy_counters_only_for_the_operator(server: Server) -> None:  # noqa: F811
    operator = Redis.from_url(server.url("operator"))
    try:
        ledger = Ledger(operator)
        for key in KEYS:
            got = await ledger.reserve(
                key, "r1", "s-1", {"totalTokens": 10}, {"totalTokens": 100}, 60
            )
            assert got.ok
            assert await ledger.settle(key, "r1", "s-1", {"totalTokens": 7}, 60) is not None
            assert (await ledger.state(key)).used == {"totalTokens": 7}
    finally:
        await operator.aclose()
    for role in ("session", "worker"):
        client = server.role(role)
        for key in KEYS:
            for call, args in (
                (client.hgetall, (key,)),
                (client.delete, (key,)),
                (client.hset, (key, "u:totalTokens", 0)),
                (client.eval, ("return redis.call('DEL', KEYS[1])", 1, key)),
            ):
                with pytest.raises(NoPermissionError):
                    call(*args)
