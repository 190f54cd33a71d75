"""The worker's two server-side steps of a task: claim it before running, answer it after.

Each is one Lua script on the session's slot (its reply stream and the task-id claim share a
Redis Cluster hash tag, :mod:`berth_contract.names`), so each costs one round trip and runs
atomically:

- **claim**: refuse when the reply stream is not a stream (the reply could never be delivered),
  else ``SET claim <entry_id> NX EX ttl``: the first delivery of a task id runs it, any later one
  is a duplicate;
- **answer**: refuse when the reply stream is not a stream; when the claim already says
  ``replied`` write nothing (an earlier answer exists: a worker's own and a reclaimer's "worker
  lost" never both land); else ``XADD`` the signed reply, ``EXPIRE`` the stream and set the claim
  to ``replied``. On a single server the same script also ``XACK``\\ s the task entry, so a task
  is acknowledged exactly when its reply is written. On a cluster the task stream lives in the
  pool's slot, so the ``XACK`` follows as a second command; a worker lost between the two leaves
  the entry pending, and the reclaimer's answer then finds ``replied`` and only acknowledges it:
  an acknowledged task still always has its reply, and none gets two.

Both are safe to send again: a claim by the same delivery (entry id) is ``claimed`` again, and
an answer after the first is ``duplicate``. So a step whose outcome is unknown — connection
lost, or a cluster slot in the middle of a migration (``TRYAGAIN`` while its keys are split
between two nodes, until redis-py's own redirections run out) — is retried with backoff for up
to ``retry_seconds`` instead of leaving the task unanswered.

Results are the strings ``claimed`` / ``replied`` / ``duplicate``, or the Redis type name of a
reply key that is not a stream (``string``, ``hash``, ...). Errors: ``redis.exceptions.RedisError``
(after the retries, for transient errors). Scripts are sent with ``EVALSHA`` and loaded on
``NOSCRIPT`` (redis-py's ``Script``), so a restarted or failed-over server costs one extra round
trip, once.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from redis.asyncio import Redis
from redis.commands.core import AsyncScript

from berth_contract import names
from session_runtime.transport.connect import is_cluster, retrying

_CLAIM = """
local kind = redis.call('TYPE', KEYS[1])['ok']
if kind ~= 'stream' and kind ~= 'none' then return kind end
local held = redis.call('GET', KEYS[2])
if held == ARGV[1] then return 'claimed' end
if held then return 'duplicate' end
redis.call('SET', KEYS[2], ARGV[1], 'EX', ARGV[2])
return 'claimed'
"""

_ANSWER = """
local kind = redis.call('TYPE', KEYS[1])['ok']
if kind ~= 'stream' and kind ~= 'none' then return kind end
local out = 'duplicate'
if redis.call('GET', KEYS[2]) ~= 'replied' then
  redis.call('XADD', KEYS[1], '*', unpack(ARGV, 4))
  redis.call('EXPIRE', KEYS[1], ARGV[1])
  redis.call('SET', KEYS[2], 'replied', 'EX', ARGV[1])
  out = 'replied'
end
if KEYS[3] then redis.call('XACK', KEYS[3], ARGV[2], ARGV[3]) end
return out
"""


log = logging.getLogger("berth.worker")

"""Errors after which a script's outcome is unknown or it was not run yet: sent again."""


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


class TaskScripts:
    """The claim and answer scripts on one client (``connect``'s: one server or a cluster) for
    the task stream ``task_stream``; ``ttl_seconds`` is how long a reply stream and a claim are
    kept (the worker's reply TTL)."""

    def __init__(
        self, redis: Redis[Any], task_stream: str, ttl_seconds: int, retry_seconds: float = 30.0
    ) -> None:
        self._redis = redis
        self._retry_seconds = retry_seconds
        self._stream = task_stream
        self._ttl = max(1, int(ttl_seconds))
        self._cluster = is_cluster(redis)
        self._claim = redis.register_script(_CLAIM)
        self._answer = redis.register_script(_ANSWER)

    async def claim(self, reply_to: str, claim_key: str, entry_id: str) -> str:
        """``claimed`` when this delivery may run the task, ``duplicate`` when its id was
        claimed before, or the type of a ``reply_to`` that is not a stream."""
        return await self._run(self._claim, [reply_to, claim_key], [entry_id, self._ttl])

    async def answer(
        self, reply_to: str, claim_key: str, fields: Mapping[str, str], entry_id: str
    ) -> str:
        """Write the signed reply ``fields`` once and acknowledge ``entry_id``: ``replied``,
        ``duplicate`` (an answer existed; only acknowledged), or the type of a ``reply_to`` that
        is not a stream (nothing written, nothing acknowledged)."""
        flat: list[str] = []
        for key, value in fields.items():
            flat += [key, value]
        keys = [reply_to, claim_key] if self._cluster else [reply_to, claim_key, self._stream]
        out = await self._run(self._answer, keys, [self._ttl, names.GROUP, entry_id, *flat])
        if self._cluster and out in ("replied", "duplicate"):
            untyped: Any = self._redis  # XACK is untyped in the redis stubs
            await self._retrying(lambda: untyped.xack(self._stream, names.GROUP, entry_id))
        return out

    async def _run(self, script: AsyncScript, keys: list[str], args: list[Any]) -> str:
        return _text(await self._retrying(lambda: script(keys=keys, args=args)))

    async def _retrying(self, step: Any) -> Any:
        """``await step()``, again after a transient error until ``retry_seconds`` have passed
        (``transport.connect.retrying``)."""
        return await retrying(step, self._retry_seconds)
