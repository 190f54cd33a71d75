"""Queue pressure of a LaneWorker pool, for the operator's autoscaler (docs/architecture.md §4,
§7): the Redis reads behind :mod:`berth_operator.pressure` (``scaling.source: broker``).

Pressure = ``lag`` (entries not yet delivered to any consumer of the group) + ``pending``
(delivered, not acknowledged). The autoscaler scales on both, never on backlog alone.
"""

from __future__ import annotations

import math
from typing import Any

from redis.asyncio import Redis
from redis.exceptions import ResponseError


def as_text(value: Any) -> str:
    """A Redis reply value (``bytes`` from redis-py, or already ``str``) as text."""
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)


def _info_dict(raw: Any) -> dict[str, Any]:
    """Normalise an XINFO reply (dict, or a flat list) to ``{str: value}``."""
    if isinstance(raw, dict):
        return {as_text(k): v for k, v in raw.items()}
    items = list(raw)
    return {as_text(items[i]): items[i + 1] for i in range(0, len(items) - 1, 2)}


async def _lag_fallback(redis: Redis[Any], stream: str, last_delivered: str) -> int:
    """Entries after ``last_delivered`` when Redis cannot report ``lag`` (after XDEL/trim)."""
    count = 0
    start = f"({last_delivered}"
    while True:
        page = await redis.xrange(stream, min=start, max="+", count=1000)
        if not page:
            return count
        count += len(page)
        start = f"({as_text(page[-1][0])}"


async def stream_pressure(redis: Redis[Any], stream: str, group: str) -> dict[str, Any]:
    """``{"backlog": lag, "inFlight": pending, "per_consumer_pending": {consumer: n}}``.

    ``redis`` is a ``redis.asyncio.Redis``; a missing stream or group reads as zero pressure.
    Counts are entries (tasks). Raises ``redis.exceptions.RedisError`` on connection problems.
    """
    client: Any = redis  # the XINFO calls are untyped in the redis stubs
    try:
        groups = await client.xinfo_groups(stream)
    except ResponseError as exc:  # no such key
        if "no such key" in str(exc).lower():
            return {"backlog": 0, "inFlight": 0, "per_consumer_pending": {}}
        raise
    info = next(
        (_info_dict(g) for g in groups if as_text(_info_dict(g).get("name")) == group), None
    )
    if info is None:
        # No group yet: every entry in the stream is backlog.
        return {"backlog": int(await redis.xlen(stream)), "inFlight": 0, "per_consumer_pending": {}}
    lag = info.get("lag")
    backlog = (
        int(lag)
        if lag is not None
        else await _lag_fallback(redis, stream, as_text(info.get("last-delivered-id", "0-0")))
    )
    consumers = await client.xinfo_consumers(stream, group)
    per_consumer = {
        as_text(_info_dict(c)["name"]): int(_info_dict(c).get("pending", 0)) for c in consumers
    }
    return {
        "backlog": backlog,
        "inFlight": int(info.get("pending", 0)),
        "per_consumer_pending": per_consumer,
    }


async def last_entry_id(redis: Redis[Any], stream: str) -> str:
    """The ID of the last entry ever added to ``stream`` (``XINFO STREAM``'s
    ``last-generated-id``: trimmed or deleted entries count); ``"0-0"`` when the stream does not
    exist. Raises ``redis.exceptions.RedisError`` on connection problems or a refused command."""
    client: Any = redis  # XINFO STREAM is untyped in the redis stubs
    try:
        info = _info_dict(await client.xinfo_stream(stream))
    except ResponseError as exc:
        if "no such key" in str(exc).lower():
            return "0-0"
        raise
    return as_text(info.get("last-generated-id") or "0-0")


async def await_new_entries(
    redis: Redis[Any], stream: str, timeout_seconds: float, after: str = "$"
) -> bool:
    """Block until ``stream`` has an entry newer than ``after`` (an entry ID, e.g. from
    :func:`last_entry_id`; ``$``: added after this call), for ``timeout_seconds`` at most
    (rounded up to whole milliseconds, at least 1 ms); True when it has. An entry newer than
    ``after`` added before the call ends the wait at once, so a caller that passes the ID it
    last looked at misses nothing added in between.

    ``XREAD COUNT 1 BLOCK <ms> STREAMS <stream> <after>``: a plain read, outside every consumer
    group, so it delivers, acknowledges and claims nothing; a stream that does not exist yet is
    waited on as well (its first ``XADD`` ends the wait). Lets the autoscaler react to a burst as
    it lands instead of at its next polling tick. Raises ``redis.exceptions.RedisError`` on
    connection problems or a refused command.
    """
    block_ms = max(1, math.ceil(timeout_seconds * 1000))
    answer = await redis.xread({stream: after}, count=1, block=block_ms)
    return bool(answer)
