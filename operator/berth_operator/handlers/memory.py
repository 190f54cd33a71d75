"""What this operator process keeps about each AgentSession between its reconcile passes, in one
object per session, cleared in one place (:meth:`SessionMemories.forget`).

Nothing here is the truth about a session: the AgentSession's status and the cluster's objects
are. This is what one process has learnt, or done and not yet seen come back through its watch
caches; a restarted or newly elected operator starts without it and every entry is re-read or
re-derived (a token from the Secret, a create in flight from a direct LIST before a create, an
eviction from the next request). Owned by ``handlers``; :class:`~berth_operator.handlers.context.
OperatorContext` holds one :class:`SessionMemories`.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import datetime

from berth_operator.metrics import INFLIGHT
from berth_operator.reconcile.passivation import Reservation
from berth_operator.reconcile.plan import CreateFailure


@dataclass
class SessionMemory:
    """One session's memory in this process; every field empty until something fills it."""

    token: str | None = field(default=None, repr=False)
    """The API token of the session's ``<name>-berth`` Secret, read once (never logged)."""
    inflight: tuple[str, float] | None = None
    """The pod this process created that the watch cache has not shown yet, and the monotonic
    time of the create: ``decide`` treats it as existing, so a lagging cache never leads to a
    second create (it expires after ``placement.inflight_ttl_seconds``)."""
    evictions: set[str] = field(default_factory=set)
    """Pod names whose eviction the webhook refused (``handlers.webhook``): the next decision
    asks the pod to passivate with reason ``eviction``."""
    outcome: tuple[str, str, datetime] | None = None
    """(pod uid, termination message text, when it came): the end its passivating pod reported
    over ``GET /v1/outcome``, ahead of the kubelet (``reconcile.observe.ended_as_reported``)."""
    reservation: Reservation | None = None
    """The epoch a passivation request this process stored reserved for the replacement
    (``reconcile.passivation.reservation``), until a create uses it."""
    create_failure: CreateFailure | None = None
    """The last failed attempt to create the pod of the stored epoch; dropped when a create of
    the session goes through. ``decide`` tries that epoch again after a backoff."""
    objects_ready: int | None = None
    """The ``metadata.generation`` whose ``<name>-berth`` Secret this process last wrote (or
    found); a later pod of it is placed without waiting for the Secret again."""
    objects_recheck: bool = False
    """A pod was placed without waiting for the Secret (``objects_ready``): write it again once
    that pod exists, so one deleted meanwhile comes back."""
    run_trace: str = ""
    """W3C traceparent of the run this process last asked to passivate (its pod's
    ``/v1/state``): the parent of the span of the placement that resumes it."""


class SessionMemories:
    """The :class:`SessionMemory` of every session this process has met, by session uid.

    ``memories(uid)`` gives (and makes) a session's; :meth:`peek` reads without making one;
    :meth:`forget` drops it when the session is deleted. The ``berth_operator_pods_inflight``
    gauge follows :meth:`set_inflight`."""

    def __init__(self) -> None:
        self._by_uid: dict[str, SessionMemory] = {}

    def __call__(self, uid: str) -> SessionMemory:
        """Session ``uid``'s memory (an empty one the first time)."""
        memory = self._by_uid.get(uid)
        if memory is None:
            memory = self._by_uid[uid] = SessionMemory()
        return memory

    def peek(self, uid: str) -> SessionMemory | None:
        """Session ``uid``'s memory if it has one."""
        return self._by_uid.get(uid)

    def __iter__(self) -> Iterator[tuple[str, SessionMemory]]:
        return iter(list(self._by_uid.items()))

    def forget(self, uid: str) -> None:
        """Drop everything kept for session ``uid`` (deleted)."""
        if self._by_uid.pop(uid, None) is not None:
            self._count_inflight()

    def token(self, uid: str) -> str | None:
        """Session ``uid``'s cached API token (the budget service's and front door's lookup)."""
        memory = self._by_uid.get(uid)
        return None if memory is None else memory.token

    def set_inflight(self, uid: str, pod_name: str | None) -> None:
        """Remember (``pod_name``) or forget (None) session ``uid``'s create in flight; a new
        create also forgets the session's failed attempts."""
        memory = self(uid)
        memory.inflight = None if pod_name is None else (pod_name, time.monotonic())
        if pod_name is not None:
            memory.create_failure = None
        self._count_inflight()

    def evicting(self) -> dict[str, set[str]]:
        """Session uid → pods whose eviction was refused, for sessions with any."""
        return {uid: set(m.evictions) for uid, m in self._by_uid.items() if m.evictions}

    def _count_inflight(self) -> None:
        INFLIGHT.set(sum(1 for m in self._by_uid.values() if m.inflight is not None))
