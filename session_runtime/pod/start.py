"""What a session pod does first: send the task, resume a run, go idle, or report done.

Owned by the ``berth-session`` entrypoint; :func:`plan_start` is called once after the session is
built, with what the store holds. Pure, table-tested.

A new pod cannot rely on ``BERTH_RESUME_RUN_ID`` alone (docs/architecture.md §8): the operator may
place a pod without it after a crash, and a keepAlive session passivated while idle has nothing to
resume. Sending the prompt again in those cases would redo the task, so the store decides:

======================================  =========================================================
the store holds                         plan
======================================  =========================================================
no saved session                        ``send`` the prompt (a fresh session)
saved, no runs of this object           ``send`` the prompt (a new object of a kept store: a new
                                        run in the kept conversation, never the old result)
target run completed                    keepAlive: ``idle`` (wait for ``/v1/messages``);
                                        else ``done`` (report ``completed`` again, same result)
target run in any other state           ``resume`` it (running → interrupted, passivated, failed,
                                        cancelled: ``resume_run`` continues from its checkpoint)
resume id not among the retained runs   ``resume`` it anyway (retention may have dropped the record;
                                        the checkpoint decides)
======================================  =========================================================

The target run is ``BERTH_RESUME_RUN_ID`` when set, else the newest run of the saved session;
then the newest run *resumed from it* (transitively) that has a checkpoint takes its place. An
earlier pod may already have resumed the target into a newer run and recorded tool results there:
resuming the older run would hide those results from the model and could run a tool twice. A
run that died before its first checkpoint is skipped for the run it was resumed from (its origin
still holds the state), also when it is the target itself: starting the task afresh would ask the
model again for a round whose tools already ran.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

StartAction = Literal["send", "resume", "idle", "done"]


@dataclass(frozen=True, slots=True)
class StartPlan:
    """``action`` and the run it concerns (None for ``send``); ``why`` is for the log."""

    action: StartAction
    run_id: str | None
    why: str


def plan_start(
    resume_run_id: str | None,
    saved: bool,
    runs: Sequence[Mapping[str, Any]],
    keep_alive: bool,
    has_checkpoint: Callable[[str], bool] | None = None,
    inherited: int = 0,
) -> StartPlan:
    """Decide the first step. ``runs`` are this AgentSession object's run snapshots
    (``{"id", "status", "resumed_from", ...}``), oldest first; ``has_checkpoint(run_id)`` says
    whether the store holds a loop checkpoint for a run (None: assume every run has one);
    ``inherited``: how many runs of the kept conversation belong to a deleted object of the same
    name (:mod:`session_runtime.store.incarnation`) and were left out of ``runs``.

    Raises nothing; an unusable record (no ``id``) is skipped.
    """
    if not saved:
        why = "nothing saved for this session"
        if resume_run_id:
            why += f" (run {resume_run_id} never reached the store)"
        return StartPlan("send", None, why)
    known = [r for r in runs if isinstance(r.get("id"), str)]
    target = resume_run_id or (str(known[-1]["id"]) if known else None)
    if target is None:
        if inherited:
            why = (
                f"a new AgentSession continues the kept conversation ({inherited} earlier "
                "run(s) of a deleted object of the same name): its prompt starts a new run"
            )
            return StartPlan("send", None, why)
        return StartPlan("send", None, "the saved session has no runs")
    target = newest_resumable(target, known, has_checkpoint or (lambda _run_id: True))
    record = next((r for r in known if r["id"] == target), None)
    if record is None:
        return StartPlan("resume", target, f"run {target} is not retained; its checkpoint decides")
    status = record.get("status")
    if status == "completed":
        if keep_alive:
            return StartPlan("idle", target, f"run {target} completed; waiting for messages")
        return StartPlan("done", target, f"run {target} already completed")
    return StartPlan("resume", target, f"run {target} is {status}")


def newest_resumable(
    target: str, known: Sequence[Mapping[str, Any]], has_checkpoint: Callable[[str], bool]
) -> str:
    """The newest run in ``target``'s resume lineage that has a checkpoint: a run resumed from
    it (transitively), else ``target`` itself, else the nearest run it was resumed from
    (transitively); ``target`` when no run of the lineage has one.

    A resumed run records itself before it writes its first checkpoint. If its process dies in
    between, its origin still holds the state, including an unfinished round whose tools may
    have run; starting the task afresh instead would ask the model for that round again.
    """
    lineage = [target]
    for record in known:  # oldest first, so a descendant always follows its origin
        if record.get("resumed_from") in lineage and record["id"] not in lineage:
            lineage.append(str(record["id"]))
    for run_id in reversed(lineage):
        if has_checkpoint(run_id):
            return run_id
    origin_of = {str(r["id"]): r.get("resumed_from") for r in known}
    seen = {target}
    origin = origin_of.get(target)
    while isinstance(origin, str) and origin not in seen:
        if has_checkpoint(origin):
            return origin
        seen.add(origin)
        origin = origin_of.get(origin)
    return target
