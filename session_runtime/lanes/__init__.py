"""The session lane queue (A3S lane-queue contract, ARCHITECTURE §7).

Public names: :class:`LaneQueue` (a ``ToolExecutor``), :class:`SessionQueueConfig` and its parts,
:class:`ExternalTask` / :class:`ExternalReply` and the :class:`ExternalTransport` seam that
``session_runtime.transport`` implements over Redis Streams.
"""

from session_runtime.lanes.config import (
    LANE_PRIORITY,
    LANES,
    HandlerMode,
    LaneHandlerConfig,
    PriorityBoostConfig,
    RateLimitConfig,
    RetryPolicyConfig,
    SessionQueueConfig,
)
from session_runtime.lanes.external import ExternalReply, ExternalTask, ExternalTransport
from session_runtime.lanes.queue import EXTERNAL_FAILED, LaneQueue

__all__ = [
    "EXTERNAL_FAILED",
    "LANES",
    "LANE_PRIORITY",
    "ExternalReply",
    "ExternalTask",
    "ExternalTransport",
    "HandlerMode",
    "LaneHandlerConfig",
    "LaneQueue",
    "PriorityBoostConfig",
    "RateLimitConfig",
    "RetryPolicyConfig",
    "SessionQueueConfig",
]
