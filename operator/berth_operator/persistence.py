"""What kopf stores on the objects the operator watches (its "persistence" settings).

kopf keeps a diff-base — the last handled spec, as the ``berth.dev/last-handled-configuration``
annotation — to tell creations from updates for ``on.create`` / ``on.update`` handlers. It
writes it on the first sight of every object whose kind has any resource-changing handler,
``on.delete`` included: one PATCH per AgentSession that nothing ever reads, since AgentSessions
are reconciled by workers that compare spec and status themselves (``observedGeneration``), and
their only changing handler is ``on.delete``, which kopf runs on the deletion timestamp whatever
the diff-base says. :class:`SelectiveDiffBaseStorage` leaves the diff-base out for such kinds;
LaneWorkers keep theirs (their ``on.create`` / ``on.update(field="spec")`` handlers need it).

kopf also *builds* the essence (a deep copy of the whole object, ``managedFields`` and status
included) at every watch event of every kind it watches, whether or not a handler compares it:
for the pods and nodes the operator only indexes and watches, that copy was about a tenth of
the operator's CPU in a burst of 1,000 sessions. :data:`WITHOUT_DIFFBASE` lists every watched
kind that has no ``on.create`` / ``on.update`` / ``on.resume`` handler.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable
from typing import Any, cast

import kopf

from berth_operator.api.constants import GROUP

WITHOUT_DIFFBASE: frozenset[tuple[str, str]] = frozenset(
    {
        (GROUP, "AgentSession"),  # reconciled by workers; on.delete only
        (GROUP, "SessionWarmPool"),  # a daemon and a watch
        (GROUP, "BudgetPolicy"),  # a daemon and a watch
        ("", "Pod"),  # indexed and watched
        ("", "Node"),  # indexed and watched
    }
)
"""``(group, kind)`` of the watched kinds that need no diff-base (module docstring); the core
group is ``""``."""


class SelectiveDiffBaseStorage(kopf.AnnotationsDiffBaseStorage):
    """kopf's annotation diff-base storage, except for the ``(group, kind)`` pairs of
    ``without``: for those nothing is stored and nothing is read (kopf then sees each event as
    a creation, which matters only to ``on.create`` handlers — such kinds must have none)."""

    def __init__(self, *, without: Collection[tuple[str, str]], prefix: str, key: str) -> None:
        super().__init__(prefix=prefix, key=key)
        self.without = frozenset(without)

    def _skipped(self, body: kopf.Body) -> bool:
        group = str(body.get("apiVersion") or "").rpartition("/")[0]
        return (group, str(body.get("kind") or "")) in self.without

    def build(
        self, *, body: kopf.Body, extra_fields: Iterable[Any] | None = None
    ) -> kopf.BodyEssence:
        """The essence kopf compares with the stored diff-base: empty for a kind without one.

        Nothing compares it for such kinds (no diff-base is read), and kopf's own build
        deep-copies the whole object, ``managedFields`` and status included, at every event."""
        if self._skipped(body):
            return cast(kopf.BodyEssence, {})
        return super().build(body=body, extra_fields=extra_fields)

    def fetch(self, *, body: kopf.Body) -> kopf.BodyEssence | None:
        """The stored diff-base, None for a kind without one (see the class docstring)."""
        return None if self._skipped(body) else super().fetch(body=body)

    def store(self, *, body: kopf.Body, patch: kopf.Patch, essence: kopf.BodyEssence) -> None:
        """Add the diff-base to ``patch``, unless ``body``'s kind has none."""
        if not self._skipped(body):
            super().store(body=body, patch=patch, essence=essence)
