"""A session whose store volume failed waits for it, then resumes (docs/troubleshooting.md,
"Store").

Called by ``reconcile.session`` when a pod ended with termination code ``StoreFull`` or
``StoreUnavailable`` (:mod:`berth_contract.termination`): the session pod could not save what it
did — a run's end, a round — because the shared volume is full or failing. That is not a failure
of the run: the store still holds the run as unfinished at its last saved round, so the session
is placed again every :data:`STORE_RETRY_SECONDS` (each new pod checks the volume first and ends
the same way while it is still full) without consuming a retry, and resumes once space is back.
``Degraded`` and ``Ready`` carry the reason meanwhile; a Warning Event is emitted when the reason
or message changes, not on every attempt.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Final

from berth_operator.api.conditions import CondType
from berth_operator.reconcile.observe import ObservedPod
from berth_operator.reconcile.plan import Decision, Event, finish
from berth_operator.reconcile.replacement import Verdict

STORE_RETRY_SECONDS: Final = 30.0
"""Seconds between placements of a session waiting for its store volume."""


def wait_for_store(d: Decision, pod: ObservedPod, verdict: Verdict) -> None:
    """Record the store failure of ``pod`` in Degraded/Ready and schedule the next placement
    :data:`STORE_RETRY_SECONDS` from now (``status.nextAttemptAt``); ``status.restarts`` is
    left as it is, so a full volume never ends the session ``RetriesExhausted``."""
    st, conds, plan = d.st, d.conds, d.plan
    detail = verdict.detail or "the store volume cannot be written"
    msg = f"{detail}; placing the session again in {STORE_RETRY_SECONDS:g}s (pod {pod.name})"
    before = conds.get(CondType.DEGRADED)
    if before is None or before.reason != verdict.reason or not before.message.startswith(detail):
        plan.events.append(Event("Warning", verdict.reason, msg))
    conds.set(CondType.DEGRADED, "True", verdict.reason, msg)
    st.next_attempt_at = d.obs.now + timedelta(seconds=STORE_RETRY_SECONDS)
    finish(st, conds, "Resuming", msg, reason=verdict.reason)
    plan.requeue_after = STORE_RETRY_SECONDS
