"""Budget counters in Redis: reserve before a call, settle after it, atomically (Lua).

One hash per policy and period window, ``berth-budget:{<ns>/<policy>}:<window>``
(:func:`berth_contract.names.budget_window`; the braces are a Redis Cluster hash tag: a policy's
keys share one slot, so each script touches one slot), holds per
resource ``u:<resource>`` (settled use) and ``q:<resource>`` (reserved by calls in flight), and
per reservation ``r:<id>:<resource>`` (its amounts) and ``r:<id>:s`` (the session that holds it);
the set ``...:<window>:denied`` holds the sessions denied in that window. Keys expire a day after
their window ends. Only the budget service talks to these keys (its Redis user alone may), so no
session can touch another tenant's counters.

Reserve checks every limited resource first and changes nothing unless all fit, so concurrent
callers never both take the last tokens: the sum of reservations and use never passes a limit,
and a call can only overshoot by what it uses beyond its reservation.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from redis.asyncio import Redis

from berth_contract import names
from berth_operator.budget.policy import WindowState

_RESERVE = """
local n = tonumber(ARGV[4])
for i = 0, n - 1 do
  local res, amt, lim = ARGV[5 + 3*i], tonumber(ARGV[6 + 3*i]), tonumber(ARGV[7 + 3*i])
  local cur = tonumber(redis.call('HGET', KEYS[1], 'u:' .. res) or '0')
            + tonumber(redis.call('HGET', KEYS[1], 'q:' .. res) or '0')
  if cur >= lim or cur + amt > lim then
    redis.call('SADD', KEYS[2], ARGV[3])
    redis.call('HINCRBY', KEYS[1], 'denied', 1)
    redis.call('EXPIRE', KEYS[2], ARGV[2])
    redis.call('EXPIRE', KEYS[1], ARGV[2])
    return {0, res, tostring(cur), tostring(lim)}
  end
end
local out = {1}
for i = 0, n - 1 do
  local res, amt = ARGV[5 + 3*i], tonumber(ARGV[6 + 3*i])
  local q = redis.call('HINCRBY', KEYS[1], 'q:' .. res, amt)
  redis.call('HSET', KEYS[1], 'r:' .. ARGV[1] .. ':' .. res, amt)
  local u = tonumber(redis.call('HGET', KEYS[1], 'u:' .. res) or '0')
  table.insert(out, res)
  table.insert(out, tostring(u + q))
end
redis.call('HSET', KEYS[1], 'r:' .. ARGV[1] .. ':s', ARGV[3])
redis.call('EXPIRE', KEYS[1], ARGV[2])
return out
"""

_SETTLE = """
local owner = redis.call('HGET', KEYS[1], 'r:' .. ARGV[1] .. ':s')
if owner ~= ARGV[3] then
  return {0}
end
redis.call('HDEL', KEYS[1], 'r:' .. ARGV[1] .. ':s')
local n = tonumber(ARGV[4])
local out = {1}
for i = 0, n - 1 do
  local res, used = ARGV[5 + 2*i], tonumber(ARGV[6 + 2*i])
  local f = 'r:' .. ARGV[1] .. ':' .. res
  local held = tonumber(redis.call('HGET', KEYS[1], f) or '0')
  redis.call('HDEL', KEYS[1], f)
  local q = redis.call('HINCRBY', KEYS[1], 'q:' .. res, -held)
  local u = redis.call('HINCRBY', KEYS[1], 'u:' .. res, used)
  table.insert(out, res)
  table.insert(out, tostring(u + q))
end
redis.call('EXPIRE', KEYS[1], ARGV[2])
return out
"""

KEEP_AFTER_WINDOW_SECONDS = 86400
"""How long a window's counters outlive the window (for status and late settles)."""


window_key = names.budget_window


@dataclass(frozen=True, slots=True)
class Reserved:
    """Outcome of a reserve: ``ok``; when ok, ``consumed`` per resource after it (use plus
    reservations); when not, the resource that did not fit, its ``current`` use plus
    reservations and its ``limit``."""

    ok: bool
    consumed: dict[str, int]
    resource: str = ""
    current: int = 0
    limit: int = 0


def _pairs(values: list[Any]) -> dict[str, int]:
    items = [v.decode() if isinstance(v, bytes) else str(v) for v in values]
    return {items[i]: int(items[i + 1]) for i in range(0, len(items) - 1, 2)}


class Ledger:
    """Atomic budget counters on one Redis connection pool (redis-py asyncio)."""

    def __init__(self, redis: Redis[Any]) -> None:
        self.redis = redis
        self._reserve = redis.register_script(_RESERVE)
        self._settle = redis.register_script(_SETTLE)

    async def reserve(
        self,
        key: str,
        reservation: str,
        holder: str,
        amounts: Mapping[str, int],
        limits: Mapping[str, int],
        ttl_seconds: int,
    ) -> Reserved:
        """Reserve ``amounts`` (resource → units) under ``reservation`` for ``holder`` if every
        resource's use + reservations + amount stays within its limit; else change nothing but
        the denied counters. Raises redis errors (connection, ACL) unchanged."""
        args: list[Any] = [reservation, max(1, ttl_seconds), holder, len(amounts)]
        for res, amt in amounts.items():
            args += [res, int(amt), int(limits[res])]
        out = await self._reserve(keys=[key, names.budget_denied(key)], args=args)
        if int(out[0]) == 1:
            return Reserved(True, _pairs(list(out[1:])))
        name = out[1].decode() if isinstance(out[1], bytes) else str(out[1])
        return Reserved(False, {}, name, int(out[2]), int(out[3]))

    async def settle(
        self,
        key: str,
        reservation: str,
        holder: str,
        used: Mapping[str, int],
        ttl_seconds: int,
    ) -> dict[str, int] | None:
        """Replace ``reservation`` by the units actually ``used`` (0 everywhere = release).
        Returns consumed per resource after it, or None when ``holder`` holds no such
        reservation (already settled, or someone else's)."""
        args: list[Any] = [reservation, max(1, ttl_seconds), holder, len(used)]
        for res, amt in used.items():
            args += [res, int(amt)]
        out = await self._settle(keys=[key], args=args)
        return _pairs(list(out[1:])) if int(out[0]) == 1 else None

    async def state(self, key: str) -> WindowState:
        """The counters of one window (all zero when it has none yet)."""
        raw = await self.redis.hgetall(key)
        fields = {
            (k.decode() if isinstance(k, bytes) else k): int(v)
            for k, v in raw.items()
            if not (k.decode() if isinstance(k, bytes) else k).startswith("r:")
        }
        used = {k[2:]: v for k, v in fields.items() if k.startswith("u:")}
        reserved = {k[2:]: v for k, v in fields.items() if k.startswith("q:")}
        sessions = int(await self.redis.scard(names.budget_denied(key)))
        return WindowState(used, reserved, fields.get("denied", 0), sessions)
