"""Idle passivation and rest: the pure decisions (docs/architecture.md §8, "At rest").

A keepAlive session with ``spec.idle.afterSeconds`` whose pod reports ``state: idle`` (no run,
no message) since ``idleSinceMs`` (``GET /v1/state``) for that long is passivated with reason
``idle_reaper`` (the A3S ``PassivationRequested`` reason), through the same protocol as a drain
(:mod:`.passivation`): same safe point, same store. Once its pod ended the session stays *at rest*:
no pod, no PodDisruptionBudget, phase ``Passivated``, condition ``Passivated=True`` reason
``AtRest`` whose message says since when. It is woken (placed again, resuming its last run, which
then waits for messages) when a wake is requested after it came to rest: the annotation
``berth.dev/wake-requested-at`` (RFC 3339, set by ``kubectl berth wake`` and ``kubectl berth
send``), or when ``spec.idle`` is removed.

Called by :mod:`.session_passivation` (the trigger) and :mod:`.session_place` (whether to stay at
rest). Nothing here does I/O.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Final

from berth_contract.state import RuntimeState
from berth_operator.api.agentsession import (
    IDLE_REAPER,
    AgentSessionSpec,
    PassivationStatus,
)
from berth_operator.api.constants import ANNOTATION_WAKE_REQUESTED_AT
from berth_operator.reconcile.observe import ObservedPod
from berth_operator.reconcile.passivation import Trigger

WAKE_ANNOTATION: Final = ANNOTATION_WAKE_REQUESTED_AT
"""Annotation on the AgentSession asking a session at rest to wake (RFC 3339 time)."""

IDLE_STATE: Final = "idle"
"""The ``state`` word of ``GET /v1/state`` for a keepAlive pod waiting for messages."""


@dataclass(frozen=True, slots=True)
class IdleCheck:
    """The idle reaper's view of one alive pod: ``trigger`` when it is due now, else the seconds
    until it would be due (``due_in``, None when the pod is not idle or idling is off)."""

    trigger: Trigger | None = None
    due_in: float | None = None


def idle_after(spec: AgentSessionSpec) -> int | None:
    """``spec.idle.afterSeconds`` of a keepAlive session, else None (idle passivation off)."""
    if not spec.keep_alive or spec.idle is None:
        return None
    return spec.idle.after_seconds


def check(
    spec: AgentSessionSpec, pod: ObservedPod, state: RuntimeState | None, now: datetime
) -> IdleCheck:
    """Whether the alive ``pod`` has been idle for ``spec.idle.afterSeconds`` at ``now``.

    Idle means the runtime says ``state: idle`` with an ``idleSinceMs``; any run or message
    resets that time in the runtime, so a session in use is never reaped."""
    after = idle_after(spec)
    if (
        after is None
        or state is None
        or state.state != IDLE_STATE
        or state.idle_since_ms is None
        or state.passivation is not None
    ):
        return IdleCheck()
    since = datetime.fromtimestamp(state.idle_since_ms / 1000, UTC)
    idle_for = (now - since).total_seconds()
    if idle_for < after:
        return IdleCheck(due_in=after - idle_for)
    msg = (
        f"idle since {since.isoformat(timespec='seconds')} "
        f"({idle_for:.0f}s >= spec.idle.afterSeconds {after})"
    )
    return IdleCheck(trigger=Trigger(IDLE_REAPER, msg, pod.node_name or None))


def parse_wake(value: str | None) -> datetime | None:
    """The time of a ``berth.dev/wake-requested-at`` annotation; None when absent or malformed
    (a malformed value is ignored, like an absent one)."""
    if not value:
        return None
    try:
        at = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None
    return at if at.tzinfo is not None else at.replace(tzinfo=UTC)


def rested_since(record: PassivationStatus | None) -> datetime | None:
    """When an idle passivation that was not resumed yet ended (its pod gone), else None."""
    if (
        record is None
        or record.reason != IDLE_REAPER
        or record.outcome not in ("passivated", "deadline")
        or record.resumed_at is not None
    ):
        return None
    return record.passivated_at or record.requested_at


def stays_at_rest(
    spec: AgentSessionSpec, record: PassivationStatus | None, wake_at: datetime | None
) -> datetime | None:
    """Since when the session stays at rest (no pod is placed), or None when it must be placed.

    At rest: the last passivation was the idle reaper's, it ended, nothing resumed it, idling is
    still on, and no wake was requested after the session came to rest."""
    since = rested_since(record)
    if since is None or idle_after(spec) is None:
        return None
    if wake_at is not None and wake_at >= since:
        return None
    return since
