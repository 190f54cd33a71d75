"""The newest AgentSession a session's reconcile knows, without a GET per pass.

The AgentSession watch stores each session's object, replaced on every event
(``handlers.session_workers``): the live view. That view lags
behind the operator's own writes: right after a status PUT it may still show the object as it was
before, and a decision made on it would undo the write (an epoch bumped by the last iteration
would look unbumped). The operator is the only writer of ``status`` (docs/architecture.md §2), so
the status tells the two apart: while the live view's status differs from the status the operator
last wrote (or read with a GET), the live view is older and :class:`SessionBody` answers with the
object the apiserver returned; once the statuses agree, the live view has caught up (and may carry
newer spec or metadata) and is used. resourceVersions are never compared for order (Kubernetes
API conventions: they are opaque).

What is read here can still be stale by the watch's lag, as in any informer cache. The status write
carries resourceVersion, so a decision made on a stale object fails with Conflict, and then — or
when the live view has not caught up within ``settle_seconds`` (someone else wrote the status) —
the caller must GET the object (:meth:`SessionBody.current` returns None) and pass the answer to
:meth:`SessionBody.seen_fresh`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

SETTLE_SECONDS = 5.0
"""How long the object of the last write or GET may stand in for a live view that disagrees."""


class SessionBody:
    """One session's newest known AgentSession (one per session; not shared)."""

    def __init__(self, settle_seconds: float = SETTLE_SECONDS) -> None:
        self.settle_seconds = settle_seconds
        self._known: dict[str, Any] | None = None
        self._known_at = 0.0
        self._fresh = False
        """The next iteration must GET (a write lost a race, or the live view did not settle).
        The first iteration uses the live view as is: kopf just delivered it."""

    def current(self, live: Mapping[str, Any], now: float) -> dict[str, Any] | None:
        """The newest object, or None when the caller must GET it. A top-level copy: the caller
        may set its keys (``status``) but must not mutate nested values, which are shared.

        ``live`` is the watch's view, ``now`` a monotonic time in seconds."""
        if self._fresh:
            return None
        self.seen(live)
        known = self._known
        if known is None:
            return dict(live)
        if now - self._known_at > self.settle_seconds:  # someone else wrote the status
            self._fresh = True
            self._known = None
            return None
        return dict(known)

    def seen(self, live: Mapping[str, Any]) -> None:
        """The watch shows ``live``: once its status is the one last written or read, the
        object kept from that write or read is dropped (the live view has caught up), so a
        session at rest holds one object, not two."""
        known = self._known
        if known is not None and (live.get("status") or {}) == (known.get("status") or {}):
            self._known = None

    def seen_fresh(self, body: dict[str, Any], now: float) -> None:
        """Record the object a GET returned (``now``: monotonic seconds)."""
        self._fresh = False
        self._known, self._known_at = dict(body), now

    def written(self, stored: dict[str, Any], now: float) -> None:
        """Record the object a successful status write returned."""
        self._fresh = False
        self._known, self._known_at = dict(stored), now

    def conflicted(self) -> None:
        """A write lost a race (or the object could not be used): GET next time."""
        self._known = None
        self._fresh = True
