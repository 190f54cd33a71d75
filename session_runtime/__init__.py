"""Berth's session runtime: the A3S Code session contract in Python (RUNTIME-CONTRACT.md).

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
