"""The session's guard for cluster budgets: A3S ``BudgetGuard`` backed by the budget service.

``check_before_llm`` asks the service to reserve the request's estimated tokens in every
BudgetPolicy selecting this session and returns its decision (allow; soft → the loop emits
``budget_threshold_hit`` kind soft, once per policy, resource and window; deny → the loop fails
the run with ``Budget exhausted on '<resource>': <reason>``, the session stays open).
``record_after_llm`` settles the reservation to the provider's usage. A reservation a failed call
never settled is released before the next check.

When the service cannot be reached (connection error, timeout, 5xx, refused credentials) the
guard follows the failure policy: ``Closed`` denies with resource ``budget_service``, ``Open``
allows. It starts from the policy the operator rendered into the session's options and then
follows what the service last said (``Closed`` when any selecting policy says so). An inner guard
(the session's own ``spec.budget``) is consulted first; its deny wins.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import aiohttp

from berth_contract.services import BUDGET_CHECK_PATH, BUDGET_RECORD_PATH, SESSION_UID_HEADER
from session_runtime.agent.budget import BudgetGuard

log = logging.getLogger(__name__)


class ServiceUnavailable(Exception):
    """The budget service did not give a usable answer."""


class ClusterBudgetGuard:
    """Guard consulting the budget service at ``url`` (``http://host:port``) as session
    ``session_uid`` with its API ``token``; ``timeout_ms`` bounds each request."""

    def __init__(
        self,
        url: str,
        session_uid: str,
        token: str,
        failure_policy: str = "Closed",
        timeout_ms: int = 2000,
        inner: BudgetGuard | None = None,
    ) -> None:
        self.url = url.rstrip("/")
        self.session_uid = session_uid
        self.failure_policy = failure_policy
        self.request_timeout_ms = timeout_ms
        # GuardCaller's own timeout must not fire before ours (ours applies the policy).
        self.timeout_ms = timeout_ms + 1000
        self.inner = inner
        self._headers = {"Authorization": f"Bearer {token}", SESSION_UID_HEADER: session_uid}
        self._http: aiohttp.ClientSession | None = None
        self._pending: list[str] = []
        self._soft_sent: set[str] = set()

    async def _post(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        if self._http is None or self._http.closed:
            self._http = aiohttp.ClientSession(
                timeout=aiohttp.ClientTimeout(total=self.request_timeout_ms / 1000),
                headers=self._headers,
            )
        try:
            async with self._http.post(self.url + path, json=body) as resp:
                if resp.status != 200:
                    raise ServiceUnavailable(f"budget service answered HTTP {resp.status}")
                reply = await resp.json()
        except (aiohttp.ClientError, TimeoutError, ValueError) as exc:
            raise ServiceUnavailable(f"budget service unreachable: {type(exc).__name__}") from exc
        if not isinstance(reply, dict):
            raise ServiceUnavailable("budget service sent an unreadable reply")
        return reply

    def _unavailable(self, error: str) -> dict[str, Any] | None:
        log.warning("%s (failurePolicy %s)", error, self.failure_policy)
        if self.failure_policy == "Open":
            return None
        return {"decision": "deny", "resource": "budget_service", "reason": error}

    async def _inner(self, method: str, *args: Any) -> Any:
        fn = getattr(self.inner, method, None)
        if fn is None:
            return None
        value = fn(*args)
        return await value if asyncio.iscoroutine(value) else value

    async def check_before_llm(
        self, session_id: str, estimated_tokens: int
    ) -> dict[str, Any] | None:
        """The session's own guard, then the cluster's policies (see the module docstring)."""
        own = await self._inner("check_before_llm", session_id, estimated_tokens)
        if isinstance(own, dict) and own.get("decision") == "deny":
            return own
        if self._pending:
            await self._settle({})
        try:
            reply = await self._post(BUDGET_CHECK_PATH, {"estimatedTokens": int(estimated_tokens)})
        except ServiceUnavailable as exc:
            return self._unavailable(str(exc))
        if reply.get("failurePolicy") in ("Closed", "Open"):
            self.failure_policy = str(reply["failurePolicy"])
        self._pending = [str(r) for r in reply.get("reservations", [])]
        decision = reply.get("decision")
        if decision == "deny":
            return {
                "decision": "deny",
                "resource": str(reply.get("resource", "")),
                "reason": str(reply.get("reason", "")),
            }
        if decision == "soft":
            key = str(reply.get("softKey", ""))
            if key not in self._soft_sent:
                self._soft_sent.add(key)
                return {
                    k: reply[k]
                    for k in ("decision", "resource", "consumed", "limit", "message")
                    if k in reply
                }
        return own if isinstance(own, dict) else None

    async def _settle(self, usage: dict[str, int]) -> None:
        refs, self._pending = self._pending, []
        if not refs:
            return
        try:
            await self._post(BUDGET_RECORD_PATH, {"reservations": refs, "usage": usage})
        except ServiceUnavailable as exc:
            # The reservation stays held until its window's counters expire; the use is lost
            # to the ledger. Logged, never raised (A3S: record_after_llm failures are logged).
            log.warning("cannot settle budget reservations: %s", exc)

    async def record_after_llm(self, session_id: str, usage: dict[str, int]) -> None:
        """Settle the pending reservation to ``usage`` (prompt/completion/total_tokens)."""
        await self._inner("record_after_llm", session_id, usage)
        await self._settle({k: int(v) for k, v in usage.items()})

    async def check_before_tool(self, session_id: str, tool_name: str) -> dict[str, Any] | None:
        """Tool calls are the session's own guard's business (policies limit LLM use)."""
        return await self._inner("check_before_tool", session_id, tool_name)  # type: ignore[no-any-return]

    async def close(self) -> None:
        """Close the HTTP client."""
        if self._http is not None:
            await self._http.close()
            self._http = None
