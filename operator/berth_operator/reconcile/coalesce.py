"""Which status writes may wait: coalescing a starting pod's and a running session's churn.

A new session's pod goes through several observable steps within a second or two (seen by the
watch, scheduled, given an IP, its runtime answering); writing the status at each costs an
apiserver write per step, and at hundreds of sessions those writes are what the apiserver spends
its time on. A change that only refreshes *information* — the pod's uid, IP, node and image,
usage figures, the last error, conditions' reasons and messages while every condition keeps its
status, and ``Placed`` turning True (the pod was scheduled: the node is on the pod, and the
``Running`` flip that follows on a real node carries it), and a running session's progress (its
checkpoint moving on within the same run: the turn, tool calls and time of the last durable round,
which the runtime keeps in its store and reports again at every look) — may wait up to a window
(the operator's ``status_coalesce_seconds`` setting, 10 s by default) after the previous write and
go out together with whatever follows: a new session's status is then written twice (its epoch
before the pod exists, and once its runtime answers) instead of at each step. The window is
longer than a pod's usual start because under a burst of creations those steps are several
seconds apart, and a window shorter than the gaps writes at each step anyway. Everything the
operator relies on across a restart (epoch, phase, the passivation record, runs, a run's first
checkpoint, observedGeneration, the result) and every other condition status flip is written at
once, as are plans with actions (deletes, a create, a passivate request, a PDB to release, Events,
metrics). A passivate call that only repeats the stored request is not such an action: the
handler makes it whether or not the status waits.
Pure: no I/O.
"""

from __future__ import annotations

from typing import Any, Final

from berth_operator.api.agentsession import AgentSessionStatus
from berth_operator.api.conditions import CondType
from berth_operator.reconcile.plan import Plan

INFORMATIONAL_FIELDS: Final = frozenset(
    {"podUid", "podIP", "nodeName", "image", "usage", "lastError"}
)
"""Status fields (wire names) whose change alone may wait."""


def _condition_statuses(wire: dict[str, Any]) -> dict[str, str]:
    return {c["type"]: c["status"] for c in wire.get("conditions") or []}


def _flips(old: dict[str, Any], new: dict[str, Any]) -> bool:
    """Whether a condition's status changes, ``Placed`` turning True aside (module docstring)."""
    before, after = _condition_statuses(old), _condition_statuses(new)
    if after.get(CondType.PLACED) == "True":
        before.pop(CondType.PLACED, None)
        after.pop(CondType.PLACED, None)
    return before != after


def _progress_only(old: dict[str, Any], new: dict[str, Any]) -> bool:
    """Whether the checkpoints (wire form, ``{}`` for none) differ only as a run's progress:
    both with a durable turn, of the same run."""
    return (
        old.get("turn") is not None
        and new.get("turn") is not None
        and old.get("runId") == new.get("runId")
    )


def informational_only(before: AgentSessionStatus, plan: Plan) -> bool:
    """True when carrying out ``plan`` over the stored status ``before`` changes nothing but
    information (module docstring): no action (a passivate call that repeats the stored
    request aside), the same values outside ``INFORMATIONAL_FIELDS``, conditions and a
    checkpoint's progress, and the same status for every condition (but ``Placed`` turning
    True)."""
    if plan.delete or plan.create or plan.events or plan.metrics:
        return False
    if plan.passivate is not None and not plan.passivate.resend:
        return False
    old, new = before.wire(), plan.status.wire()
    if old == new:
        return False  # nothing to write at all
    skip = INFORMATIONAL_FIELDS | {"conditions"}
    if _progress_only(old.get("checkpoint") or {}, new.get("checkpoint") or {}):
        skip |= {"checkpoint"}
    rest_old = {k: v for k, v in old.items() if k not in skip}
    rest_new = {k: v for k, v in new.items() if k not in skip}
    return rest_old == rest_new and not _flips(old, new)


def write_delay(
    before: AgentSessionStatus,
    plan: Plan,
    since_last_write: float | None,
    window: float,
) -> float | None:
    """Seconds to wait before writing ``plan``'s status, or None to write now.

    ``since_last_write``: seconds since this session's previous status write by this process
    (None when there was none: the first write never waits); ``window``: the longest wait after
    that write (seconds; 0 never waits)."""
    if since_last_write is None or not informational_only(before, plan):
        return None
    remaining = window - since_last_write
    return remaining if remaining > 0 else None
