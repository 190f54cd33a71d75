"""The operator's Redis client for a Berth Redis URL (:mod:`berth_contract.redis_url`): the
stream-pressure reads, the budget service and the front door.

``redis+cluster://`` / ``rediss+cluster://`` give redis-py's ``RedisCluster`` (slot map from the
URL's node, ``MOVED``/``ASK`` and failover followed by the client); any other URL gives ``Redis``.
Both are typed ``Redis[Any]``: the commands the operator uses have the same signatures on both,
and each of its scripts touches one slot (:mod:`berth_contract.names`). Errors: ``ValueError``
for an unsupported scheme.
"""

from __future__ import annotations

from typing import Any, cast

from redis.asyncio import Redis
from redis.asyncio.cluster import RedisCluster

from berth_contract.redis_url import parse


def connect(url: str, **kwargs: Any) -> Redis[Any]:
    """A client for ``url`` (not connected yet; the caller closes it with ``aclose()``)."""
    target = parse(url)
    if target.cluster:
        return cast("Redis[Any]", RedisCluster.from_url(target.url, **kwargs))
    return Redis.from_url(target.url, **kwargs)
