"""Why a session pod must be replaced — the one place that decides it (docs/architecture.md §8).

``classify(pod, node, now, ...)`` maps the observed pod (and its node) to a ``Verdict``:

| observation                                              | verdict                          |
|----------------------------------------------------------|----------------------------------|
| pending or running, node fine                            | alive                            |
| terminated, message outcome completed                    | completed (terminal)             |
| terminated, outcome failed with a budget reason          | budget_exhausted (terminal)      |
| terminated, failed, code ToolSandboxUnavailable          | unconfinable (terminal)          |
| terminated, outcome passivated                           | replace Passivated (no failure)  |
| terminated, outcome fenced                               | replace Fenced (no failure)      |
| terminated, failed, code StoreFull / StoreUnavailable    | replace StoreFull / ... (waits)  |
| terminated, outcome failed                               | replace RunFailed                |
| terminated without a message (SIGKILL, OOM, crash)       | replace PodCrashed               |
| status.reason Evicted / DisruptionTarget (kubelet, taint)| replace PodEvicted               |
| node NotReady/Unknown past the grace, or node deleted    | replace NodeLost, force delete   |

Every replacement resumes the last run from the store on a new epoch. Passivation triggers
(cordoned node, disruption taints, eviction requests, spec.suspend) are decided in
``reconcile.passivation``; a pod that ends while its passivation is active is re-classified there
(``reclassify``) as Passivated, however it ended, so it never counts as a failure.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Literal

from berth_contract.termination import STORE_CODES, TerminationMessage
from berth_operator.api.conditions import PlacementReason, Reason
from berth_operator.reconcile.observe import ObservedNode, ObservedPod

VerdictKind = Literal["alive", "completed", "budget_exhausted", "unconfinable", "replace"]


@dataclass(frozen=True, slots=True)
class Verdict:
    """Decision about one pod of the current epoch."""

    kind: VerdictKind
    reason: str = ""
    detail: str = ""
    counts_as_failure: bool = False
    """True for deaths without passivation (they consume a retry and back off)."""
    force_delete: bool = False
    """Delete with gracePeriodSeconds=0 (the kubelet will never confirm: node lost)."""
    termination: TerminationMessage | None = None
    run_outcome: str = ""
    """Lineage outcome: completed, passivated, failed, fenced, crashed or lost."""
    store: bool = False
    """The store volume failed (termination code StoreFull/StoreUnavailable): replaced after a
    delay without consuming a retry (``reconcile.store_wait``)."""
    kubelet_reason: str = ""
    """The container's terminated reason from the kubelet when the pod crashed without a
    termination message and the reason says more than "Error" (OOMKilled, ContainerCannotRun,
    StartError): the most precise reason a user can act on, shown as Ready's reason."""


BUDGET_MARKERS = ("budget exhausted", "budgetexhausted")


def parse_termination(message: str) -> TerminationMessage | None:
    """The runtime's termination JSON, or None when absent or not ours."""
    return TerminationMessage.parse(message.strip())


def node_lost(node: ObservedNode | None, now: datetime, grace_seconds: float) -> bool:
    """A node is lost when deleted, or Ready is False/Unknown for at least ``grace_seconds``."""
    if node is None:
        return False
    if not node.exists:
        return True
    if node.ready == "True":
        return False
    if node.ready_since is None:
        return grace_seconds <= 0
    return (now - node.ready_since).total_seconds() >= grace_seconds


def classify(
    pod: ObservedPod, node: ObservedNode | None, now: datetime, *, node_grace_seconds: float
) -> Verdict:
    """Classify the current pod (see the module table)."""
    if pod.phase in ("Succeeded", "Failed") or pod.terminated is not None:
        return _finished(pod)
    if pod.node_name and node_lost(node, now, node_grace_seconds):
        state = (
            "deleted"
            if node is not None and not node.exists
            else f"Ready={node.ready if node else '?'}"
        )
        return Verdict(
            "replace",
            PlacementReason.NODE_LOST,
            f"node {pod.node_name} {state}",
            counts_as_failure=True,
            force_delete=True,
            run_outcome="lost",
        )
    if pod.reason == "Evicted":
        return Verdict(
            "replace",
            PlacementReason.EVICTED,
            pod.message or "evicted",
            counts_as_failure=True,
            run_outcome="crashed",
        )
    return Verdict("alive")


def _finished(pod: ObservedPod) -> Verdict:
    """A pod that ended: its termination message decides; without one, eviction or a crash."""
    term = pod.terminated
    msg = parse_termination(term.message) if term is not None else None
    if msg is not None:
        return _from_termination(msg)
    if pod.reason == "Evicted" or pod.disruption_reason:
        detail = pod.message or pod.disruption_reason or "evicted"
        return Verdict(
            "replace",
            PlacementReason.EVICTED,
            detail,
            counts_as_failure=True,
            run_outcome="crashed",
        )
    if term is not None:
        detail = f"exit code {term.exit_code}" + (f" ({term.reason})" if term.reason else "")
    else:
        detail = pod.message or f"pod phase {pod.phase}"
    return Verdict(
        "replace",
        PlacementReason.CRASHED,
        detail,
        counts_as_failure=True,
        run_outcome="crashed",
        kubelet_reason=term.reason if term is not None and term.reason not in _GENERIC else "",
    )


#: Terminated reasons that say no more than "it crashed" (PodCrashed says that already).
_GENERIC = frozenset({"", "Error", "Completed"})


def _from_termination(msg: TerminationMessage) -> Verdict:
    """The verdict of the runtime's own termination message (its ``outcome``)."""
    reason_text = msg.reason or ""
    if msg.outcome == "completed":
        return Verdict(
            "completed",
            Reason.RUN_COMPLETED,
            reason_text,
            termination=msg,
            run_outcome="completed",
        )
    if msg.outcome == "passivated":
        return Verdict(
            "replace",
            PlacementReason.PASSIVATED,
            reason_text,
            termination=msg,
            run_outcome="passivated",
        )
    if msg.outcome == "fenced":
        return Verdict(
            "replace", PlacementReason.FENCED, reason_text, termination=msg, run_outcome="fenced"
        )
    if msg.code == Reason.TOOL_SANDBOX_UNAVAILABLE:
        return Verdict(
            "unconfinable",
            Reason.TOOL_SANDBOX_UNAVAILABLE,
            reason_text,
            termination=msg,
            run_outcome="failed",
        )
    if msg.code in STORE_CODES:
        # Not a failure of the run: it waits (``reconcile.store_wait``) for space, then resumes.
        return Verdict(
            "replace", msg.code, reason_text, termination=msg, run_outcome="failed", store=True
        )
    if any(m in reason_text.lower() for m in BUDGET_MARKERS):
        return Verdict(
            "budget_exhausted",
            Reason.BUDGET_EXHAUSTED,
            reason_text,
            termination=msg,
            run_outcome="failed",
        )
    return Verdict(
        "replace",
        PlacementReason.RUN_FAILED,
        reason_text or "run failed",
        counts_as_failure=True,
        termination=msg,
        run_outcome="failed",
    )
