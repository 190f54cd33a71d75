"""Reads of a LaneWorker pool's queue pressure: Redis (``broker``) or Prometheus.

I/O only; the decisions live in :mod:`berth_operator.reconcile.scaling`. Called by
``berth_operator.handlers.laneworker`` once per polling interval.

- ``broker``: :func:`broker_pressure` asks Redis for the task stream's consumer group ``workers``
  (``XINFO GROUPS`` / ``XINFO CONSUMERS`` through
  :func:`berth_operator.stream_pressure.stream_pressure`): backlog = group ``lag`` (entries not yet
  delivered), in-flight = group ``pending`` (delivered, not acknowledged), and the pending count
  of every consumer (= worker pod), which the deletion-cost plan needs. A stream or group that
  does not exist yet reads as zero. :func:`task_arrival` waits for the next task to land, so a
  burst is read as it arrives rather than at the next polling tick.
- ``prometheus``: :func:`prometheus_pressure` runs the LaneWorker's PromQL query through the HTTP
  API (``GET <url>/api/v1/query``) and sums the returned samples. The query must give tasks
  waiting plus tasks running (docs/architecture.md §4) and must exist while the pool is at zero
  workers, so it has to come from the task producers (the session side), not from the workers.
  Deletion costs still use the broker's per-consumer counts.

Errors: :class:`PressureUnavailable` (a :class:`~berth_operator.errors.BerthOperatorError`) with
the source's reason; foreign exceptions (``redis.exceptions.RedisError``, ``aiohttp``'s
``ClientError``, timeouts) are translated here with ``raise ... from exc``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import aiohttp
from redis.asyncio import Redis
from redis.exceptions import RedisError

from berth_contract.names import GROUP, task_stream
from berth_operator.errors import BerthOperatorError
from berth_operator.stream_pressure import await_new_entries, last_entry_id, stream_pressure


class PressureUnavailable(BerthOperatorError):
    """Pressure could not be read from the configured source (the tick changes nothing)."""


@dataclass(frozen=True, slots=True)
class BrokerPressure:
    """Consumer-group numbers of one task stream; counts are tasks (stream entries)."""

    backlog: int
    """Group lag: entries not yet delivered to any worker."""
    in_flight: int
    """Group pending: entries delivered to a worker and not yet acknowledged."""
    per_consumer: Mapping[str, int] = field(default_factory=dict)
    """Pending entries per consumer name (worker pod name)."""
    last_entry_id: str = "0-0"
    """The stream's last entry ID, read before the counts: every task newer than it arrived
    after (or while) they were read (:func:`task_arrival`'s ``after``)."""

    @property
    def total(self) -> int:
        """Backlog + in-flight: the pressure the autoscaler scales on."""
        return self.backlog + self.in_flight


async def broker_pressure(redis: Redis[Any], namespace: str, laneworker: str) -> BrokerPressure:
    """Pressure of ``berth:<namespace>:lw:{<laneworker>}:tasks`` / group ``workers``.

    Raises PressureUnavailable when Redis cannot be reached or answers with an error.
    """
    stream = task_stream(namespace, laneworker)
    try:
        last = await last_entry_id(redis, stream)
        raw = await stream_pressure(redis, stream, GROUP)
    except (RedisError, OSError) as exc:
        raise PressureUnavailable(f"redis: {exc}") from exc
    return BrokerPressure(
        backlog=int(raw["backlog"]),
        in_flight=int(raw["inFlight"]),
        per_consumer={str(k): int(v) for k, v in raw["per_consumer_pending"].items()},
        last_entry_id=last,
    )


async def task_arrival(
    redis: Redis[Any], namespace: str, laneworker: str, timeout_seconds: float, after: str = "$"
) -> bool:
    """Wait up to ``timeout_seconds`` for the pool's task stream to hold a task newer than
    ``after`` (``BrokerPressure.last_entry_id`` of the last reading; ``$``: added from now on);
    True when it does (``berth_operator.stream_pressure.await_new_entries``: a plain ``XREAD
    BLOCK`` that consumes nothing). Raises PressureUnavailable when Redis cannot be reached or
    refuses."""
    try:
        stream = task_stream(namespace, laneworker)
        return await await_new_entries(redis, stream, timeout_seconds, after)
    except (RedisError, OSError) as exc:
        raise PressureUnavailable(f"redis: {exc}") from exc


def parse_prometheus_answer(body: Any) -> int:
    """Pressure from a ``/api/v1/query`` answer: the sum of a vector, or a scalar, rounded up.

    An empty vector is 0 (no producer exports the series: nothing is waiting). Raises
    PressureUnavailable for an error answer, another result type, or NaN/negative/infinite values.
    """
    if not isinstance(body, dict) or body.get("status") != "success":
        error = body.get("error") if isinstance(body, dict) else None
        raise PressureUnavailable(f"prometheus: query failed: {error or body!r}"[:500])
    data = body.get("data") or {}
    kind = data.get("resultType")
    result = data.get("result")
    values: list[str]
    if kind == "vector" and isinstance(result, list):
        values = [str(sample["value"][1]) for sample in result]
    elif kind == "scalar" and isinstance(result, list) and len(result) == 2:
        values = [str(result[1])]
    else:
        raise PressureUnavailable(f"prometheus: query must return a vector or scalar, got {kind}")
    total = 0.0
    for text in values:
        try:
            value = float(text)
        except ValueError as exc:
            raise PressureUnavailable(f"prometheus: not a number: {text!r}") from exc
        if math.isnan(value) or math.isinf(value) or value < 0:
            raise PressureUnavailable(f"prometheus: unusable value {text}")
        total += value
    return math.ceil(total - 1e-9)


async def prometheus_pressure(
    http: aiohttp.ClientSession, url: str, query: str, *, timeout_seconds: float = 5.0
) -> int:
    """Run ``query`` against the Prometheus at ``url`` (instant query, now) and return tasks.

    Raises PressureUnavailable on connection errors, timeouts, non-2xx answers and unusable
    results (see :func:`parse_prometheus_answer`).
    """
    endpoint = url.rstrip("/") + "/api/v1/query"
    try:
        async with http.get(
            endpoint,
            params={"query": query},
            timeout=aiohttp.ClientTimeout(total=timeout_seconds),
        ) as response:
            body = await response.json(content_type=None)
            if response.status >= 300 and not isinstance(body, dict):
                raise PressureUnavailable(f"prometheus: HTTP {response.status}")
    except (aiohttp.ClientError, TimeoutError, ValueError) as exc:
        raise PressureUnavailable(f"prometheus: {type(exc).__name__}: {exc}") from exc
    return parse_prometheus_answer(body)
