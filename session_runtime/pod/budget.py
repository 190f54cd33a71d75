"""The budget guard a session pod installs from ``spec.budget`` (RUNTIME-CONTRACT "Budget guard").

Owned by the ``berth-session`` entrypoint; the agent loop calls the three methods of the A3S
budget-guard protocol. The guard counts what the session consumed — starting from the usage and
tool-call count a resumed run carries forward — and answers with the contract's decision dicts:

- ``None``: allow;
- ``{"decision": "soft", "resource", "consumed", "limit", "message"}``: the first time a resource
  crosses ``softLimitPercent`` of its limit (once per resource per process; the loop emits
  ``budget_threshold_hit`` kind soft and proceeds);
- ``{"decision": "deny", "resource", "reason"}``: ``total_tokens`` when the limit is used up or
  consumed + the call's estimate would pass ``maxTotalTokens``; ``tool_calls`` when
  ``maxToolCalls`` calls were already allowed.

Resources: ``total_tokens`` (prompt + completion tokens) and ``tool_calls``. Thread-safe (the loop
may call from a worker thread of a synchronous ``send``).
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from typing import Any

from session_runtime.pod.options import BudgetOptions
from session_runtime.pod.termination import Usage

Decision = dict[str, Any]


class LimitsBudgetGuard:
    """A3S budget guard enforcing :class:`~session_runtime.pod.options.BudgetOptions`."""

    def __init__(
        self, budget: BudgetOptions, *, consumed_tokens: int = 0, consumed_tool_calls: int = 0
    ) -> None:
        self._budget = budget
        self._tokens = max(consumed_tokens, 0)
        self._tool_calls = max(consumed_tool_calls, 0)
        self._soft_sent: set[str] = set()
        self._lock = threading.Lock()

    @property
    def consumed(self) -> dict[str, int]:
        """``{"total_tokens": int, "tool_calls": int}`` counted so far (incl. the baseline)."""
        with self._lock:
            return {"total_tokens": self._tokens, "tool_calls": self._tool_calls}

    def _decide(self, resource: str, consumed: int, upcoming: int, limit: int | None) -> Decision:
        if limit is None:
            return {"decision": "allow"}
        if consumed >= limit or consumed + upcoming > limit:
            return {
                "decision": "deny",
                "resource": resource,
                "reason": f"{consumed} of {limit} used, next needs {upcoming}",
            }
        percent = self._budget.soft_limit_percent
        if (
            percent is not None
            and resource not in self._soft_sent
            and (consumed + upcoming) * 100 >= limit * percent
        ):
            self._soft_sent.add(resource)
            return {
                "decision": "soft",
                "resource": resource,
                "consumed": consumed,
                "limit": limit,
                "message": f"{resource} passed {percent}% of its limit",
            }
        return {"decision": "allow"}

    def check_before_llm(self, session_id: str, estimated_tokens: int) -> Decision:
        """Called before every LLM request with its estimated prompt size in tokens."""
        with self._lock:
            return self._decide(
                "total_tokens",
                self._tokens,
                max(estimated_tokens, 0),
                self._budget.max_total_tokens,
            )

    def record_after_llm(self, session_id: str, usage: Mapping[str, Any]) -> None:
        """Add a successful call's usage (a dict with ``total_tokens`` or the two parts)."""
        with self._lock:
            self._tokens += Usage.from_mapping(usage).total_tokens

    def check_before_tool(self, session_id: str, tool_name: str) -> Decision:
        """Called before every tool call; an allowed call counts against ``maxToolCalls``."""
        with self._lock:
            decision = self._decide("tool_calls", self._tool_calls, 1, self._budget.max_tool_calls)
            if decision["decision"] != "deny":
                self._tool_calls += 1
            return decision
