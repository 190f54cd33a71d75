"""API calls of a namespace's NetworkPolicies (:mod:`berth_operator.builders.netpol`).

``NamespacePolicies`` shares the operator's session (one connection pool); errors are
:mod:`berth_operator.errors`. Called by ``handlers.session_placement`` and
``handlers.laneworker`` beside the namespace's shared claim: the first time this process places
a pod in a namespace, its policies are created (or brought up to date); later calls return at
once without a request.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from berth_operator.builders.netpol import build_network_policy, cluster_role_owner, needs_update
from berth_operator.errors import AlreadyExists, KubeError
from berth_operator.k8s import rest
from berth_operator.k8s.client import KubeClient
from berth_operator.k8s.connection import ApiSession
from berth_operator.settings import NetworkPolicySettings

log = logging.getLogger(__name__)


class NamespacePolicies:
    """Creates the configured NetworkPolicies once per namespace. All methods are coroutines."""

    def __init__(self, session: ApiSession, settings: NetworkPolicySettings) -> None:
        self.rest = rest.AsyncRest(session)
        self.settings = settings
        self.done: set[str] = set()
        """Namespaces whose policies this process wrote (or found up to date)."""
        self._owner: dict[str, Any] | None = None
        self._lock = asyncio.Lock()

    @classmethod
    def from_kube(cls, kube: KubeClient, settings: NetworkPolicySettings) -> NamespacePolicies:
        """Share ``kube``'s session."""
        return cls(kube.session, settings)

    async def ensure(self, namespace: str) -> None:
        """Create each configured policy in ``namespace``; one that exists is replaced when the
        operator created it and it differs (:func:`needs_update`). Raises KubeError (e.g. 403
        when RBAC lacks networkpolicies create); the namespace is then tried again next time."""
        if namespace in self.done or not self.settings.templates:
            return
        owner = await self.owner_ref()
        for template in self.settings.templates:
            body = build_network_policy(namespace, template, owner)
            path = _policies(namespace)
            what = f"networkpolicy {namespace}/{template.name}"
            try:
                await self.rest.create(f"create {what}", path, body)
                continue
            except AlreadyExists:
                pass
            current = await self.rest.get(f"get {what}", _policies(namespace, template.name))
            if needs_update(current, body):
                body["metadata"]["resourceVersion"] = current["metadata"]["resourceVersion"]
                await self.rest.replace(
                    f"replace {what}", _policies(namespace, template.name), body
                )
        self.done.add(namespace)

    async def owner_ref(self) -> dict[str, Any] | None:
        """The owner reference of the configured ClusterRole, read once; None when none is
        configured or it cannot be read (logged: the policies then outlive an uninstall)."""
        name = self.settings.owner_cluster_role
        if not name:
            return None
        async with self._lock:
            if self._owner is None:
                path = rest.group("rbac.authorization.k8s.io", "v1", None, "clusterroles", name)
                try:
                    role = await self.rest.get(f"get clusterrole {name}", path)
                    self._owner = cluster_role_owner(role)
                except KubeError as exc:
                    log.warning(f"network policies get no owner (clusterrole {name}): {exc}")
                    return None
            return self._owner


def _policies(namespace: str, name: str = "") -> str:
    return rest.group("networking.k8s.io", "v1", namespace, "networkpolicies", name)
