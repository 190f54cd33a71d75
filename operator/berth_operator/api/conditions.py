"""Condition types and reasons of AgentSession, and the pure helper that sets one.

Follows the Kubernetes API conventions for conditions (metav1.Condition): ``Ready`` is the
summary; ``lastTransitionTime`` moves only when ``status`` changes; reasons are CamelCase
constants documented here; the whole list is written at once.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Final

from berth_contract.termination import STORE_FULL, STORE_UNAVAILABLE
from berth_operator.api.common import Condition, ConditionStatus


class CondType:
    """AgentSession condition types."""

    READY: Final = "Ready"
    """Summary: True while the session runs healthily or has succeeded."""
    PLACED: Final = "Placed"
    STORE_READY: Final = "StoreReady"
    """The shared claim of the session's store is bound (reasons in ``builders.claim``)."""
    """A pod of the current epoch exists and is bound to a node."""
    RUNNING: Final = "Running"
    """The runtime of the current pod answers /readyz (and the run is in progress)."""
    PASSIVATED: Final = "Passivated"
    """The session is passivated (False with reason Passivating while it passivates)."""
    COMPLETED: Final = "Completed"
    """The task finished (outcome completed)."""
    BUDGET_EXHAUSTED: Final = "BudgetExhausted"
    """The budget guard denied further work."""
    DEGRADED: Final = "Degraded"
    """The last pod died without passivating and the session is being recovered."""
    FAILED: Final = "Failed"
    """Terminal failure: the run failed or replacements were exhausted."""

    ALL: Final = (
        READY,
        PLACED,
        STORE_READY,
        RUNNING,
        PASSIVATED,
        COMPLETED,
        BUDGET_EXHAUSTED,
        DEGRADED,
        FAILED,
    )


class Reason:
    """CamelCase reasons used in AgentSession conditions and Events."""

    # Placed
    POD_CREATED: Final = "PodCreated"
    """The pod of the current epoch was created and waits for scheduling."""
    POD_SCHEDULED: Final = "PodScheduled"
    """The pod is bound to a node."""
    WAITING_FOR_POD: Final = "WaitingForPod"
    """No pod yet (first placement pending or previous pod being removed)."""
    BACKOFF: Final = "BackOff"
    """Waiting for the exponential backoff before the next replacement."""
    LANE_WORKER_NOT_FOUND: Final = "LaneWorkerNotFound"
    """A lane references a LaneWorker that does not exist."""
    SECRET_NOT_ALLOWED: Final = "SecretNotAllowed"
    """spec.llm.apiKeySecretRef names a Secret without berth.dev/llm-credentials: "true"."""
    SECRET_NOT_FOUND: Final = "SecretNotFound"
    """spec.llm.apiKeySecretRef names a Secret or key that does not exist."""
    BASE_URL_NOT_ALLOWED: Final = "BaseURLNotAllowed"
    """spec.llm.baseURL is outside the operator's BERTH_LLM_ALLOWED_BASE_URLS."""
    UNSCHEDULABLE: Final = "Unschedulable"
    """The scheduler cannot place the pod (its message says why: resources, selectors, taints)."""
    CLAIM_MISSING: Final = "ClaimMissing"
    """The session's shared claim does not exist and claims are the user's to create."""
    VOLUME_SETTING_UP: Final = "VolumeSettingUp"
    """The shared claim's one-shot set-up Job (root made writable by the pods' user) runs."""
    VOLUME_SETUP_FAILED: Final = "VolumeSetupFailed"
    """The shared claim's set-up Job failed: its pod's log says why; see docs/install.md."""
    POD_CREATE_FAILED: Final = "PodCreateFailed"
    """The pod of the current epoch, or an object it needs, could not be created (RBAC, a
    ResourceQuota, an admission webhook); the same epoch is tried again with backoff."""
    # Running
    RUNTIME_READY: Final = "RuntimeReady"
    STARTING: Final = "Starting"
    STUCK_WAITING: Final = (
        "ImagePullBackOff",
        "ErrImagePull",
        "ErrImageNeverPull",
        "InvalidImageName",
        "CreateContainerConfigError",
        "CreateContainerError",
        "RunContainerError",
        "CrashLoopBackOff",
    )
    """Container waiting reasons of the kubelet that need a user's fix (a bad image or pull
    secret, a missing Secret or key, a container that cannot start). They become the reason of
    the Running and Ready conditions, with the kubelet's message, and a Warning Event."""
    NOT_RUNNING: Final = "NotRunning"
    # Completed / phase-like summaries
    RUN_COMPLETED: Final = "RunCompleted"
    IN_PROGRESS: Final = "InProgress"
    SUCCEEDED: Final = "Succeeded"
    PENDING: Final = "Pending"
    RESUMING: Final = "Resuming"
    RUNNING: Final = "Running"
    # Passivated
    NOT_PASSIVATED: Final = "NotPassivated"
    PASSIVATING: Final = "Passivating"
    PASSIVATED: Final = "Passivated"
    PASSIVATION_DEADLINE_EXCEEDED: Final = "PassivationDeadlineExceeded"
    """The pod did not passivate by the deadline and was deleted (resume from the last round)."""
    RESUMED: Final = "Resumed"
    """The run of a passivated session continues on a replacement pod."""
    AT_REST: Final = "AtRest"
    """An idle keepAlive session was passivated (idle_reaper) and has no pod until woken."""
    MIGRATION_REQUESTED: Final = "MigrationRequested"
    """Event: the pod runs an old image; it is passivated and resumed on the current one."""
    # BudgetExhausted
    WITHIN_BUDGET: Final = "WithinBudget"
    BUDGET_EXHAUSTED: Final = "BudgetExhausted"
    # Degraded (why the last pod was replaced; see reconcile.replacement)
    AS_EXPECTED: Final = "AsExpected"
    POD_CRASHED: Final = "PodCrashed"
    NODE_LOST: Final = "NodeLost"
    POD_EVICTED: Final = "PodEvicted"
    POD_DELETED: Final = "PodDeleted"
    RUN_FAILED: Final = "RunFailed"
    STORE_FULL: Final = STORE_FULL
    """The run's progress (or its end) could not be saved: the store volume is full. The
    session is placed again after a delay and resumes from its last saved round."""
    STORE_UNAVAILABLE: Final = STORE_UNAVAILABLE
    """As ``StoreFull`` for any other failure of the store volume (I/O error, read-only, stale
    mount, a filesystem lacking a property the store needs)."""
    # Failed (and Ready): the node cannot confine tool processes (no Landlock) under Required
    TOOL_SANDBOX_UNAVAILABLE: Final = "ToolSandboxUnavailable"
    # Failed
    RETRIES_EXHAUSTED: Final = "RetriesExhausted"
    NOT_FAILED: Final = "NotFailed"


def set_condition(
    conditions: list[Condition],
    type_: str,
    status: ConditionStatus,
    reason: str,
    message: str,
    *,
    now: datetime,
    generation: int | None,
) -> list[Condition]:
    """Return ``conditions`` with ``type_`` set; ``lastTransitionTime`` kept unless status changed.

    Pure: the input list is not modified. Order: existing order, new types appended.
    """
    out: list[Condition] = []
    found = False
    for cond in conditions:
        if cond.type != type_:
            out.append(cond)
            continue
        found = True
        ltt = cond.last_transition_time if cond.status == status else now
        out.append(
            Condition(
                type=type_,
                status=status,
                reason=reason,
                message=message,
                last_transition_time=ltt,
                observed_generation=generation,
            )
        )
    if not found:
        out.append(
            Condition(
                type=type_,
                status=status,
                reason=reason,
                message=message,
                last_transition_time=now,
                observed_generation=generation,
            )
        )
    return out


def get_condition(conditions: list[Condition] | None, type_: str) -> Condition | None:
    """The condition of ``type_`` or None."""
    for cond in conditions or []:
        if cond.type == type_:
            return cond
    return None


class PlacementReason:
    """Why a pod was placed (pod annotation berth.dev/placement-reason, metric label)."""

    INITIAL: Final = "Initial"
    CRASHED: Final = Reason.POD_CRASHED
    NODE_LOST: Final = Reason.NODE_LOST
    EVICTED: Final = Reason.POD_EVICTED
    DELETED: Final = Reason.POD_DELETED
    RUN_FAILED: Final = Reason.RUN_FAILED
    PASSIVATED: Final = "Passivated"
    FENCED: Final = "Fenced"
    INTERRUPTED: Final = "PlacementInterrupted"
    STORE_FULL: Final = Reason.STORE_FULL
    STORE_UNAVAILABLE: Final = Reason.STORE_UNAVAILABLE

    ALL: Final = (
        INITIAL,
        CRASHED,
        NODE_LOST,
        EVICTED,
        DELETED,
        RUN_FAILED,
        PASSIVATED,
        FENCED,
        INTERRUPTED,
        STORE_FULL,
        STORE_UNAVAILABLE,
    )


class ConditionSet:
    """Accumulates condition updates of one decision (:func:`set_condition` semantics:
    ``lastTransitionTime`` moves only when a status changes; ``observedGeneration`` set)."""

    def __init__(
        self, existing: Sequence[Condition] | None, now: datetime, generation: int | None
    ) -> None:
        self.items = list(existing or [])
        self.now = now
        self.generation = generation

    def set(self, type_: str, status: ConditionStatus, reason: str, message: str = "") -> None:
        """Set condition ``type_`` (:func:`set_condition`), replacing an earlier one of the type."""
        self.items = set_condition(
            self.items, type_, status, reason, message, now=self.now, generation=self.generation
        )

    def get(self, type_: str) -> Condition | None:
        """The condition of ``type_`` as accumulated so far, or None."""
        return get_condition(self.items, type_)

    def is_true(self, type_: str) -> bool:
        """Whether condition ``type_`` is present with status ``"True"`` (absent is False)."""
        cond = self.get(type_)
        return cond is not None and cond.status == "True"

    def ensure(self, type_: str, status: ConditionStatus, reason: str) -> None:
        """Set only when absent (keeps the message of an earlier decision)."""
        if self.get(type_) is None:
            self.set(type_, status, reason)
