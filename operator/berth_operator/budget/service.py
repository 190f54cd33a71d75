"""The budget service's HTTP API (aiohttp), run by the operator next to its health endpoints.

Sessions call it from their guard (:mod:`session_runtime.budget.guard`):

- ``POST /v1/budget/check`` ``{"estimatedTokens": int}`` → ``{"decision": "allow"|"soft"|"deny",
  "resource", "consumed", "limit", "reason"|"message", "softKey", "reservations": [str],
  "failurePolicy": "Closed"|"Open"}``. Allow and soft reserve the estimate in every policy that
  selects the session; deny reserves nothing.
- ``POST /v1/budget/record`` ``{"reservations": [str], "usage": {prompt_tokens,
  completion_tokens, total_tokens}}`` → ``{"settled": int}``. Settles each reservation to the
  provider's usage (all zero = release).

Both need ``Authorization: Bearer <the session's API token>`` and ``X-Berth-Session-Uid``. The
:class:`Directory` (the operator's view of AgentSessions and BudgetPolicies) checks the token
against that session's own and supplies its identity; the tenant never comes from the request,
so a session cannot spend (or spare) another tenant's budget. A known session whose token the
directory does not hold yet (a new leader) has it read once through ``load_token``; when that
read fails the answer is 503 (the guard then follows its failure policy). Unauthenticated or
malformed requests get 401 / 400 and are counted. Policies are read from the directory on every
call, so an edited policy applies from the next call on.
"""

from __future__ import annotations

import logging
import secrets
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from aiohttp import web
from prometheus_client import Counter, Histogram

from berth_contract.services import BUDGET_CHECK_PATH, BUDGET_RECORD_PATH, SESSION_UID_HEADER
from berth_operator.budget.ledger import KEEP_AFTER_WINDOW_SECONDS, Ledger, window_key
from berth_operator.budget.policy import Identity, Policy, reserve_amounts, usage_amounts

log = logging.getLogger(__name__)


DECISIONS = Counter(
    "berth_operator_budget_decisions_total",
    "Budget checks answered, by policy and decision (allow, soft, deny).",
    ["namespace", "policy", "decision"],
)
REFUSED = Counter(
    "berth_operator_budget_requests_refused_total",
    "Budget service requests refused: unauthenticated (401), malformed (400), or unavailable "
    "(503: a new leader could not read the session's token yet).",
    ["reason"],
)
LATENCY = Histogram(
    "berth_operator_budget_request_duration_seconds",
    "Time the budget service spends on one request (Redis included).",
    ["path"],
    buckets=(0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1.0),
)


class Directory(Protocol):
    """What the service needs from the cluster."""

    def identify(self, session_uid: str, token: str) -> Identity | None:
        """The identity of the session ``session_uid`` if ``token`` is its API token, else
        None. Must compare tokens in constant time."""
        ...

    def identity(self, session_uid: str) -> Identity | None:
        """The identity of a known session, whatever the token (None when unknown)."""
        ...

    def policies(self, namespace: str) -> list[Policy]:
        """The BudgetPolicies of ``namespace`` as they are now."""
        ...


@dataclass(frozen=True, slots=True)
class Crossing:
    """A limit a call reached: ``kind`` soft (threshold reached, call allowed) or hard (call
    denied), with the resource's consumed units and its limit."""

    policy: Policy
    kind: str
    resource: str
    consumed: int
    limit: int
    session: str


OnCrossing = Callable[[Crossing], None]
LoadToken = Callable[[Identity, str], Awaitable[None]]


def _reservation(policy: Policy, window: str, rid: str) -> str:
    return f"{policy.name}/{window}/{rid}"


class TokenUnavailable(Exception):
    """``load_token`` could not read a session's token now (the apiserver did not answer)."""


class BudgetService:
    """Decides budget checks against the ledger; see the module docstring for the API.

    ``load_token(identity, uid)``, when given, makes the token of a session the directory knows
    but holds no token for available to it (raises :class:`TokenUnavailable` when it cannot)."""

    def __init__(
        self,
        ledger: Ledger,
        directory: Directory,
        on_crossing: OnCrossing | None = None,
        clock: Callable[[], float] = time.time,
        load_token: LoadToken | None = None,
    ) -> None:
        self.ledger = ledger
        self.directory = directory
        self.on_crossing = on_crossing
        self.clock = clock
        self.load_token = load_token

    def routes(self, app: web.Application) -> None:
        """Add the two endpoints to ``app``."""
        app.router.add_post(BUDGET_CHECK_PATH, self._check_http)
        app.router.add_post(BUDGET_RECORD_PATH, self._record_http)

    async def _who(self, request: web.Request) -> Identity | web.Response:
        """The caller's identity, or the refusal to answer (401, 503)."""
        auth = request.headers.get("Authorization", "")
        uid = request.headers.get(SESSION_UID_HEADER, "")
        token = auth[len("Bearer ") :].strip() if auth.startswith("Bearer ") else ""
        who = self.directory.identify(uid, token) if token and uid else None
        known = self.directory.identity(uid) if who is None and token and uid else None
        if known is not None and self.load_token is not None:
            try:
                await self.load_token(known, uid)
            except TokenUnavailable as exc:
                REFUSED.labels("unavailable").inc()
                return web.json_response(
                    {"error": "unavailable", "message": str(exc)},
                    status=503,
                    headers={"Retry-After": "1"},
                )
            who = self.directory.identify(uid, token)
        if who is None:
            REFUSED.labels("unauthenticated").inc()
            return web.json_response({"error": "unauthenticated"}, status=401)
        return who

    async def _body(self, request: web.Request) -> dict[str, Any] | None:
        try:
            body = await request.json()
        except ValueError:
            return None
        return body if isinstance(body, dict) else None

    async def _check_http(self, request: web.Request) -> web.Response:
        started = time.perf_counter()
        try:
            who = await self._who(request)
            if isinstance(who, web.Response):
                return who
            body = await self._body(request)
            est = None if body is None else body.get("estimatedTokens")
            if not isinstance(est, int) or isinstance(est, bool) or est < 0:
                REFUSED.labels("malformed").inc()
                return web.json_response(
                    {"error": "estimatedTokens must be an int ≥ 0"}, status=400
                )
            return web.json_response(await self.check(who, est))
        finally:
            LATENCY.labels(BUDGET_CHECK_PATH).observe(time.perf_counter() - started)

    async def _record_http(self, request: web.Request) -> web.Response:
        started = time.perf_counter()
        try:
            who = await self._who(request)
            if isinstance(who, web.Response):
                return who
            body = await self._body(request)
            refs = None if body is None else body.get("reservations")
            usage = None if body is None else body.get("usage", {})
            if (
                not isinstance(refs, list)
                or not all(isinstance(r, str) for r in refs)
                or not isinstance(usage, dict)
                or not all(isinstance(v, int) for v in usage.values())
            ):
                REFUSED.labels("malformed").inc()
                return web.json_response({"error": "malformed record"}, status=400)
            return web.json_response({"settled": await self.record(who, refs, usage)})
        finally:
            LATENCY.labels(BUDGET_RECORD_PATH).observe(time.perf_counter() - started)

    def _selected(self, who: Identity) -> list[Policy]:
        return [p for p in self.directory.policies(who.namespace) if p.selects(who)]

    def _crossed(self, crossing: Crossing) -> None:
        if self.on_crossing is not None:
            try:
                self.on_crossing(crossing)
            except Exception:  # a status/Event hiccup must never fail a session's call
                log.exception("budget crossing callback failed")

    def _soft_crossing(
        self, policy: Policy, window: str, consumed: Mapping[str, int], session: str
    ) -> dict[str, Any] | None:
        """The reply fields of the first resource of ``policy`` at or past its soft threshold
        after this reservation (the crossing recorded for its Event), or None."""
        for resource, used in consumed.items():
            at = policy.soft_at(resource)
            if at is None or used < at:
                continue
            limit = int(policy.limits[resource])
            self._crossed(Crossing(policy, "soft", resource, used, limit, session))
            return {
                "decision": "soft",
                "resource": resource,
                "consumed": used,
                "limit": limit,
                "policy": policy.name,
                "softKey": f"{policy.name}/{window}/{resource}",
                "message": f"BudgetPolicy {policy.name}: {resource} at "
                f"{used}/{limit} (soft limit {policy.soft_limit_percent:g}%)",
            }
        return None

    async def check(self, who: Identity, estimated_tokens: int) -> dict[str, Any]:
        """Reserve ``estimated_tokens`` in every policy selecting ``who``; the reply body."""
        now = self.clock()
        selected = self._selected(who)
        closed = any(p.failure_policy == "Closed" for p in selected)
        reply: dict[str, Any] = {
            "decision": "allow",
            "reservations": [],
            "failurePolicy": "Closed" if closed else "Open",
        }
        held: list[tuple[Policy, str, str]] = []
        soft: dict[str, Any] | None = None
        for policy in selected:
            window = policy.window(now)
            key = window_key(who.namespace, policy.name, window)
            ttl = int(policy.window_end(now) - now) + KEEP_AFTER_WINDOW_SECONDS
            rid = secrets.token_hex(8)
            amounts = reserve_amounts(policy, who.model, estimated_tokens)
            got = await self.ledger.reserve(key, rid, who.session, amounts, policy.limits, ttl)
            if not got.ok:
                for p, w, r in held:
                    release = dict.fromkeys(p.limits, 0)
                    key_w = window_key(who.namespace, p.name, w)
                    await self.ledger.settle(key_w, r, who.session, release, ttl)
                DECISIONS.labels(who.namespace, policy.name, "deny").inc()
                self._crossed(
                    Crossing(policy, "hard", got.resource, got.current, got.limit, who.session)
                )
                return {
                    "decision": "deny",
                    "resource": got.resource,
                    "consumed": got.current,
                    "limit": got.limit,
                    "policy": policy.name,
                    "reason": f"BudgetPolicy {policy.name}: {got.resource} at "
                    f"{got.current}/{got.limit} in window {window}; ~{estimated_tokens} "
                    "tokens requested",
                    "reservations": [],
                    "failurePolicy": reply["failurePolicy"],
                }
            held.append((policy, window, rid))
            reply["reservations"].append(_reservation(policy, window, rid))
            first_soft = self._soft_crossing(policy, window, got.consumed, who.session)
            if soft is None:
                soft = first_soft
            decision = "allow" if first_soft is None else "soft"
            DECISIONS.labels(who.namespace, policy.name, decision).inc()
        if soft is not None:
            reply.update(soft)
        return reply

    async def record(self, who: Identity, reservations: list[str], usage: Mapping[str, int]) -> int:
        """Settle ``who``'s reservations to ``usage``; how many were settled (unknown, foreign
        or already settled ones are skipped)."""
        now = self.clock()
        policies = {p.name: p for p in self.directory.policies(who.namespace)}
        settled = 0
        for ref in reservations:
            parts = ref.split("/")
            if len(parts) != 3 or parts[0] not in policies:
                continue
            policy = policies[parts[0]]
            used = usage_amounts(policy, who.model, usage)
            ttl = int(policy.window_end(now) - now) + KEEP_AFTER_WINDOW_SECONDS
            key = window_key(who.namespace, policy.name, parts[1])
            if await self.ledger.settle(key, parts[2], who.session, used, ttl) is not None:
                settled += 1
        return settled
