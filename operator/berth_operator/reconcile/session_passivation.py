"""The passivation steps of an AgentSession decision (docs/architecture.md §8).

Called by :func:`berth_operator.reconcile.session.decide` at four points: the current pod is
alive (:func:`on_alive`: request, wait for or cut off a passivation; notice the resume), a later
pod ended after running the run (:func:`notice_resume`), the pod of a passivation ended
(:func:`on_pod_ended`), the run ended first (:func:`on_run_ended`). Each applies
a decision of :mod:`.passivation` to the status, conditions and :class:`~.plan.Plan`. Pure.
"""

from __future__ import annotations

from datetime import UTC, datetime

from berth_contract.state import RuntimeState
from berth_operator.api.agentsession import (
    MIGRATION,
    PassivationOutcome,
    PassivationStatus,
)
from berth_operator.api.conditions import CondType, Reason
from berth_operator.reconcile import idle, migration
from berth_operator.reconcile import passivation as pv
from berth_operator.reconcile.observe import REPORTED_BY_SESSION, ObservedPod
from berth_operator.reconcile.plan import (
    NOT_RUNNING_REQUEUE,
    Decision,
    DeletePod,
    Event,
    PassivateCall,
    PassivationMetric,
    Plan,
    finish,
)
from berth_operator.reconcile.replacement import Verdict
from berth_operator.settings import OperatorSettings


def on_alive(d: Decision, pod: ObservedPod) -> None:
    """After ``_handle_alive``: request, wait for or cut off a passivation; notice a resume."""
    obs, st, conds, plan, settings = d.obs, d.st, d.conds, d.plan, d.settings
    now = obs.precise_now or obs.now
    notice_resume(d, pod, obs.state.run_id if obs.state else None, obs.state)
    idle_check = idle.check(obs.spec, pod, obs.state, now)
    moving = migration.check(
        obs.spec,
        pod,
        migration.desired_image(obs.spec, settings.images.session),
        uid=obs.ref.uid,
        migrating=obs.migrating,
        max_unavailable=settings.migration.max_unavailable,
    )
    trigger = pv.trigger_for(
        suspend=bool(obs.spec.suspend),
        pod=pod,
        node=obs.node_disruptions.get(pod.node_name) if pod.node_name else None,
        eviction_requested=pod.name in obs.evictions,
        state=obs.state,
        idle=idle_check.trigger,
        migration=moving.trigger,
    )
    decision = pv.step(
        st.passivation,
        pod,
        trigger,
        now,
        deadline_seconds=obs.spec.passivation_deadline_seconds(
            settings.passivation.deadline_seconds
        ),
        state=obs.state,
    )
    if decision.kind == "none" or decision.record is None:
        if idle_check.due_in is not None:  # look again when the idle reaper is due
            due = max(idle_check.due_in, NOT_RUNNING_REQUEUE)
            plan.requeue_after = min(plan.requeue_after or due, due)
        return
    rec = decision.record
    st.passivation = rec
    detail = _apply_step(plan, pod, decision, rec, settings)
    if decision.post and pod.pod_ip:
        plan.passivate = PassivateCall(
            pod.pod_ip,
            rec.reason,
            pv.deadline_ms(rec),
            pod.uid,
            resend=decision.kind == "wait",
            epoch=pod.epoch,
            node=pod.node_name,
            identity=obs.spec.identity.model_dump(by_alias=False) if obs.spec.identity else {},
            run_trace=(obs.state.traceparent or "") if obs.state else "",
        )
    conds.set(CondType.PASSIVATED, "False", Reason.PASSIVATING, detail[:1024])
    finish(st, conds, "Passivating", detail[:1024])
    refresh = settings.session_api.status_refresh_seconds
    plan.requeue_after = min(refresh, decision.requeue) if decision.requeue else NOT_RUNNING_REQUEUE


def notice_resume(
    d: Decision, pod: ObservedPod, run_id: str | None, state: RuntimeState | None = None
) -> None:
    """A passivated run is seen again on ``pod`` as ``run_id`` (from its live ``state``, or
    from its termination message when the resumed run ended before any pass saw it running):
    close the record (Resumed, dated by the run's start as ``state`` reports it:
    ``passivation.resumed``), observe the resume latency, tell it in a condition and an
    Event."""
    obs, st, conds, plan = d.obs, d.st, d.conds, d.plan
    now = obs.precise_now or obs.now
    started = None
    if state is not None and state.run_id == run_id and state.run_started_ms is not None:
        started = datetime.fromtimestamp(state.run_started_ms / 1000, UTC)
    done = pv.resumed(st.passivation, pod, run_id, now, started)
    if done is None:
        return
    st.passivation = done
    wait = pv.seconds_between(done.passivated_at or done.requested_at, done.resumed_at) or 0.0
    plan.metrics.append(PassivationMetric("resume", done.reason, done.outcome, wait))
    msg = f"run {done.resumed_run_id} resumed on pod {pod.name}" + (
        f" (node {pod.node_name})" if pod.node_name else ""
    )
    conds.set(CondType.PASSIVATED, "False", Reason.RESUMED, msg)
    plan.events.append(Event("Normal", Reason.RESUMED, msg))
    finish(st, conds, st.phase or "Running")


def _apply_step(
    plan: Plan,
    pod: ObservedPod,
    decision: pv.Step,
    rec: PassivationStatus,
    settings: OperatorSettings,
) -> str:
    """The Events and deletes of a passivation step (request, delete now, deadline) whose
    record is ``rec``; returns the detail for the Passivated condition."""
    detail = f"{rec.reason}: {rec.message}"
    if decision.kind == "request" and rec.reason == MIGRATION:
        plan.events.append(Event("Normal", Reason.MIGRATION_REQUESTED, f"pod {pod.name}: {detail}"))
    if decision.kind == "request":
        plan.events.append(
            Event(
                "Normal",
                Reason.PASSIVATING,
                f"asking pod {pod.name} to passivate ({detail}); deadline "
                f"{rec.deadline.isoformat(timespec='seconds')}",
            )
        )
    if decision.kind == "delete_now":
        plan.delete.append(DeletePod(pod.name, pod.uid))
        detail += f"; pod {pod.name} had not started, deleting it"
    elif decision.kind == "deadline":
        grace = settings.passivation.kill_grace_seconds
        plan.delete.append(DeletePod(pod.name, pod.uid, grace_seconds=grace))
        detail += f"; deadline passed, deleting pod {pod.name} (grace {grace}s)"
        plan.events.append(
            Event(
                "Warning",
                Reason.PASSIVATION_DEADLINE_EXCEEDED,
                f"pod {pod.name} did not passivate by {rec.deadline.isoformat(timespec='seconds')}"
                "; deleting it, the run resumes from the last durable round",
            )
        )
    return detail


def on_pod_ended(d: Decision, pod: ObservedPod, verdict: Verdict) -> None:
    """The pod of an active passivation ended: close the record, observe the latency. The end
    is dated when the pod's own report came (``observe.ended_as_reported``, milliseconds), else
    when this decision saw it (the kubelet's ``finishedAt`` has whole seconds only)."""
    obs, st, conds, plan = d.obs, d.st, d.conds, d.plan
    now = obs.precise_now or obs.now
    rec = st.passivation
    if rec is None or not pv.active_for(rec, pod.name):
        return
    ended = pod.terminated
    if ended is not None and ended.reason == REPORTED_BY_SESSION and ended.finished_at:
        now = min(now, max(rec.requested_at, ended.finished_at))
    clean = verdict.termination is not None and verdict.termination.outcome == "passivated"
    outcome: PassivationOutcome = "passivated" if clean else "deadline"
    rec = pv.finish(rec, outcome, now)
    st.passivation = rec
    seconds = pv.seconds_between(rec.requested_at, rec.passivated_at) or 0.0
    plan.metrics.append(PassivationMetric("passivation", rec.reason, outcome, seconds))
    msg = f"{rec.reason}: pod {pod.name} " + (
        "passivated" if clean else "deleted before passivating (last durable round stands)"
    )
    conds.set(CondType.PASSIVATED, "False", Reason.PASSIVATED, msg)


def on_run_ended(d: Decision, outcome: PassivationOutcome) -> None:
    """The run ended (completed/failed) while a passivation was pending: close the record."""
    obs, st, conds, plan = d.obs, d.st, d.conds, d.plan
    rec = st.passivation
    if rec is None or rec.outcome != "passivating":
        return
    now = obs.precise_now or obs.now
    st.passivation = pv.finish(rec, outcome, now)
    seconds = pv.seconds_between(rec.requested_at, now) or 0.0
    plan.metrics.append(PassivationMetric("passivation", rec.reason, outcome, seconds))
    conds.set(CondType.PASSIVATED, "False", Reason.NOT_PASSIVATED, f"run {outcome} first")
