"""The run records of an AgentSession decision and what a pass takes from its pod's reports.

Called by :func:`berth_operator.reconcile.session.decide`. A pod reports its run in its
termination message when it ends (:func:`absorb_termination`) and in its runtime's ``GET
/v1/state`` while it runs (:func:`absorb_state`): both add the run they name to the lineage
(``status.runs``, the last ``MAX_RUNS_IN_STATUS``) and carry the run id, usage and checkpoint
into the status. A run that ends is closed in the lineage (:func:`end_run`); a completed run's
text goes to ``status.result`` cut to ``MAX_RESULT_TEXT`` (:func:`truncate`). Pure.
"""

from __future__ import annotations

from datetime import UTC, datetime

from berth_contract.state import RuntimeState
from berth_contract.termination import TerminationMessage
from berth_contract.termination import Usage as UsageView
from berth_operator.api.agentsession import AgentSessionStatus, Checkpoint, RunRecord, Usage
from berth_operator.api.constants import MAX_RESULT_TEXT, MAX_RUNS_IN_STATUS
from berth_operator.reconcile.observe import ObservedPod


def truncate(text: str, limit: int = MAX_RESULT_TEXT) -> tuple[str, bool]:
    """``(text, truncated)``: ``text`` cut to ``limit`` characters, its last one an ellipsis,
    and whether it was cut. ``status.result.text`` is bounded (``MAX_RESULT_TEXT``) because the
    whole status is one Kubernetes object, whose size the apiserver and etcd limit."""
    if len(text) <= limit:
        return text, False
    return text[: limit - 1] + "…", True


def _usage(old: Usage | None, new: UsageView | None) -> Usage | None:
    """Cumulative usage never goes backwards (a resumed run carries usage forward)."""
    if new is None:
        return old
    if old is not None and new.total_tokens < old.total_tokens:
        return old
    return Usage(
        prompt_tokens=new.prompt_tokens,
        completion_tokens=new.completion_tokens,
        total_tokens=new.total_tokens,
    )


def _record_run(
    runs: list[RunRecord],
    run_id: str,
    pod: ObservedPod,
    now: datetime,
    resumed_from: str | None,
) -> list[RunRecord]:
    """Append a lineage entry for ``run_id`` if it is new (bounded to the last 20)."""
    if any(r.run_id == run_id for r in runs):
        return runs
    origin = resumed_from or pod.resume_run_id or None
    if origin == run_id:
        origin = None
    entry = RunRecord(
        run_id=run_id,
        resumed_from=origin,
        pod_name=pod.name,
        node_name=pod.node_name or None,
        epoch=pod.epoch,
        started_at=now,
    )
    return [*runs, entry][-MAX_RUNS_IN_STATUS:]


def end_run(
    runs: list[RunRecord],
    pod: ObservedPod,
    run_id: str | None,
    outcome: str,
    reason: str,
    now: datetime,
) -> list[RunRecord]:
    """Close the lineage entry of ``run_id`` (or the open entries of ``pod``).

    Returns a new list for ``status.runs``: the matching entries still ``running`` get
    ``ended_at`` = ``now``, ``outcome`` (``completed``, ``failed``, ``lost``, ...) and ``reason``
    (cut to 1024 characters, like a condition message); entries already closed are kept as
    they are, so a pass that sees the same end again changes nothing."""
    out: list[RunRecord] = []
    for r in runs:
        match = (run_id is not None and r.run_id == run_id) or (
            run_id is None and r.pod_name == pod.name
        )
        if match and r.outcome == "running":
            r = r.model_copy(
                update={"ended_at": now, "outcome": outcome, "reason": reason[:1024] or None}
            )
        out.append(r)
    return out


def absorb_termination(
    st: AgentSessionStatus, pod: ObservedPod, msg: TerminationMessage | None, now: datetime
) -> None:
    """Take into ``st`` what a pod's termination message says (the runtime's
    ``BERTH_TERMINATION_LOG``, read by the kubelet as the container's
    ``terminationMessagePath``; docs/architecture.md §5): the run it names is added to
    ``status.runs`` (with ``resumedFrom``) and becomes ``status.runId``, its cumulative usage
    is taken unless lower than the stored one (a resumed run carries usage forward, as the A3S
    ``resume_run`` does), and its completed rounds (``turn``) go to ``status.checkpoint``.
    ``msg`` None (no message, or one that did not parse): nothing changes."""
    if msg is None:
        return
    if msg.run_id:
        st.runs = _record_run(list(st.runs or []), msg.run_id, pod, now, msg.resumed_from)
        st.run_id = msg.run_id
    st.usage = _usage(st.usage, msg.usage)
    if msg.turn is not None and msg.run_id:
        cp = st.checkpoint or Checkpoint()
        st.checkpoint = cp.model_copy(update={"run_id": msg.run_id, "turn": msg.turn})


def absorb_state(
    st: AgentSessionStatus, pod: ObservedPod, state: RuntimeState, now: datetime
) -> None:
    """Take into ``st`` what the runtime's ``GET /v1/state`` says (docs/architecture.md §5): the
    run it names (added to ``status.runs``, with ``resumedFrom``; ``status.runId``), the
    cumulative usage (never lower than the stored one), the last checkpoint (run, completed
    rounds and tool calls, from ``checkpoint`` or else the top-level fields; committed at
    ``checkpointMs``, else the stored time; the stored checkpoint stays when the state names
    neither run nor round) and the last error (cut to 4096 characters)."""
    if state.run_id:
        st.runs = _record_run(list(st.runs or []), state.run_id, pod, now, state.resumed_from)
        st.run_id = state.run_id
    st.usage = _usage(st.usage, state.usage)
    cp_view = state.checkpoint
    run_id = (cp_view.run_id if cp_view else None) or state.run_id
    turn = cp_view.turn if cp_view and cp_view.turn is not None else state.turn
    calls = (
        cp_view.tool_calls_count
        if cp_view and cp_view.tool_calls_count is not None
        else state.tool_calls_count
    )
    at = (
        datetime.fromtimestamp(cp_view.checkpoint_ms / 1000, UTC)
        if cp_view and cp_view.checkpoint_ms
        else (st.checkpoint.at if st.checkpoint else None)
    )
    if run_id is not None or turn is not None:
        st.checkpoint = Checkpoint(run_id=run_id, turn=turn, tool_calls_count=calls, at=at)
    if state.last_error:
        st.last_error = state.last_error[:4096]
