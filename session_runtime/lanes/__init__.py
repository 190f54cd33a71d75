"""The session lane queue (A3S lane-queue contract, docs/architecture.md §7).

Public names: :class:`LaneQueue` (a ``ToolExecutor``), :class:`SessionQueueConfig` and its parts,
:class:`ExternalTask` / :class:`ExternalReply` and the :class:`ExternalTransport` seam that
``session_runtime.transport`` implements over Redis Streams.
"""

from typing import TYPE_CHECKING

from session_runtime import lazy
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

if TYPE_CHECKING:
    from session_runtime.lanes.queue import EXTERNAL_FAILED, LaneQueue

# the queue (and the tools it runs) on first use: processes that need only lane names skip it
__getattr__ = lazy.exports(
    __name__,
    {"EXTERNAL_FAILED": "session_runtime.lanes.queue", "LaneQueue": "session_runtime.lanes.queue"},
)

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
