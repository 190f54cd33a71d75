"""Berth's session runtime: the A3S Code session contract in Python (docs/architecture.md §10).

Public API (A3S Python SDK names)::

    from session_runtime import Agent, SessionOptions   # and every name the A3S docs import
    agent = Agent.create({"default_model": "openai/gpt-4o-mini"})
    session = agent.session("/work/repo", SessionOptions(tenant_id="acme"))
    result = session.send("Fix the failing test")      # or: await session.send_async(...)
    print(result.text, result.total_tokens, result.tool_calls_count)

Package map: ``agent/`` (Agent, Session, loop, options, runs, budget, hooks, compaction),
``llm/`` (OpenAI-compatible client, scripted test server), ``tools/`` (workspace-confined tools,
direct executor, executor seam), ``store/`` (persistence seam and stores), ``lanes/`` (lane
queue), ``events`` (event vocabulary), ``hostenv`` (ids and time), ``errors``.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from session_runtime.agent import (
        Agent,
        AgentResult,
        BtwResult,
        BudgetGuard,
        Session,
        SessionOptions,
        SessionRetentionLimits,
        TokenBudgetGuard,
    )
    from session_runtime.errors import (
        AgentClosedError,
        BudgetExhaustedError,
        CheckpointError,
        CircuitOpenError,
        ConfigError,
        FencedError,
        LimitExceededError,
        LlmError,
        MaxToolRoundsError,
        ParseRetriesExceededError,
        ResumeError,
        RunCancelledError,
        RunPassivatedError,
        SessionBusyError,
        SessionClosedError,
        SessionNotFoundError,
        SessionRuntimeError,
        StoreError,
    )
    from session_runtime.events import AgentEvent
    from session_runtime.hostenv import FixedClock, HostEnv, SequentialIdGenerator, SystemClock
    from session_runtime.lanes.config import (
        LaneHandlerConfig,
        PriorityBoostConfig,
        RateLimitConfig,
        RetryPolicyConfig,
        SessionQueueConfig,
    )
    from session_runtime.lanes.external import ExternalTask, ExternalTaskResult
    from session_runtime.store.base import (
        LoopCheckpoint,
        PendingRound,
        SessionStore,
        WorkflowCheckpoint,
    )
    from session_runtime.store.file import FileSessionStore
    from session_runtime.store.memory import MemorySessionStore
    from session_runtime.tools.base import ToolCall, ToolContext, ToolExecutor, ToolResult

#: Public name → the module that defines it. Imported on first use (PEP 562), so a process that
#: needs one corner (``berth-worker`` runs tools and never the agent loop or the OpenAI client)
#: does not pay for the rest at start.
_LAZY: dict[str, str] = {
    "Agent": "session_runtime.agent",
    "AgentClosedError": "session_runtime.errors",
    "AgentEvent": "session_runtime.events",
    "AgentResult": "session_runtime.agent",
    "BtwResult": "session_runtime.agent",
    "BudgetExhaustedError": "session_runtime.errors",
    "BudgetGuard": "session_runtime.agent",
    "CheckpointError": "session_runtime.errors",
    "CircuitOpenError": "session_runtime.errors",
    "ConfigError": "session_runtime.errors",
    "ExternalTask": "session_runtime.lanes.external",
    "ExternalTaskResult": "session_runtime.lanes.external",
    "FencedError": "session_runtime.errors",
    "FileSessionStore": "session_runtime.store.file",
    "FixedClock": "session_runtime.hostenv",
    "HostEnv": "session_runtime.hostenv",
    "LaneHandlerConfig": "session_runtime.lanes.config",
    "LimitExceededError": "session_runtime.errors",
    "LlmError": "session_runtime.errors",
    "LoopCheckpoint": "session_runtime.store.base",
    "MaxToolRoundsError": "session_runtime.errors",
    "MemorySessionStore": "session_runtime.store.memory",
    "ParseRetriesExceededError": "session_runtime.errors",
    "PendingRound": "session_runtime.store.base",
    "PriorityBoostConfig": "session_runtime.lanes.config",
    "RateLimitConfig": "session_runtime.lanes.config",
    "ResumeError": "session_runtime.errors",
    "RetryPolicyConfig": "session_runtime.lanes.config",
    "RunCancelledError": "session_runtime.errors",
    "RunPassivatedError": "session_runtime.errors",
    "SequentialIdGenerator": "session_runtime.hostenv",
    "Session": "session_runtime.agent",
    "SessionBusyError": "session_runtime.errors",
    "SessionClosedError": "session_runtime.errors",
    "SessionNotFoundError": "session_runtime.errors",
    "SessionOptions": "session_runtime.agent",
    "SessionQueueConfig": "session_runtime.lanes.config",
    "SessionRetentionLimits": "session_runtime.agent",
    "SessionRuntimeError": "session_runtime.errors",
    "SessionStore": "session_runtime.store.base",
    "StoreError": "session_runtime.errors",
    "SystemClock": "session_runtime.hostenv",
    "TokenBudgetGuard": "session_runtime.agent",
    "ToolCall": "session_runtime.tools.base",
    "ToolContext": "session_runtime.tools.base",
    "ToolExecutor": "session_runtime.tools.base",
    "ToolResult": "session_runtime.tools.base",
    "WorkflowCheckpoint": "session_runtime.store.base",
}


def __getattr__(name: str) -> Any:
    """Import a public name from its module on first use (PEP 562). Raises AttributeError for
    names the package does not export."""
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'session_runtime' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


__all__ = [
    "Agent",
    "AgentClosedError",
    "AgentEvent",
    "AgentResult",
    "BtwResult",
    "BudgetExhaustedError",
    "BudgetGuard",
    "CheckpointError",
    "CircuitOpenError",
    "ConfigError",
    "ExternalTask",
    "ExternalTaskResult",
    "FencedError",
    "FileSessionStore",
    "FixedClock",
    "HostEnv",
    "LaneHandlerConfig",
    "LimitExceededError",
    "LlmError",
    "LoopCheckpoint",
    "MaxToolRoundsError",
    "MemorySessionStore",
    "ParseRetriesExceededError",
    "PendingRound",
    "PriorityBoostConfig",
    "RateLimitConfig",
    "ResumeError",
    "RetryPolicyConfig",
    "RunCancelledError",
    "RunPassivatedError",
    "SequentialIdGenerator",
    "Session",
    "SessionBusyError",
    "SessionClosedError",
    "SessionNotFoundError",
    "SessionOptions",
    "SessionQueueConfig",
    "SessionRetentionLimits",
    "SessionRuntimeError",
    "SessionStore",
    "StoreError",
    "SystemClock",
    "TokenBudgetGuard",
    "ToolCall",
    "ToolContext",
    "ToolExecutor",
    "ToolResult",
    "WorkflowCheckpoint",
]
