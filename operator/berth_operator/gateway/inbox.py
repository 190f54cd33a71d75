"""The front door's durable message queues, one per session, in Redis (operator user only).

Keys (:mod:`berth_contract.names`; the chart's Redis ACL gives them to the operator alone)::

    berth-gateway:s:{<uid>}:q          list of message ids not finished yet, oldest first
    berth-gateway:s:{<uid>}:m:<id>     hash: one message (fields below)
    berth-gateway:active               hash: uid → "<namespace>/<name>" of every session whose
                                       queue may not be empty (what a new leader resumes)

Message fields: ``id``, ``session`` (``ns/name``), ``prompt``, ``state`` (``queued`` →
``delivered`` → ``done`` | ``failed``), ``createdMs``, ``runId``, ``resultText``, ``error``,
``peer`` (JSON ``{fromSessionId, fromTenantId, correlationId}`` or empty) and ``chain`` (JSON
list of the ``ns/name`` sessions the call went through, for loop detection) and
``traceparent`` (W3C, of the front door's span of the message; empty without tracing).

Enqueue and finish are Lua scripts on the session's two keys (one Redis Cluster slot), so a
message is queued once (its id is the idempotency key: a repeated enqueue returns the stored
record) and leaves the queue exactly when it gets its final state. A finished record is kept
``retention_seconds`` for callers that ask again.

The ``active`` index lives in a slot of its own, so it is written outside the scripts, in an
order that never leaves a non-empty queue out of it: enqueue adds the session before and after
queuing (the second write repairs a concurrent finish that removed it in between); finish (and
a repeated enqueue) removes it only after its script found the queue empty, then looks again and
adds it back if a message arrived meanwhile. An entry whose queue is empty is harmless (the
resumer finds nothing).
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from typing import Any, Literal

from redis.asyncio import Redis

from berth_contract import names
from berth_telemetry.tracing import TRACEPARENT

PREFIX = names.GATEWAY_PREFIX
ACTIVE_KEY = names.GATEWAY_ACTIVE

MessageState = Literal["queued", "delivered", "done", "failed"]
FINAL: frozenset[str] = frozenset({"done", "failed"})

_ENQUEUE = """
if redis.call('EXISTS', KEYS[1]) == 1 then return {0, redis.call('LLEN', KEYS[2])} end
redis.call('HSET', KEYS[1], unpack(ARGV, 2))
return {1, redis.call('RPUSH', KEYS[2], ARGV[1])}
"""

_FINISH = """
if redis.call('EXISTS', KEYS[1]) == 0 then return -1 end
redis.call('HSET', KEYS[1], unpack(ARGV, 3))
redis.call('EXPIRE', KEYS[1], tonumber(ARGV[2]))
redis.call('LREM', KEYS[2], 0, ARGV[1])
return redis.call('LLEN', KEYS[2])
"""

queue_key = names.gateway_queue
message_key = names.gateway_message


@dataclass(frozen=True, slots=True)
class Message:
    """One message as stored (see the module docstring)."""

    id: str
    session: str
    prompt: str
    state: MessageState = "queued"
    created_ms: int = 0
    run_id: str = ""
    result_text: str = ""
    error: str = ""
    peer: dict[str, Any] | None = None
    chain: list[str] = field(default_factory=list)
    traceparent: str = field(default="", compare=False)
    """W3C traceparent of the front door's span of this message (the run it starts is a child);
    where it sits in a trace, not what the message is, so not part of its equality."""

    def fields(self) -> dict[str, str]:
        """The Redis hash of this message."""
        return {
            "id": self.id,
            "session": self.session,
            "prompt": self.prompt,
            "state": self.state,
            "createdMs": str(self.created_ms),
            "runId": self.run_id,
            "resultText": self.result_text,
            "error": self.error,
            "peer": json.dumps(self.peer) if self.peer else "",
            "chain": json.dumps(self.chain),
            TRACEPARENT: self.traceparent,
        }

    @classmethod
    def from_fields(cls, raw: dict[bytes, bytes]) -> Message:
        """Rebuild from a Redis hash (missing fields take their defaults)."""
        f = {k.decode(): v.decode() for k, v in raw.items()}
        state = f.get("state", "queued")
        return cls(
            id=f.get("id", ""),
            session=f.get("session", ""),
            prompt=f.get("prompt", ""),
            state=state if state in ("queued", "delivered", "done", "failed") else "failed",  # type: ignore[arg-type]
            created_ms=int(f.get("createdMs") or 0),
            run_id=f.get("runId", ""),
            result_text=f.get("resultText", ""),
            error=f.get("error", ""),
            peer=json.loads(f["peer"]) if f.get("peer") else None,
            chain=list(json.loads(f["chain"])) if f.get("chain") else [],
            traceparent=f.get(TRACEPARENT, ""),
        )

    def to_json(self) -> dict[str, Any]:
        """The front door's answer body for this message."""
        return {
            "messageId": self.id,
            "session": self.session,
            "state": self.state,
            "createdMs": self.created_ms,
            "runId": self.run_id or None,
            "resultText": self.result_text if self.state == "done" else None,
            "error": self.error or None,
            "peer": self.peer,
        }


class Inbox:
    """The queues on one Redis connection (the operator's user)."""

    def __init__(self, redis: Redis[Any], retention_seconds: int) -> None:
        self.redis = redis
        self.retention_seconds = retention_seconds
        self._enqueue = redis.register_script(_ENQUEUE)
        self._finish = redis.register_script(_FINISH)

    async def enqueue(self, uid: str, message: Message) -> tuple[Message, bool]:
        """Queue ``message`` for session ``uid`` unless its id is known: (the stored message,
        True when it was queued now)."""
        if not message.created_ms:
            message = Message(**{**_as_dict(message), "created_ms": int(time.time() * 1000)})
        flat: list[str] = []
        for k, v in message.fields().items():
            flat += [k, v]
        keys = [message_key(uid, message.id), queue_key(uid)]
        await self.redis.hset(ACTIVE_KEY, uid, message.session)
        created, queued = await self._enqueue(keys=keys, args=[message.id, *flat])
        if created:
            await self.redis.hset(ACTIVE_KEY, uid, message.session)
        elif not queued:
            await self._drop_if_empty(uid, message.session)
        if created:
            return message, True
        stored = await self.get(uid, message.id)
        return (stored or message), False

    async def get(self, uid: str, message_id: str) -> Message | None:
        """The stored message, or None (unknown or expired)."""
        raw = await self.redis.hgetall(message_key(uid, message_id))
        return Message.from_fields(raw) if raw else None

    async def pending(self, uid: str) -> list[str]:
        """Ids of the session's unfinished messages, oldest first."""
        ids = await self.redis.lrange(queue_key(uid), 0, -1)
        return [i.decode() for i in ids]

    async def active(self) -> dict[str, str]:
        """uid → ``ns/name`` of every session with unfinished messages."""
        raw = await self.redis.hgetall(ACTIVE_KEY)
        return {k.decode(): v.decode() for k, v in raw.items()}

    async def delivered(self, uid: str, message_id: str, run_id: str) -> None:
        """Record that the session accepted the message as run ``run_id``."""
        await self.redis.hset(
            message_key(uid, message_id), mapping={"state": "delivered", "runId": run_id}
        )

    async def redeliver(self, uid: str, message_id: str) -> None:
        """Put a delivered message back to ``queued`` (its pod does not know its run)."""
        await self.redis.hset(message_key(uid, message_id), mapping={"state": "queued"})

    async def finish(
        self,
        uid: str,
        message_id: str,
        state: Literal["done", "failed"],
        *,
        result_text: str = "",
        error: str = "",
        run_id: str = "",
    ) -> bool:
        """Give the message its final state, drop it from the queue and let its record expire
        after ``retention_seconds``; False if the record is gone."""
        values = {"state": state, "resultText": result_text, "error": error}
        if run_id:
            values["runId"] = run_id
        flat: list[str] = []
        for k, v in values.items():
            flat += [k, v]
        keys = [message_key(uid, message_id), queue_key(uid)]
        args = [message_id, str(self.retention_seconds), *flat]
        left = int(await self._finish(keys=keys, args=args))
        if left == 0:
            session = await self.redis.hget(message_key(uid, message_id), "session")
            await self._drop_if_empty(uid, session)
        return left >= 0

    async def _drop_if_empty(self, uid: str, session: bytes | str | None) -> None:
        """Take ``uid`` out of the active index after its queue was seen empty; put it back
        (as ``session``) if a message was queued meanwhile (module docstring)."""
        await self.redis.hdel(ACTIVE_KEY, uid)
        if session is not None and await self.redis.llen(queue_key(uid)):
            await self.redis.hset(ACTIVE_KEY, uid, session)


def _as_dict(message: Message) -> dict[str, Any]:
    return {f: getattr(message, f) for f in Message.__dataclass_fields__}
