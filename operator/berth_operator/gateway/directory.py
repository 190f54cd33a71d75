"""The front door's view of AgentSessions: :class:`SessionView` by uid and by name.

Filled from a LIST of AgentSessions before the front door opens (:meth:`GatewayDirectory.fill`,
so a new leader never answers 404 for a session its watch has not shown yet), then kept current
by ``handlers.gateway`` from the operator's AgentSession watch (:func:`view_of` turns a watched
object into a view); read by the service and the delivery loops. In-memory, single-threaded
(the operator's event loop).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pydantic import ValidationError

from berth_operator.api.agentsession import AgentSessionStatus, PeersSpec
from berth_operator.api.constants import ANNOTATION_WAKE_REQUESTED_AT
from berth_operator.gateway.routing import SessionView
from berth_operator.reconcile.idle import parse_wake


def view_of(
    uid: str,
    namespace: str,
    name: str,
    meta: Mapping[str, Any],
    spec: Mapping[str, Any],
    status: Mapping[str, Any],
) -> SessionView:
    """The view of one watched AgentSession (raw metadata, spec and status). A spec.peers the
    CRD would have refused is treated as absent (no peer may be called)."""
    try:
        st = AgentSessionStatus.model_validate(dict(status))
    except ValidationError:
        st = AgentSessionStatus()
    peers = None
    if spec.get("peers"):
        try:
            peers = PeersSpec.model_validate(spec["peers"])
        except ValidationError:
            peers = None
    identity = spec.get("identity") or {}
    annotations = meta.get("annotations") or {}
    return SessionView(
        uid=uid,
        namespace=namespace,
        name=name,
        labels=dict(meta.get("labels") or {}),
        keep_alive=bool(spec.get("keepAlive")),
        phase=st.phase,
        pod_ip=st.pod_ip,
        pod_name=st.pod_name,
        at_rest_since=st.at_rest_since,
        wake_requested_at=parse_wake(annotations.get(ANNOTATION_WAKE_REQUESTED_AT)),
        peers=peers,
        tenant_id=identity.get("tenantId"),
        correlation_id=identity.get("correlationId"),
    )


def view_of_object(obj: Mapping[str, Any]) -> SessionView | None:
    """The view of one AgentSession as the apiserver returns it (a LIST item); None without a
    namespace or uid."""
    meta = obj.get("metadata") or {}
    uid, namespace, name = meta.get("uid"), meta.get("namespace"), meta.get("name")
    if not uid or not namespace or not name:
        return None
    return view_of(
        str(uid), str(namespace), str(name), meta, obj.get("spec") or {}, obj.get("status") or {}
    )


class GatewayDirectory:
    """Session views by uid and by ``(namespace, name)``."""

    def __init__(self) -> None:
        self._by_uid: dict[str, SessionView] = {}
        self._by_name: dict[tuple[str, str], str] = {}

    def put(self, view: SessionView) -> None:
        """Add or replace a session's view."""
        self._by_uid[view.uid] = view
        self._by_name[(view.namespace, view.name)] = view.uid

    def fill(self, objects: list[dict[str, Any]]) -> int:
        """Put the view of every AgentSession of a LIST (raw items) that the watch has not
        put already (a watched view is as fresh or fresher); how many were added."""
        added = 0
        for obj in objects:
            view = view_of_object(obj)
            if view is not None and view.uid not in self._by_uid:
                self.put(view)
                added += 1
        return added

    def drop(self, uid: str) -> None:
        """Forget a deleted session."""
        view = self._by_uid.pop(uid, None)
        if view is not None and self._by_name.get((view.namespace, view.name)) == uid:
            del self._by_name[(view.namespace, view.name)]

    def by_uid(self, uid: str) -> SessionView | None:
        """The view of session ``uid``."""
        return self._by_uid.get(uid)

    def lookup(self, namespace: str, name: str) -> SessionView | None:
        """The view of ``namespace/name``."""
        uid = self._by_name.get((namespace, name))
        return None if uid is None else self._by_uid.get(uid)
