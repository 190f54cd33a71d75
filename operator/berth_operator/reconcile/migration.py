"""Migration to a changed session image: the pure decisions (docs/upgrades.md).

A session's *current image* is ``spec.image``, else the operator's session image
(``BERTH_SESSION_IMAGE``, which the chart sets from ``sessions.image`` or the chart's own image
tag, so a ``helm upgrade`` to a new version changes it). A pod created earlier may still run
another one. With ``spec.imageUpdatePolicy: Migrate`` (the default) such a pod is passivated with
reason ``migration`` (the A3S ``PassivationRequested`` reason) through the same protocol as a
drain (:mod:`.passivation`: same safe point, same store), and the replacement pod is built with
the current image and resumes the run. ``Keep`` leaves the pod alone: it ends on its own, and
whatever pod comes next has the current image.

At most ``BERTH_MIGRATION_MAX_UNAVAILABLE`` sessions migrate at once (the ``maxUnavailable`` of a
Deployment's rolling update, applied to sessions). A session *is migrating* from the status write
that records its migration passivation until its replacement runs (:func:`in_flight`, read from
status alone, so an operator that restarts rebuilds the count from the AgentSession watch before
it decides anything); the handler (``handlers.agentsession``) also remembers the sessions it
admitted itself until their status shows they are done (:class:`MigrationSlots`), so a watch that
lags behind its own writes never lets it admit more.

Called by :mod:`.session_passivation` (the trigger) and the handler (the count). Nothing here
does I/O.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable
from dataclasses import dataclass, field
from typing import Final

from berth_operator.api.agentsession import (
    MIGRATION,
    AgentSessionSpec,
    AgentSessionStatus,
)
from berth_operator.reconcile.observe import ObservedPod
from berth_operator.reconcile.passivation import Trigger

KEEP: Final = "Keep"
"""``spec.imageUpdatePolicy`` value that opts a session out of migration."""

DONE_PHASES: Final = frozenset({"Succeeded", "Failed", "Passivated"})
"""Phases in which a session holds no migration slot (finished, or resting without a pod)."""


def desired_image(spec: AgentSessionSpec, default_image: str) -> str:
    """The image the session's next pod gets: ``spec.image``, else ``default_image`` (the
    operator's ``BERTH_SESSION_IMAGE``); the same rule as ``builders.session_pod``."""
    return spec.image or default_image


@dataclass(frozen=True, slots=True)
class MigrationCheck:
    """The migration view of one alive pod: ``trigger`` when it must migrate now; ``waiting``
    when it should but ``max_unavailable`` sessions already migrate (look again later)."""

    trigger: Trigger | None = None
    waiting: bool = False
    message: str = ""


def check(
    spec: AgentSessionSpec,
    pod: ObservedPod,
    desired: str,
    *,
    uid: str,
    migrating: Collection[str],
    max_unavailable: int,
) -> MigrationCheck:
    """Whether the alive ``pod`` must migrate to ``desired`` now.

    No when the pod's image is unknown ("" — an old cache entry) or already ``desired``, when
    the session keeps its image (``imageUpdatePolicy: Keep``) or migration is off
    (``max_unavailable`` 0). Otherwise yes when the session ``uid`` already holds a slot (it is
    in ``migrating``, the uids of the sessions migrating now) or a slot is free
    (``len(migrating) < max_unavailable``); else ``waiting``. A Pending pod counts like a running
    one: :func:`.passivation.step` deletes it at once (no run to protect)."""
    if not pod.image or pod.image == desired:
        return MigrationCheck()
    if spec.image_update_policy == KEEP or max_unavailable <= 0:
        return MigrationCheck()
    msg = f"session image changed: {pod.image} → {desired}"
    if uid not in migrating and len(migrating) >= max_unavailable:
        return MigrationCheck(
            waiting=True,
            message=f"{msg}; waiting: {len(migrating)} of {max_unavailable} sessions migrating",
        )
    return MigrationCheck(trigger=Trigger(MIGRATION, msg, pod.node_name or None), message=msg)


def in_flight(status: AgentSessionStatus) -> bool:
    """Whether the session holds a migration slot, from its status alone.

    True from the write of a passivation record with reason ``migration`` until the replacement
    runs: the record was resumed (``resumedAt``), or a pod of a later epoch than the record's is
    ``Running`` (a pod that never started a run has nothing to resume), or the run ended
    otherwise (outcome completed/failed), or the session is finished or at rest (phases
    ``DONE_PHASES``)."""
    rec = status.passivation
    if rec is None or rec.reason != MIGRATION:
        return False
    if rec.outcome in ("completed", "failed") or rec.resumed_at is not None:
        return False
    if status.phase in DONE_PHASES:
        return False
    return not ((status.epoch or 0) > rec.epoch and status.phase == "Running")


@dataclass(slots=True)
class MigrationSlots:
    """The sessions migrating now, as this operator process knows them.

    ``mine``: uids this process admitted (or saw migrating in its own decisions), kept until its
    own decision for that session says the migration is over (:meth:`note`); ``watched`` (given
    to :meth:`migrating`) is what the AgentSession watch shows (:func:`in_flight` of each
    status), which covers sessions admitted before a restart. The union is the count: each
    source may lag, neither makes it too small."""

    mine: set[str] = field(default_factory=set)

    def migrating(self, watched: Iterable[str] = ()) -> frozenset[str]:
        """The uids migrating now: the union of ``watched`` and ``mine``."""
        return frozenset(self.mine).union(watched)

    def note(self, uid: str, status: AgentSessionStatus) -> None:
        """Record the outcome of a decision for ``uid`` (``status`` as it will be written)."""
        if in_flight(status):
            self.mine.add(uid)
        else:
            self.mine.discard(uid)

    def forget(self, uid: str) -> None:
        """Drop a deleted session."""
        self.mine.discard(uid)
