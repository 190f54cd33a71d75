"""The pending removal of one session's store and workspace, kept as a suspended Job.

Pure. When a session with a ``Delete`` policy (:mod:`.policy`) finishes or is deleted, the
operator creates its store-cleanup Job (``builders.cleanup_job``: the same fixed paths, built from
the object's namespace and name only, as every other removal) *suspended*, labelled
``berth.dev/retention: "true"`` and annotated with the time it may run
(:data:`ANNOTATION_REMOVE_AFTER`). The Job is the ledger: it lives in the apiserver, so an
operator restart or a new leader loses nothing, a user sees it (``kubectl get jobs -l
berth.dev/retention``) and can cancel the removal by deleting it. A suspended Job runs no pod.

At each sweep :func:`decide` says what to do with one such Job:

==========================================================  ===============================
the Job / the session of that name                          action
==========================================================  ===============================
suspended, not yet due                                      ``wait``
suspended, due, an object of that name with *another* uid   ``cancel``: delete the Job, keep
(re-created: it continues the kept conversation)            the store (incarnation rules)
suspended, due, the same object, not finished any more      ``cancel``
suspended, due, the same object finished, or no object,     ``remove``: resume the Job
no pod of the uid left
suspended, due, pods of the uid still there                 ``wait`` (they may still write)
resumed and finished, the object gone                       ``forget``: delete the Job
otherwise                                                   ``wait``
==========================================================  ===============================

A resumed Job keeps no TTL: while its finished session object exists the Job is the record
that the removal happened (so it is not planned again); once the object is gone it is deleted.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Final, Literal

from berth_operator.api.common import SessionRef
from berth_operator.api.constants import LABEL_SESSION, LABEL_SESSION_UID
from berth_operator.errors import SpecError
from berth_operator.retention.policy import RetentionPolicy

LABEL_RETENTION: Final = "berth.dev/retention"
"""Label of the store-cleanup Jobs this module plans (value ``"true"``)."""
ANNOTATION_REMOVE_AFTER: Final = "berth.dev/remove-after"
"""When the Job may run (RFC 3339, UTC)."""
ANNOTATION_POLICY: Final = "berth.dev/retention-policy"
"""The policy that planned it (:meth:`RetentionPolicy.describe`), for a reader."""
ANNOTATION_WHY: Final = "berth.dev/retention-why"
"""``finished`` or ``deleted``: what started the period."""

TERMINAL_PHASES: Final = frozenset({"Succeeded", "Failed"})

_NAMESPACE = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")
_NAME = re.compile(r"^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?$")

Action = Literal["wait", "remove", "cancel", "forget"]


def checked_ref(ref: SessionRef) -> SessionRef:
    """``ref`` if its namespace is a DNS-1123 label and its name a DNS-1123 subdomain without
    ``..`` (what the apiserver admits), so no removal path can leave
    ``store/<ns>/<name>`` or ``workspaces/<ns>/<name>``; else SpecError."""
    if not _NAMESPACE.match(ref.namespace) or not _NAME.match(ref.name) or ".." in ref.name:
        raise SpecError(f"refusing a removal for {ref.namespace!r}/{ref.name!r}: not a valid name")
    if not ref.uid:
        raise SpecError(f"refusing a removal for {ref.key}: no uid")
    return ref


def plan_job(
    cleanup_job: dict[str, Any], policy: RetentionPolicy, why: str, since: datetime
) -> dict[str, Any]:
    """The suspended retention Job: ``cleanup_job`` (``build_store_cleanup_job`` of the
    session) with the retention label and annotations, due ``policy.after_seconds`` after
    ``since`` (the session's end or deletion), and no TTL (module docstring)."""
    due = since + timedelta(seconds=policy.after_seconds)
    job = {**cleanup_job, "metadata": dict(cleanup_job["metadata"])}
    meta = job["metadata"]
    meta["labels"] = {**meta.get("labels", {}), LABEL_RETENTION: "true"}
    meta["annotations"] = {
        ANNOTATION_REMOVE_AFTER: due.strftime("%Y-%m-%dT%H:%M:%SZ"),
        ANNOTATION_POLICY: policy.describe(),
        ANNOTATION_WHY: why,
    }
    spec = {k: v for k, v in job["spec"].items() if k != "ttlSecondsAfterFinished"}
    job["spec"] = {**spec, "suspend": True}
    return job


@dataclass(frozen=True, slots=True)
class Decision:
    """What to do with one retention Job, and why (for the Event and the log)."""

    action: Action
    why: str


def due_at(job: Mapping[str, Any]) -> datetime | None:
    """The Job's :data:`ANNOTATION_REMOVE_AFTER`, or None when missing or unreadable."""
    text = ((job.get("metadata") or {}).get("annotations") or {}).get(ANNOTATION_REMOVE_AFTER)
    try:
        return datetime.fromisoformat(str(text).replace("Z", "+00:00"))
    except ValueError:
        return None


def decide(
    job: Mapping[str, Any],
    session: tuple[str, str] | None,
    pods_left: bool,
    now: datetime,
) -> Decision:
    """The action for retention Job ``job`` (module docstring's table). ``session``: (uid,
    phase) of the AgentSession of the Job's session name in its namespace, None when there is
    none; ``pods_left``: pods of the Job's session uid still exist."""
    labels = (job.get("metadata") or {}).get("labels") or {}
    uid = labels.get(LABEL_SESSION_UID, "")
    name = labels.get(LABEL_SESSION, "")
    spec = job.get("spec") or {}
    if not spec.get("suspend"):
        finished = bool((job.get("status") or {}).get("succeeded"))
        if finished and (session is None or session[0] != uid):
            return Decision("forget", f"the store of {name} was removed; its session is gone")
        return Decision("wait", "removal running or recorded")
    due = due_at(job)
    if due is None or now < due:
        return Decision("wait", f"due at {due}")
    if session is not None and session[0] != uid:
        return Decision(
            "cancel", f"{name} was re-created (uid {session[0]}): its store is kept for it"
        )
    if session is not None and session[1] not in TERMINAL_PHASES:
        return Decision("cancel", f"{name} is {session[1]} again: its store is kept")
    if pods_left:
        return Decision("wait", f"pods of {name} (uid {uid}) are still there")
    return Decision("remove", f"retention period of {name} (uid {uid}) is over")
