"""The budget guard protocol (A3S ``BudgetGuard``), its decisions, and a built-in guard.

Owned by ``session_runtime.agent``; the loop consults :class:`GuardCaller` before every LLM call
(``check_before_llm(session_id, estimated_tokens)``), after every successful one
(``record_after_llm(session_id, usage)``) and before every tool (``check_before_tool(session_id,
tool_name)``). Decisions are dicts: None / ``{"decision": "allow"}``; ``{"decision": "soft",
"resource", "consumed", "limit", "message"?}`` (emit ``budget_threshold_hit`` kind soft, proceed);
``{"decision": "deny", "resource", "reason"}`` (LLM: fail the call with ``Budget exhausted on
'<resource>': <reason>``; tool: that error becomes the tool result).

A missing method means allow. A guard that raises or exceeds its timeout follows the failure mode:
``fail_open`` (allow; the framework's Python SDK) or ``fail_closed`` (deny with resource
``budget_guard``; the framework's Node SDK). A guard may carry ``failure_mode`` and
``timeout_ms`` attributes that override the session's settings.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
from dataclasses import dataclass
from typing import Any, Literal, Protocol

from session_runtime.tracing import budget_event

log = logging.getLogger(__name__)

DecisionKind = Literal["allow", "soft", "deny"]


@dataclass(frozen=True, slots=True)
class Decision:
    """A parsed guard decision. ``consumed``/``limit`` are in the resource's unit (tokens,
    calls)."""

    kind: DecisionKind
    resource: str = ""
    reason: str = ""
    consumed: float = 0
    limit: float = 0
    message: str | None = None


ALLOW = Decision("allow")


class BudgetGuard(Protocol):
    """The shape of a guard; every method is optional and may be sync or async."""

    def check_before_llm(self, session_id: str, estimated_tokens: int) -> dict[str, Any] | None:
        """Before every LLM request; ``estimated_tokens`` ~ bytes/4 of the request."""
        ...

    def record_after_llm(self, session_id: str, usage: dict[str, int]) -> None:
        """After every successful LLM call; ``usage`` has prompt/completion/total_tokens."""
        ...

    def check_before_tool(self, session_id: str, tool_name: str) -> dict[str, Any] | None:
        """Before every tool call (after hooks)."""
        ...


def parse_decision(value: Any) -> Decision:
    """Turn a guard's return value into a Decision. Raises ValueError if unreadable."""
    if value is None:
        return ALLOW
    if not isinstance(value, dict):
        raise ValueError(f"budget decision must be a dict or None, got {type(value).__name__}")
    kind = value.get("decision", "allow")
    if kind == "allow":
        return ALLOW
    if kind == "soft":
        return Decision(
            "soft",
            resource=str(value.get("resource", "")),
            consumed=float(value.get("consumed", 0)),
            limit=float(value.get("limit", 0)),
            message=None if value.get("message") is None else str(value["message"]),
        )
    if kind == "deny":
        return Decision(
            "deny", resource=str(value.get("resource", "")), reason=str(value.get("reason", ""))
        )
    raise ValueError(f"unknown budget decision {kind!r}")


def threshold_event_fields(decision: Decision, kind: Literal["soft", "hard"]) -> dict[str, Any]:
    """The ``budget_threshold_hit`` fields for a soft or deny decision."""
    fields: dict[str, Any] = {
        "resource": decision.resource,
        "kind": kind,
        "consumed": decision.consumed,
        "limit": decision.limit,
    }
    message = decision.message if kind == "soft" else decision.reason
    if message is not None:
        fields["message"] = message
    return fields


class GuardCaller:
    """Calls a guard's methods under the failure mode and timeout; returns Decisions."""

    def __init__(self, guard: BudgetGuard, failure_mode: str, timeout_ms: int) -> None:
        self.guard = guard
        self.failure_mode = str(getattr(guard, "failure_mode", None) or failure_mode)
        self.timeout_ms = int(getattr(guard, "timeout_ms", None) or timeout_ms)

    async def _call(self, method: str, *args: Any) -> tuple[bool, Any, str]:
        """(ok, value, error text). Sync guards run inline if they declare ``run_inline``,
        otherwise in a worker thread so the timeout can apply."""
        fn = getattr(self.guard, method, None)
        if fn is None:
            return True, None, ""
        timeout = self.timeout_ms / 1000
        try:
            if inspect.iscoroutinefunction(fn):
                value = await asyncio.wait_for(fn(*args), timeout)
            elif getattr(self.guard, "run_inline", False):
                value = fn(*args)
            else:
                value = await asyncio.wait_for(asyncio.to_thread(fn, *args), timeout)
            return True, value, ""
        except TimeoutError:
            return False, None, f"budget guard {method} timed out after {self.timeout_ms} ms"
        except Exception as exc:
            return False, None, f"budget guard {method} raised {type(exc).__name__}: {exc}"

    def _failed(self, error: str) -> Decision:
        log.warning("%s (failure mode %s)", error, self.failure_mode)
        if self.failure_mode == "fail_closed":
            return Decision("deny", resource="budget_guard", reason=error)
        return ALLOW

    async def _check(self, method: str, *args: Any) -> Decision:
        ok, value, error = await self._call(method, *args)
        if not ok:
            return self._failed(error)
        try:
            return parse_decision(value)
        except ValueError as exc:
            return self._failed(f"budget guard {method} returned an unreadable decision: {exc}")

    async def check_before_llm(self, session_id: str, estimated_tokens: int) -> Decision:
        """Decision for the next LLM call (an event on the current span, ``tracing``)."""
        decision = await self._check("check_before_llm", session_id, estimated_tokens)
        budget_event("llm", decision.kind, decision.resource, decision.reason, None)
        return decision

    async def check_before_tool(self, session_id: str, tool_name: str) -> Decision:
        """Decision for one tool call (an event on the current span, ``tracing``)."""
        decision = await self._check("check_before_tool", session_id, tool_name)
        budget_event("tool", decision.kind, decision.resource, decision.reason, tool_name)
        return decision

    async def record_after_llm(self, session_id: str, usage: dict[str, int]) -> None:
        """Report actual usage; failures are logged, never raised."""
        ok, _, error = await self._call("record_after_llm", session_id, dict(usage))
        if not ok:
            log.warning("%s", error)


class TokenBudgetGuard:
    """Built-in guard from ``budget {maxTotalTokens, maxToolCalls, softLimitPercent}``.

    Tokens: deny when recorded tokens plus the request estimate exceed ``max_total_tokens``;
    soft once per session when they reach ``soft_limit_percent`` of it. Tool calls: deny the call
    that would exceed ``max_tool_calls``; soft once at the percentage. None = no limit. Counts are
    per guard instance (one per session). Pure and fast, so it runs inline.
    """

    run_inline = True

    def __init__(
        self,
        max_total_tokens: int | None = None,
        max_tool_calls: int | None = None,
        soft_limit_percent: float | None = 80.0,
        failure_mode: str = "fail_closed",
    ) -> None:
        self.max_total_tokens = max_total_tokens
        self.max_tool_calls = max_tool_calls
        self.soft_limit_percent = soft_limit_percent
        self.failure_mode = failure_mode
        self.tokens_used = 0
        self.tool_calls = 0
        self._soft_sent: set[str] = set()

    def _soft(self, resource: str, consumed: float, limit: int) -> dict[str, Any] | None:
        if self.soft_limit_percent is None or resource in self._soft_sent:
            return None
        if consumed >= limit * self.soft_limit_percent / 100:
            self._soft_sent.add(resource)
            return {
                "decision": "soft",
                "resource": resource,
                "consumed": consumed,
                "limit": limit,
                "message": f"{resource} at {consumed}/{limit} "
                f"(soft limit {self.soft_limit_percent:g}%)",
            }
        return None

    def check_before_llm(self, session_id: str, estimated_tokens: int) -> dict[str, Any] | None:
        """Deny past ``max_total_tokens``, soft at the percentage, else allow."""
        cap = self.max_total_tokens
        if cap is None:
            return None
        projected = self.tokens_used + estimated_tokens
        if projected > cap:
            return {
                "decision": "deny",
                "resource": "tokens",
                "reason": f"{self.tokens_used} tokens used + ~{estimated_tokens} requested "
                f"exceeds the limit of {cap}",
            }
        return self._soft("tokens", projected, cap)

    def record_after_llm(self, session_id: str, usage: dict[str, int]) -> None:
        """Add the call's ``total_tokens``."""
        self.tokens_used += int(usage.get("total_tokens", 0))

    def check_before_tool(self, session_id: str, tool_name: str) -> dict[str, Any] | None:
        """Deny the call past ``max_tool_calls``, soft at the percentage, else allow."""
        cap = self.max_tool_calls
        if cap is None:
            return None
        if self.tool_calls >= cap:
            return {
                "decision": "deny",
                "resource": "tool_calls",
                "reason": f"{self.tool_calls} tool calls used; the limit is {cap}",
            }
        self.tool_calls += 1
        return self._soft("tool_calls", self.tool_calls, cap)
