"""The budget service's view of the cluster: sessions (uid → API token, identity) and policies.

The operator fills it from its watches of AgentSessions (identity, model, the token it issued in
the session's Secret) and BudgetPolicies; the service reads it on every request. In-memory and
single-threaded (the operator's event loop), so reads always see the latest edit.
"""

from __future__ import annotations

import hmac
from collections.abc import Callable

from berth_operator.budget.policy import Identity, Policy


class BudgetDirectory:
    """Implements :class:`berth_operator.budget.service.Directory`."""

    def __init__(self, tokens: Callable[[str], str | None] | None = None) -> None:
        """``tokens``: session uid → its API token, when another part of the process already
        holds them (the operator's token cache); then :meth:`put_identity` is enough."""
        self._tokens = tokens
        self._sessions: dict[str, tuple[str, Identity]] = {}
        self._policies: dict[str, dict[str, Policy]] = {}

    def put_session(self, uid: str, token: str, who: Identity) -> None:
        """Register (or update) session ``uid`` with its API ``token`` and identity."""
        self._sessions[uid] = (token, who)

    def put_identity(self, uid: str, who: Identity) -> None:
        """Register (or update) session ``uid`` whose token the ``tokens`` lookup knows."""
        self._sessions[uid] = ("", who)

    def drop_session(self, uid: str) -> None:
        """Forget session ``uid`` (deleted); its calls are refused from then on."""
        self._sessions.pop(uid, None)

    def put_policy(self, policy: Policy) -> None:
        """Register (or replace, after an edit) a policy."""
        self._policies.setdefault(policy.namespace, {})[policy.name] = policy

    def drop_policy(self, namespace: str, name: str) -> None:
        """Forget a deleted policy."""
        self._policies.get(namespace, {}).pop(name, None)

    def identity(self, session_uid: str) -> Identity | None:
        """The identity of a registered session, whatever the token (None when unknown)."""
        known = self._sessions.get(session_uid)
        return None if known is None else known[1]

    def identify(self, session_uid: str, token: str) -> Identity | None:
        """The identity of ``session_uid`` when ``token`` is its token (constant-time compare)."""
        known = self._sessions.get(session_uid)
        if known is None or not token:
            return None
        expected = known[0] or (self._tokens(session_uid) if self._tokens else None) or ""
        if not expected:
            return None
        return known[1] if hmac.compare_digest(expected, token) else None

    def policies(self, namespace: str) -> list[Policy]:
        """The policies of ``namespace``."""
        return list(self._policies.get(namespace, {}).values())

    def all_policies(self) -> list[Policy]:
        """Every policy (for status and metrics)."""
        return [p for ns in self._policies.values() for p in ns.values()]
