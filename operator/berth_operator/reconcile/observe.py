"""Observations of Pods and Nodes, parsed from API bodies (plain dicts) into frozen dataclasses.

Only the fields the decisions need are kept, so the pod index stays small (500+ sessions).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any

from berth_operator.api.constants import (
    ANNOTATION_REPLACED_REASON,
    ANNOTATION_RESUME_RUN_ID,
    LABEL_EPOCH,
    SESSION_CONTAINER,
)
from berth_operator.api.sessionwarmpool import ANNOTATION_ADOPTED_FROM


def parse_time(value: Any) -> datetime | None:
    """RFC 3339 timestamp (``2026-01-01T00:00:00Z``) → aware datetime; None when absent/bad."""
    if not isinstance(value, str) or not value:
        return None
    try:
        return datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None


@dataclass(frozen=True, slots=True)
class Terminated:
    """state.terminated of the session container."""

    exit_code: int
    reason: str = ""
    message: str = ""
    finished_at: datetime | None = None


@dataclass(frozen=True, slots=True)
class ObservedPod:
    """What the operator knows about one session pod."""

    name: str
    uid: str
    epoch: int
    phase: str = "Pending"
    node_name: str = ""
    pod_ip: str = ""
    deleting: bool = False
    ready: bool = False
    scheduled: bool = False
    unschedulable_message: str = ""
    started_at: datetime | None = None
    created_at: datetime | None = None
    reason: str = ""
    message: str = ""
    disruption_reason: str = ""
    terminated: Terminated | None = None
    resume_run_id: str = ""
    placement_reason: str = ""
    waiting_reason: str = ""
    """``state.waiting.reason`` of the session container (ImagePullBackOff, ErrImagePull,
    CreateContainerConfigError, CrashLoopBackOff, ...), "" when it is not waiting."""
    waiting_message: str = ""
    """The kubelet's message for ``waiting_reason``."""
    image: str = ""
    """``spec.containers[].image`` of the session container ("" when absent): the image the pod
    was created with (or adopted as, from a warm pool of the same template)."""
    adopted: bool = False
    """The pod was a warm pool's and was adopted (it carries ``ANNOTATION_ADOPTED_FROM``): it
    was Ready before its run started, so no pod event tells when the run is up."""

    @property
    def ended(self) -> bool:
        """The session container has terminated. Session pods are ``restartPolicy: Never``,
        so it never runs again: the pod can do nothing more, whether or not its object is
        still there (a deleted pod's object goes only once its kubelet has confirmed)."""
        return self.terminated is not None


REPORTED_BY_SESSION = "ReportedBySession"
"""``Terminated.reason`` of an end the session process reported itself (``GET /v1/outcome``)."""


def ended_as_reported(pod: ObservedPod, message: str, now: datetime) -> ObservedPod:
    """``pod`` as ended at ``now`` (when the report came) with termination ``message`` (the
    JSON text the session process gave over ``GET /v1/outcome``: the one it writes to its
    termination log) when the kubelet has not reported the container's end yet; ``pod``
    unchanged when it has. The process answers only once it is done with the session (its
    store closed), so the pod is treated as the kubelet will show it moments later: exit code
    0 is assumed for the detail only, the message decides."""
    if pod.terminated is not None:
        return pod
    return replace(
        pod,
        terminated=Terminated(
            exit_code=0, reason=REPORTED_BY_SESSION, message=message, finished_at=now
        ),
    )


def _conditions(status: Mapping[str, Any]) -> dict[str, Mapping[str, Any]]:
    return {c.get("type", ""): c for c in status.get("conditions") or [] if isinstance(c, dict)}


def _session_container_state(
    status: Mapping[str, Any],
) -> tuple[Mapping[str, Any], Terminated | None]:
    """The session container's ``state.waiting`` ({} when not waiting) and its termination
    (None while it has not ended), from the pod's ``status.containerStatuses``."""
    for cs in status.get("containerStatuses") or []:
        if cs.get("name") != SESSION_CONTAINER:
            continue
        state = cs.get("state") or {}
        term = state.get("terminated")
        terminated = None
        if term:
            terminated = Terminated(
                exit_code=int(term.get("exitCode", 0)),
                reason=term.get("reason") or "",
                message=term.get("message") or "",
                finished_at=parse_time(term.get("finishedAt")),
            )
        return state.get("waiting") or {}, terminated
    return {}, None


def observe_pod(body: Mapping[str, Any]) -> ObservedPod:
    """Parse a Pod body. The epoch comes from the berth.dev/epoch label (0 when missing)."""
    meta = body.get("metadata") or {}
    spec = body.get("spec") or {}
    status = body.get("status") or {}
    labels = meta.get("labels") or {}
    annotations = meta.get("annotations") or {}
    try:
        epoch = int(labels.get(LABEL_EPOCH, "0"))
    except ValueError:
        epoch = 0
    conds = _conditions(status)
    sched = conds.get("PodScheduled", {})
    waiting, terminated = _session_container_state(status)
    image = next(
        (
            str(c.get("image") or "")
            for c in spec.get("containers") or []
            if isinstance(c, dict) and c.get("name") == SESSION_CONTAINER
        ),
        "",
    )
    return ObservedPod(
        name=meta.get("name", ""),
        uid=meta.get("uid", ""),
        epoch=epoch,
        phase=status.get("phase") or "Pending",
        node_name=spec.get("nodeName") or "",
        pod_ip=status.get("podIP") or "",
        deleting=bool(meta.get("deletionTimestamp")),
        ready=conds.get("Ready", {}).get("status") == "True",
        scheduled=sched.get("status") == "True",
        unschedulable_message=(
            sched.get("message", "") if sched.get("reason") == "Unschedulable" else ""
        ),
        started_at=parse_time(status.get("startTime")),
        created_at=parse_time(meta.get("creationTimestamp")),
        reason=status.get("reason") or "",
        message=status.get("message") or "",
        disruption_reason=(
            conds.get("DisruptionTarget", {}).get("reason", "")
            if conds.get("DisruptionTarget", {}).get("status") == "True"
            else ""
        ),
        terminated=terminated,
        resume_run_id=annotations.get(ANNOTATION_RESUME_RUN_ID, ""),
        placement_reason=annotations.get(ANNOTATION_REPLACED_REASON, ""),
        waiting_reason=str(waiting.get("reason") or ""),
        waiting_message=str(waiting.get("message") or ""),
        image=image,
        adopted=ANNOTATION_ADOPTED_FROM in annotations,
    )


@dataclass(frozen=True, slots=True)
class ObservedNode:
    """What the operator knows about a node that runs (or ran) a session pod."""

    name: str
    exists: bool = True
    ready: str = "Unknown"
    """Status of the Ready condition: True, False or Unknown."""
    ready_since: datetime | None = None
    unschedulable: bool = False
    taints: tuple[tuple[str, str], ...] = field(default_factory=tuple)
    """(key, effect) pairs."""


def observe_node(body: Mapping[str, Any] | None, name: str) -> ObservedNode:
    """Parse a Node body; ``None`` (404) gives ``exists=False``."""
    if body is None:
        return ObservedNode(name=name, exists=False, ready="Unknown")
    status = body.get("status") or {}
    spec = body.get("spec") or {}
    ready = _conditions(status).get("Ready", {})
    return ObservedNode(
        name=name,
        exists=True,
        ready=ready.get("status", "Unknown"),
        ready_since=parse_time(ready.get("lastTransitionTime")),
        unschedulable=bool(spec.get("unschedulable")),
        taints=tuple((t.get("key", ""), t.get("effect", "")) for t in spec.get("taints") or []),
    )
