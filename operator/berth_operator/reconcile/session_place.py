"""The placement of an AgentSession's next pod, and the gate in front of it.

Called by :func:`berth_operator.reconcile.session.decide` whenever no pod of the current epoch
runs (:func:`maybe_place`): a suspended session is Passivated and an idle-passivated one stays at
rest; otherwise the first reason not to place a pod now (a LaneWorker, the claim or the
credentials missing; the claim's volume set-up running or failed; old pods that may still run,
:func:`not_ended`; the backoff) is said in ``Placed``, or the epoch is bumped in status and the
create of its pod planned, or the failed create of the stored epoch (:func:`unplaced`) is tried
again. Pure.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import timedelta

from berth_operator.api.agentsession import AgentSessionStatus, Phase
from berth_operator.api.conditions import CondType, PlacementReason, Reason
from berth_operator.builders.names import pod_name
from berth_operator.reconcile import idle
from berth_operator.reconcile import passivation as pv
from berth_operator.reconcile.plan import (
    LANEWORKER_REQUEUE,
    NOT_RUNNING_REQUEUE,
    TERMINAL_REQUEUE,
    CreateFailure,
    CreatePod,
    Decision,
    Event,
    Observation,
    Plan,
    finish,
)

SETUP_REQUEUE = 2.0
"""Seconds between looks while the shared claim's set-up Job runs (a few seconds' work)."""


@dataclass(frozen=True, slots=True)
class _Blocked:
    """Why no pod is placed now: the Placed condition's reason and message, when to look again,
    whether a user must act (a Warning Event once per new problem; the reason also becomes
    Ready's) and the phase."""

    reason: str
    message: str
    requeue: float
    user_must_act: bool = False
    phase: Phase | None = None


def _blocked(obs: Observation, st: AgentSessionStatus, plan: Plan) -> _Blocked | None:
    """The first reason not to place a pod now, or None. Pure."""
    if obs.missing_laneworkers:
        msg = "LaneWorker not found: " + ", ".join(obs.missing_laneworkers)
        return _Blocked(Reason.LANE_WORKER_NOT_FOUND, msg, LANEWORKER_REQUEUE)
    if obs.claim is not None and obs.claim[1] == Reason.CLAIM_MISSING:
        return _Blocked(Reason.CLAIM_MISSING, obs.claim[2][:1024], LANEWORKER_REQUEUE, True)
    if obs.claim is not None and obs.claim[1] == Reason.VOLUME_SETUP_FAILED:
        return _Blocked(Reason.VOLUME_SETUP_FAILED, obs.claim[2][:1024], LANEWORKER_REQUEUE, True)
    if obs.claim is not None and obs.claim[1] == Reason.VOLUME_SETTING_UP:
        # The pod's subPath directories would be made in a root it cannot write.
        return _Blocked(Reason.VOLUME_SETTING_UP, obs.claim[2][:1024], SETUP_REQUEUE)
    if obs.credentials_problem is not None:
        reason, msg = obs.credentials_problem
        return _Blocked(reason, msg, LANEWORKER_REQUEUE, True)
    if not_ended(obs, plan):
        # Old pods still run (or may: being deleted, never seen): never two at once.
        return _Blocked(Reason.WAITING_FOR_POD, "waiting for old pods to go", NOT_RUNNING_REQUEUE)
    if st.next_attempt_at is not None and st.next_attempt_at > obs.now:
        wait = (st.next_attempt_at - obs.now).total_seconds()
        return _Blocked(Reason.BACKOFF, f"next attempt in {wait:.0f}s", wait, phase="Resuming")
    return None


def not_ended(obs: Observation, plan: Plan) -> list[str]:
    """Names of the session's old pods that may still run: observed and not ended
    (``ObservedPod.ended``), or planned for deletion without being observed ended (a pod the
    status names that the cache does not show may exist). A pod whose session container has
    terminated does not hold the next one back: its process is gone for good, and its epoch
    is fenced out of the store by the next one's anyway (docs/architecture.md §6). Pure."""
    ended = {p.name for p in obs.pods if p.ended}
    names = [p.name for p in obs.pods if not p.ended]
    names += [x.name for x in plan.delete if x.name not in ended and x.name not in names]
    return names


def maybe_place(d: Decision, epoch: int) -> None:
    """No pod of the current epoch: place the next one when allowed.

    ``epoch`` is the stored one (0 before the first pod). With ``spec.suspend`` the session is
    Passivated without a pod; an idle-passivated one with no wake stays at rest
    (``_at_rest``). Otherwise, while something holds the placement back (``_blocked``),
    ``Placed=False`` says why, as a Kubernetes condition does (reason and message; a Warning
    Event once per new problem a user must fix, whose reason is then also Ready's), and
    ``plan.requeue_after`` is when to look again; else the pod is placed (``_place``). Sets
    the phase in every case."""
    obs, st, conds, plan = d.obs, d.st, d.conds, d.plan
    resuming = epoch > 0
    if obs.spec.suspend:
        conds.set(CondType.PASSIVATED, "True", Reason.PASSIVATED, "spec.suspend is true")
        st.at_rest_since = st.at_rest_since or obs.precise_now or obs.now
        finish(st, conds, "Passivated")
        return
    if _at_rest(d):
        return
    blocked = _blocked(obs, st, plan)
    if blocked is not None:
        before = conds.get(CondType.PLACED)
        new_problem = before is None or (before.reason, before.message) != (
            blocked.reason,
            blocked.message,
        )
        if blocked.user_must_act and new_problem:
            plan.events.append(Event("Warning", blocked.reason, blocked.message))
        conds.set(CondType.PLACED, "False", blocked.reason, blocked.message)
        phase: Phase = blocked.phase or ("Resuming" if resuming else "Pending")
        transient = blocked.reason in (Reason.WAITING_FOR_POD, Reason.BACKOFF)
        ready_reason = blocked.reason if blocked.user_must_act else None  # the REASON column
        finish(st, conds, phase, "" if transient else blocked.message, reason=ready_reason)
        plan.requeue_after = blocked.requeue
        return
    _place(d, epoch)


def _at_rest(d: Decision) -> bool:
    """An idle-passivated session with no wake stays at rest (``reconcile.idle``): no pod, its
    PodDisruptionBudget released, ``Passivated=True AtRest`` saying since when. Pure."""
    obs, st, conds, plan = d.obs, d.st, d.conds, d.plan
    since = idle.stays_at_rest(obs.spec, st.passivation, obs.wake_requested_at)
    if since is None:
        return False
    st.at_rest_since = since
    msg = (
        f"at rest since {since.isoformat(timespec='seconds')} (idle_reaper); a message or "
        "kubectl berth wake resumes it"
    )
    before = conds.get(CondType.PASSIVATED)
    if before is None or before.reason != Reason.AT_REST:
        plan.events.append(Event("Normal", Reason.AT_REST, msg))
    conds.set(CondType.PASSIVATED, "True", Reason.AT_REST, msg)
    finish(st, conds, "Passivated")
    plan.requeue_after = TERMINAL_REQUEUE  # a wake (annotation or spec change) is an event
    return True


def unplaced(d: Decision, epoch: int) -> CreateFailure | None:
    """The failed create of ``epoch``'s pod, when the status still names that pod as never
    seen: its pod never existed, so the epoch is placed again (``_place_again``) rather than
    counted as a lost pod and left for the next one. Pure.

    The failure is ``d.obs.create_failure`` (the create the handler saw fail after the epoch
    was stored, with its attempts and when it last failed: ``OperatorContext.create_failed``);
    None when there is none, it is of another epoch, or the status names a seen pod (a uid)
    or another pod."""
    failure, st = d.obs.create_failure, d.st
    if (
        failure is None
        or epoch <= 0
        or failure.create.epoch != epoch
        or st.pod_uid
        or st.pod_name != pod_name(d.obs.ref.name, epoch)
    ):
        return None
    return failure


def _place_again(d: Decision, failure: CreateFailure) -> None:
    """Try the failed create of the current epoch again once the placement backoff after the
    last attempt has passed (``PlacementSettings.backoff_seconds(attempts)``); until then say
    why in ``Placed`` and ``Ready`` (reason ``PodCreateFailed``), with a Warning Event once
    per new error. The epoch stays: no pod of it ever ran. Pure."""
    obs, st, conds, plan, settings = d.obs, d.st, d.conds, d.plan, d.settings
    msg = f"pod {st.pod_name} could not be created: {failure.message}"[:1024]
    before = conds.get(CondType.PLACED)
    if before is None or (before.reason, before.message) != (Reason.POD_CREATE_FAILED, msg):
        plan.events.append(Event("Warning", Reason.POD_CREATE_FAILED, msg))
    conds.set(CondType.PLACED, "False", Reason.POD_CREATE_FAILED, msg)
    phase: Phase = "Resuming" if (st.epoch or 0) > 1 else "Pending"
    finish(st, conds, phase, msg, reason=Reason.POD_CREATE_FAILED)
    due = failure.failed_at + timedelta(
        seconds=settings.placement.backoff_seconds(failure.attempts)
    )
    if obs.now < due:
        plan.requeue_after = (due - obs.now).total_seconds()
        return
    plan.create = replace(failure.create, reserved=False)  # the epoch is stored by now
    plan.requeue_after = NOT_RUNNING_REQUEUE


def _place(d: Decision, epoch: int) -> None:
    """Bump the epoch in status (``passivation.replacement_epoch``: the next one, or for a
    passivated pod's replacement the one its request reserved) and plan the create of its pod
    (resuming the last run); or, when this epoch's create failed, try it again
    (``_place_again``)."""
    obs, st, conds, plan = d.obs, d.st, d.conds, d.plan
    failure = unplaced(d, epoch)
    if failure is not None:
        _place_again(d, failure)
        return
    resuming = epoch > 0
    new_epoch, reserved = pv.replacement_epoch(st.passivation, epoch, obs.reserved_epoch)
    reason = st.placement_reason if resuming and st.placement_reason else PlacementReason.INITIAL
    if not resuming:
        reason = PlacementReason.INITIAL
    resume = st.run_id if resuming else None
    st.epoch = new_epoch
    st.pod_name = pod_name(obs.ref.name, new_epoch)
    st.pod_uid = None
    st.pod_ip = None
    st.node_name = None
    st.placement_reason = reason
    st.next_attempt_at = None
    st.at_rest_since = None
    plan.create = CreatePod(
        epoch=new_epoch,
        reason=reason,
        resume_run_id=resume,
        avoid_nodes=pv.avoid_nodes(st.passivation),
        reserved=reserved,
    )
    conds.set(CondType.PLACED, "False", Reason.POD_CREATED, f"placing pod {st.pod_name}")
    finish(st, conds, "Resuming" if resuming else "Pending")
    plan.requeue_after = NOT_RUNNING_REQUEUE
