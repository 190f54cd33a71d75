"""The agent: ``Agent``, ``Session``, the loop, options, runs, budget, hooks and compaction."""

from session_runtime.agent.agent import Agent
from session_runtime.agent.budget import BudgetGuard, Decision, GuardCaller, TokenBudgetGuard
from session_runtime.agent.options import SessionOptions, SessionRetentionLimits
from session_runtime.agent.results import AgentResult, BtwResult
from session_runtime.agent.session import Session

__all__ = [
    "Agent",
    "AgentResult",
    "BtwResult",
    "BudgetGuard",
    "Decision",
    "GuardCaller",
    "Session",
    "SessionOptions",
    "SessionRetentionLimits",
    "TokenBudgetGuard",
]
