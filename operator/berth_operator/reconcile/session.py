"""``decide``: the AgentSession reconcile decision (docs/architecture.md §3, §5, §8).

Input: an ``Observation`` (session spec and status as last written, the session's pods from the
watch cache, their nodes, the pod created but not yet seen, the runtime's /v1/state, now).
Output: a ``Plan``: the whole new status, pods to delete, at most one pod to create, Events,
and when to look again. The handler writes the status *first* (with the object's
resourceVersion, so a stale view never commits) and only then creates the pod: the epoch is
bumped in status before every create, so a restart between the two can only skip an epoch, never
reuse one. (A create of the stored epoch that this process saw fail, its pod never made, is
tried again at that epoch: the pod's name is the epoch's, so there is never a second pod of
it.) The handler also lists the pods straight from the API before it creates, so a stale cache
never makes two pods for one session.

States (status.phase is derived, conditions carry the detail)::

    Pending ──pod running──► Running ──completed──► Succeeded
       ▲                       │ died without passivating (crash, node lost, evicted)
       │                       ▼
       └── new epoch ◄── Resuming (backoff base·2^(n-1)) ──n > max retries──► Failed

    Running ──trigger (drain, eviction, suspend)──► Passivating ──pod ended or deadline──►
        Resuming (no backoff, replacement avoids the node) ──► Running (Passivated=False Resumed)
        or, with spec.suspend, Passivated (no pod, Passivated=True)

    Running, keepAlive and idle for spec.idle.afterSeconds ──idle_reaper──► Passivating ──►
        Passivated (at rest: no pod, no PDB, Passivated=True AtRest) ──wake──► Resuming

    Running on an image other than the session's current one (imageUpdatePolicy Migrate, a
        migration slot free) ──migration──► Passivating ──► Resuming (new image) ──► Running

Here: ``decide`` and the steps of the pod's lifecycle (the current pod alive, stuck, completed,
dead or being deleted; no current pod). What a pass takes from the pod's reports and the run
records (``status.runs``) are in ``reconcile.session_runs``; the gate in front of a placement and
the placement itself (the epoch bumped, the pod's create planned or a failed one tried again)
in ``reconcile.session_place``. Passivation decisions live in ``reconcile.passivation``;
``reconcile.session_passivation`` applies them. The input and output types are in
``reconcile.plan``.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime, timedelta

from berth_operator.api.agentsession import AgentSessionStatus, Phase, Result
from berth_operator.api.conditions import ConditionSet, CondType, PlacementReason, Reason
from berth_operator.builders.names import pod_epoch, pod_name
from berth_operator.reconcile import passivation as pv
from berth_operator.reconcile import session_passivation as sp
from berth_operator.reconcile.observe import ObservedPod
from berth_operator.reconcile.plan import (
    LANEWORKER_REQUEUE,
    NOT_RUNNING_REQUEUE,
    STARTING_POLL_SECONDS,
    TERMINAL_REQUEUE,
    Decision,
    DeletePod,
    Event,
    Observation,
    Plan,
    finish,
)
from berth_operator.reconcile.replacement import Verdict, classify
from berth_operator.reconcile.session_place import maybe_place, unplaced
from berth_operator.reconcile.session_runs import (
    absorb_state,
    absorb_termination,
    end_run,
    truncate,
)
from berth_operator.reconcile.store_wait import wait_for_store
from berth_operator.reconcile.warmpool import choose_adoption
from berth_operator.settings import OperatorSettings


def decide(obs: Observation, settings: OperatorSettings) -> Plan:
    """Decide the next step for one AgentSession (see the module docstring). Pure."""
    st = obs.status.model_copy(deep=True)
    st.observed_generation = obs.ref.generation
    conds = ConditionSet(st.conditions, obs.now, obs.ref.generation)
    plan = Plan(status=st)
    d = Decision(obs, st, conds, plan, settings)
    current = _current_pod(obs, st, plan)
    _store_ready(d, current)
    epoch = st.epoch or 0

    if conds.is_true(CondType.COMPLETED):
        finish(st, conds, "Succeeded")
        plan.requeue_after = TERMINAL_REQUEUE
    elif conds.is_true(CondType.FAILED):
        failed = conds.get(CondType.FAILED)
        reason = _ready_reason(conds)
        finish(st, conds, "Failed", failed.message if failed and reason else "", reason=reason)
        plan.requeue_after = TERMINAL_REQUEUE
    elif current is None and obs.inflight and obs.inflight == st.pod_name:
        # a pod we created is not in the cache yet: it exists, wait for the watch event
        conds.set(CondType.PLACED, "False", Reason.POD_CREATED, f"placing pod {obs.inflight}")
        finish(st, conds, "Pending" if epoch <= 1 else "Resuming")
        plan.requeue_after = NOT_RUNNING_REQUEUE
    elif current is not None and current.deleting:
        _current_deleting(d, current)
    elif current is not None:
        _current_pod_step(d, current)
    else:
        _no_current_pod(d, epoch)
    _finalize(obs, plan, settings)
    return plan


def _finalize(obs: Observation, plan: Plan, settings: OperatorSettings) -> None:
    """What the pass leaves behind besides the status: the epoch its write reserves; for a pod
    to place, adopt or create (``choose_adoption``), and which deletes wait for the create
    (those of pods that have ended hold the new pod back no more)."""
    plan.reserve = pv.reservation(obs.status.passivation, plan.status.passivation)
    if plan.create is not None:
        if obs.warm is not None:
            adopt = choose_adoption(
                obs.warm,
                obs.spec,
                disrupted=obs.node_disruptions.keys(),
                avoid_nodes=plan.create.avoid_nodes,
                default_image=settings.images.session,
                default_deadline=settings.passivation.deadline_seconds,
            )
            plan.create = replace(plan.create, adopt=adopt)
        ended = {p.name for p in obs.pods if p.ended}
        plan.delete_after_create = [d for d in plan.delete if d.name in ended]


def _store_ready(d: Decision, current: ObservedPod | None) -> None:
    """``StoreReady`` from the claim as observed; without a new look, a scheduled pod confirms
    it (the scheduler binds a pod only with its claims bound)."""
    conds = d.conds
    if d.obs.claim is not None:
        ready, reason, message = d.obs.claim
        conds.set(CondType.STORE_READY, "True" if ready else "False", reason, message[:1024])
        return
    store = conds.get(CondType.STORE_READY)
    if store is not None and store.status != "True" and current is not None and current.node_name:
        msg = f"pod {current.name} was scheduled with its claim bound"
        conds.set(CondType.STORE_READY, "True", "ClaimBound", msg)


def _current_pod(obs: Observation, st: AgentSessionStatus, plan: Plan) -> ObservedPod | None:
    """The pod of the status's epoch; adopts a pod of a higher epoch (a status write was lost)
    — one in the cache, or the one in flight (created beside a status write that failed:
    ``CreatePod.reserved``) — and plans the deletion of every other pod that is not already
    being deleted."""
    epoch = st.epoch or 0
    top = max((p.epoch for p in obs.pods), default=0)
    pending = pod_epoch(obs.ref.name, obs.inflight) if obs.inflight else None
    if pending is not None and pending > max(top, epoch):
        st.epoch = pending
        st.pod_name = obs.inflight
        st.pod_uid = st.pod_ip = st.node_name = None
        epoch = pending
    elif top > epoch:
        epoch = top
        st.epoch = epoch
        st.pod_name = pod_name(obs.ref.name, epoch)
    current = next((p for p in obs.pods if p.epoch == epoch and epoch > 0), None)
    for p in obs.pods:
        if p is not current and not p.deleting:
            lost = p.node_name in obs.nodes and not obs.nodes[p.node_name].exists
            plan.delete.append(DeletePod(p.name, p.uid, force=lost))
    return current


def _current_deleting(d: Decision, current: ObservedPod) -> None:
    """The current pod is being deleted: wait until it is gone (force it if its node is lost);
    deleted by someone else while we still counted on it: account for its death now."""
    obs, st, conds, plan, settings = d.obs, d.st, d.conds, d.plan, d.settings
    node = obs.nodes.get(current.node_name)
    verdict = classify(
        current, node, obs.now, node_grace_seconds=settings.placement.node_lost_grace_seconds
    )
    if st.pod_uid == current.uid:
        _handle_death(d, current, verdict_or_deleted(verdict))
        return
    if verdict.force_delete:
        plan.delete.append(DeletePod(current.name, current.uid, force=True))
    if current.ended:  # its death is accounted for and nothing of it runs any more
        maybe_place(d, st.epoch or 0)
        return
    conds.set(CondType.RUNNING, "False", Reason.NOT_RUNNING, f"pod {current.name} terminating")
    finish(st, conds, "Resuming" if (st.epoch or 0) > 1 else "Pending")
    plan.requeue_after = NOT_RUNNING_REQUEUE


def _death_accounted(st: AgentSessionStatus, pod: ObservedPod) -> bool:
    """Whether the death of ``pod`` was already handled: ``_handle_death`` clears the pod from
    status, so an ended pod of the current epoch with no pod in status is one a previous decision
    already counted and deleted (the watch cache has not shown the deletion yet)."""
    return st.pod_name is None and st.pod_uid is None and bool(pod.uid)


def _await_accounted_pod(d: Decision, pod: ObservedPod, verdict: Verdict) -> None:
    """Wait for a pod whose death was already handled to go, without counting it again (no
    second passivation, restart or Event); its delete is repeated (idempotent)."""
    st, conds, plan = d.st, d.conds, d.plan
    plan.delete.append(DeletePod(pod.name, pod.uid, force=verdict.force_delete))
    conds.set(CondType.RUNNING, "False", Reason.NOT_RUNNING, f"pod {pod.name} terminating")
    finish(st, conds, st.phase or "Resuming")
    plan.requeue_after = NOT_RUNNING_REQUEUE


def _current_pod_step(d: Decision, current: ObservedPod) -> None:
    """The current pod exists: follow it while alive, record its result, or replace it."""
    obs, st, settings = d.obs, d.st, d.settings
    now = obs.now
    node = obs.nodes.get(current.node_name)
    verdict = classify(
        current, node, now, node_grace_seconds=settings.placement.node_lost_grace_seconds
    )
    if verdict.kind == "replace" and _death_accounted(st, current):
        _await_accounted_pod(d, current, verdict)
        if current.ended:  # its object may linger; nothing of it runs any more
            maybe_place(d, st.epoch or 0)
        return
    st.pod_name = current.name
    st.pod_uid = current.uid
    st.pod_ip = current.pod_ip or None
    st.node_name = current.node_name or None
    st.image = current.image or st.image
    if verdict.kind == "alive":
        _handle_alive(d, current)
        sp.on_alive(d, current)
    elif verdict.kind == "completed":
        _completed(d, current, verdict)
    elif verdict.kind in ("budget_exhausted", "unconfinable"):
        _failed_for_good(d, current, verdict)
    else:
        _handle_death(d, current, verdict)


def _failed_for_good(d: Decision, current: ObservedPod, verdict: Verdict) -> None:
    """A run that no replacement would get further: its budget is spent, or its node cannot
    confine tool processes under ``toolSandbox: Required`` (the runtime's message names the
    node; the user places the session elsewhere or opts out). Failed at once, with a Warning
    Event; for the latter Ready's reason is ``ToolSandboxUnavailable``."""
    obs, st, conds, plan = d.obs, d.st, d.conds, d.plan
    now = obs.now
    absorb_termination(st, current, verdict.termination, now)
    sp.notice_resume(d, current, verdict.termination.run_id if verdict.termination else None)
    st.runs = end_run(list(st.runs or []), current, st.run_id, "failed", verdict.detail, now)
    st.last_error = verdict.detail[:4096]
    sp.on_run_ended(d, "failed")
    if verdict.kind == "budget_exhausted":
        conds.set(CondType.BUDGET_EXHAUSTED, "True", Reason.BUDGET_EXHAUSTED, verdict.detail)
    conds.set(CondType.FAILED, "True", verdict.reason, verdict.detail)
    conds.set(CondType.RUNNING, "False", Reason.NOT_RUNNING, "pod finished")
    plan.events.append(Event("Warning", verdict.reason, verdict.detail))
    finish(st, conds, "Failed", verdict.detail, reason=_ready_reason(conds))


def _ready_reason(conds: ConditionSet) -> str | None:
    """Ready's reason in phase Failed when the default (``Failed``) says less than ``Failed``'s
    own reason: a cause the user must act on."""
    failed = conds.get(CondType.FAILED)
    if failed is not None and failed.reason == Reason.TOOL_SANDBOX_UNAVAILABLE:
        return failed.reason
    return None


def _completed(d: Decision, current: ObservedPod, verdict: Verdict) -> None:
    """The run completed: result, lineage, Completed=True, phase Succeeded."""
    obs, st, conds, plan = d.obs, d.st, d.conds, d.plan
    now = obs.now
    absorb_termination(st, current, verdict.termination, now)
    if obs.state is not None:
        absorb_state(st, current, obs.state, now)
    reported = (verdict.termination.run_id if verdict.termination else None) or (
        obs.state.run_id if obs.state else None
    )
    sp.notice_resume(d, current, reported, obs.state)
    st.runs = end_run(list(st.runs or []), current, st.run_id, "completed", verdict.detail, now)
    text = (
        (verdict.termination.result_text if verdict.termination else None)
        or (obs.state.result_text if obs.state else None)
        or ""
    )
    text, truncated = truncate(text)
    st.result = Result(text=text, truncated=truncated or None, finished_at=now)
    st.restarts = 0
    st.next_attempt_at = None
    sp.on_run_ended(d, "completed")
    conds.set(CondType.COMPLETED, "True", Reason.RUN_COMPLETED, "the task finished")
    conds.set(CondType.RUNNING, "False", Reason.NOT_RUNNING, "pod finished")
    conds.set(CondType.DEGRADED, "False", Reason.AS_EXPECTED)
    plan.events.append(Event("Normal", Reason.RUN_COMPLETED, f"run {st.run_id} completed"))
    finish(st, conds, "Succeeded")


def _no_current_pod(d: Decision, epoch: int) -> None:
    """No pod of the current epoch: account for the one status names (it vanished, or its
    create never happened), then place the next one when allowed."""
    st, conds = d.st, d.conds
    if st.pod_name is not None and epoch > 0 and unplaced(d, epoch) is None:
        gone = ObservedPod(name=st.pod_name, uid=st.pod_uid or "", epoch=epoch)
        if st.pod_uid:
            verdict = Verdict(
                "replace",
                PlacementReason.DELETED,
                f"pod {st.pod_name} disappeared",
                counts_as_failure=True,
                run_outcome="lost",
            )
        else:
            verdict = Verdict(
                "replace",
                PlacementReason.INTERRUPTED,
                f"pod {st.pod_name} was never seen",
                run_outcome="lost",
            )
        _handle_death(d, gone, verdict)
        if conds.is_true(CondType.FAILED):
            return
    maybe_place(d, epoch)


def verdict_or_deleted(verdict: Verdict) -> Verdict:
    """A pod deleted by someone else: keep a real death verdict, else call it PodDeleted."""
    if verdict.kind == "replace":
        return verdict
    return Verdict(
        "replace",
        PlacementReason.DELETED,
        "pod deleted",
        counts_as_failure=True,
        run_outcome="lost",
    )


def _handle_alive(d: Decision, pod: ObservedPod) -> None:
    obs, st, conds, plan, settings = d.obs, d.st, d.conds, d.plan, d.settings
    now = obs.now
    if pod.scheduled or pod.node_name:
        conds.set(
            CondType.PLACED, "True", Reason.POD_SCHEDULED, f"pod {pod.name} on node {pod.node_name}"
        )
    elif pod.unschedulable_message:
        conds.set(CondType.PLACED, "False", Reason.UNSCHEDULABLE, pod.unschedulable_message[:1024])
    else:
        conds.set(CondType.PLACED, "False", Reason.POD_CREATED, f"placing pod {pod.name}")
    running = pod.phase == "Running" and obs.state is not None
    if obs.state is not None:
        absorb_state(st, pod, obs.state, now)
    if running:
        conds.set(
            CondType.RUNNING,
            "True",
            Reason.RUNTIME_READY,
            f"runtime state {obs.state.state if obs.state else '?'}",
        )
        conds.set(CondType.DEGRADED, "False", Reason.AS_EXPECTED)
        if (
            st.restarts
            and pod.started_at is not None
            and (now - pod.started_at).total_seconds() >= settings.placement.restart_reset_seconds
        ):
            st.restarts = 0
        st.next_attempt_at = None
        finish(st, conds, "Running")
        plan.requeue_after = settings.session_api.status_refresh_seconds
    elif pod.waiting_reason in Reason.STUCK_WAITING:
        _stuck(st, conds, plan, pod.name, pod.waiting_reason, pod.waiting_message)
    elif pod.unschedulable_message:
        _stuck(st, conds, plan, pod.name, Reason.UNSCHEDULABLE, pod.unschedulable_message)
    else:
        why = obs.state_error or f"pod phase {pod.phase}"
        conds.set(CondType.RUNNING, "False", Reason.STARTING, why[:1024])
        finish(st, conds, "Pending" if (st.epoch or 0) <= 1 else "Resuming")
        # Pod changes (scheduled, started, ready) wake the session through the pod watch; the
        # runtime's /v1/state is polled at the refresh interval like for running sessions, and
        # every second for a while once an adopted pod runs: it was Ready before its run
        # started, so no pod event says when the run is up. (Not for every starting pod: a
        # burst of pods whose runtimes do not answer would hold every reconcile slot with
        # state requests waiting for their timeout.)
        plan.requeue_after = settings.session_api.status_refresh_seconds
        if (
            pod.adopted
            and pod.phase == "Running"
            and _not_running_for(conds, now) < STARTING_POLL_SECONDS
        ):
            plan.requeue_after = min(plan.requeue_after, NOT_RUNNING_REQUEUE)


def _not_running_for(conds: ConditionSet, now: datetime) -> float:
    """Seconds since ``Running`` last turned False (0 when it has no transition time)."""
    cond = conds.get(CondType.RUNNING)
    since = cond.last_transition_time if cond is not None else None
    return (now - since).total_seconds() if since is not None else 0.0


def _stuck(
    st: AgentSessionStatus,
    conds: ConditionSet,
    plan: Plan,
    pod_name: str,
    reason: str,
    detail: str,
) -> None:
    """The pod waits for something a user must fix: a kubelet waiting reason
    (``Reason.STUCK_WAITING``) or the scheduler's ``Unschedulable``. Say so in Running and
    Ready with the kubelet's or scheduler's message, and once per new problem in an Event."""
    msg = f"pod {pod_name}: {reason}: {detail or 'see kubectl describe pod'}"[:1024]
    before = conds.get(CondType.RUNNING)
    if before is None or (before.reason, before.message) != (reason, msg):
        plan.events.append(Event("Warning", reason, msg))
    conds.set(CondType.RUNNING, "False", reason, msg)
    phase: Phase = "Pending" if (st.epoch or 0) <= 1 else "Resuming"
    finish(st, conds, phase, msg, reason=reason)
    plan.requeue_after = LANEWORKER_REQUEUE  # pod changes wake the session sooner


def _handle_death(d: Decision, pod: ObservedPod, verdict: Verdict) -> None:
    """The current pod is gone or must go: record it, delete it, schedule the replacement."""
    obs, st, conds, plan = d.obs, d.st, d.conds, d.plan
    now = obs.now
    verdict = pv.reclassify(st.passivation, pod.name, verdict)
    absorb_termination(st, pod, verdict.termination, now)
    run_id = verdict.termination.run_id if verdict.termination else None
    sp.notice_resume(d, pod, run_id)
    st.runs = end_run(
        list(st.runs or []),
        pod,
        run_id or None,
        verdict.run_outcome,
        f"{verdict.reason}: {verdict.detail}",
        now,
    )
    if pod.uid and (not pod.deleting or verdict.force_delete):
        plan.delete.append(DeletePod(pod.name, pod.uid, force=verdict.force_delete))
    st.pod_name = None
    st.pod_uid = None
    st.pod_ip = None
    st.placement_reason = verdict.reason
    conds.set(CondType.RUNNING, "False", Reason.NOT_RUNNING, f"{verdict.reason}: {verdict.detail}")
    conds.set(CondType.PLACED, "False", Reason.WAITING_FOR_POD, f"replacing pod {pod.name}")
    if verdict.reason == PlacementReason.PASSIVATED:
        st.passivations = (st.passivations or 0) + 1
        st.next_attempt_at = None
        sp.on_pod_ended(d, pod, verdict)
        plan.events.append(Event("Normal", "Passivated", f"pod {pod.name} passivated; resuming"))
        finish(st, conds, "Resuming")
        plan.requeue_after = 0
        _replace_ended(d, pod)
        return
    if verdict.store:
        wait_for_store(d, pod, verdict)
        return
    if not verdict.counts_as_failure:
        st.next_attempt_at = None
        plan.events.append(Event("Normal", verdict.reason, f"{verdict.detail}; replacing"))
        finish(st, conds, "Resuming")
        plan.requeue_after = 0
        _replace_ended(d, pod)
        return
    _failed_pod(d, pod, verdict)


def _replace_ended(d: Decision, pod: ObservedPod) -> None:
    """Place the replacement of a pod that has ended (``ObservedPod.ended``) in the decision
    that records its end, instead of the next one: one status write and one round trip less
    on the path of every resume. A pod that has not ended is waited for first."""
    if pod.ended:
        maybe_place(d, d.st.epoch or 0)


def _failed_pod(d: Decision, pod: ObservedPod, verdict: Verdict) -> None:
    """A death that counts as a failure: Degraded, then a backoff before the replacement, or
    Failed once ``max_placement_retries`` replacements were made in a row. Degraded's reason
    (and so Ready's while it retries, see ``finish``) and the Event's are the kubelet's
    terminated reason when it is precise (OOMKilled), so ``kubectl get ags`` names it."""
    obs, st, conds, plan, settings = d.obs, d.st, d.conds, d.plan, d.settings
    now = obs.now
    st.restarts = (st.restarts or 0) + 1
    cause = verdict.kubelet_reason or verdict.reason
    conds.set(CondType.DEGRADED, "True", cause, f"pod {pod.name}: {verdict.detail}")
    if st.restarts > settings.placement.max_placement_retries:
        msg = (
            f"pod {pod.name} died ({verdict.reason}: {verdict.detail}) and "
            f"{settings.placement.max_placement_retries} replacements were already made"
        )
        st.last_error = msg
        conds.set(CondType.FAILED, "True", Reason.RETRIES_EXHAUSTED, msg)
        plan.events.append(Event("Warning", Reason.RETRIES_EXHAUSTED, msg))
        finish(st, conds, "Failed", msg, reason=verdict.kubelet_reason or None)
        return
    delay = settings.placement.backoff_seconds(st.restarts)
    st.next_attempt_at = now + timedelta(seconds=delay)
    msg = (
        f"pod {pod.name}: {verdict.detail}; resuming in {delay:g}s "
        f"(attempt {st.restarts}/{settings.placement.max_placement_retries})"
    )
    plan.events.append(Event("Warning", cause, msg))
    finish(st, conds, "Resuming", msg)
    plan.requeue_after = delay
