"""A Redis client for a Berth Redis URL (:mod:`berth_contract.redis_url`), for the session pod,
the A3S bridge and ``berth-worker``.

``redis+cluster://`` / ``rediss+cluster://`` give redis-py's ``RedisCluster`` (slot map from the
URL's node, ``MOVED``/``ASK`` and failover followed by the client); any other URL gives ``Redis``.
Both are typed ``Redis[Any]``: the commands Berth uses (streams, strings, hashes, ``EVALSHA``
scripts, single-slot ``MULTI``/``EXEC`` pipelines) have the same signatures on both, and every
multi-key command touches one slot (:mod:`berth_contract.names`). Errors: ``ValueError`` for an
unsupported scheme.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar, cast

from redis.asyncio import Redis
from redis.asyncio.cluster import RedisCluster
from redis.exceptions import ClusterError, ConnectionError, TimeoutError, TryAgainError

from berth_contract.redis_url import parse


def connect(url: str, **kwargs: Any) -> Redis[Any]:
    """A client for ``url`` (not connected yet; the caller closes it with ``aclose()``)."""
    target = parse(url)
    if target.cluster:
        return cast("Redis[Any]", RedisCluster.from_url(target.url, **kwargs))
    return Redis.from_url(target.url, **kwargs)


def is_cluster(client: Any) -> bool:
    """Whether ``client`` is a cluster client (its multi-slot steps are split)."""
    return isinstance(client, RedisCluster)


log = logging.getLogger(__name__)
T = TypeVar("T")

TRANSIENT = (ClusterError, ConnectionError, TimeoutError, TryAgainError)
"""Errors a Redis command may meet while a Cluster slot migrates or a primary fails over (redis-py
raises ``ClusterError`` "TTL exhausted" when its redirections run out): worth sending again."""


async def retrying(step: Callable[[], Awaitable[T]], seconds: float) -> T:
    """``await step()``, again after a :data:`TRANSIENT` error (backoff 50 ms doubling to 1 s)
    until ``seconds`` have passed; then the last error is raised. Only for steps that are safe
    to send twice (idempotent, or deduplicated downstream as a task id's claim is)."""
    deadline = time.monotonic() + seconds
    pause = 0.05
    while True:
        try:
            return await step()
        except TRANSIENT as exc:
            if time.monotonic() + pause > deadline:
                raise
            log.warning("Redis step failed (%s); retrying in %.2fs", exc, pause)
            await asyncio.sleep(pause)
            pause = min(1.0, pause * 2)
