"""Lane-task transport over Redis Streams (docs/architecture.md §7).

- :mod:`~berth_contract.names`: stream and key names;
- :mod:`~session_runtime.transport.codec`: task/reply messages, validated with pydantic;
- :class:`RedisTaskTransport`: the session side, an ``ExternalTransport`` for ``LaneQueue``;

The worker side is ``session_runtime.worker`` (``berth-worker``).
"""

from typing import TYPE_CHECKING

from berth_contract.names import (
    GROUP,
    alive_key,
    dead_letter_stream,
    parse_reply_stream,
    reply_stream,
    task_stream,
)
from session_runtime import lazy
from session_runtime.transport.codec import MalformedMessage, ReplyMessage, TaskMessage

if TYPE_CHECKING:
    from session_runtime.transport.client import RedisTaskTransport

# the session side's client on first use: it brings in the lane queue, which users of the names
# alone (the worker) never need
__getattr__ = lazy.exports(__name__, {"RedisTaskTransport": "session_runtime.transport.client"})

__all__ = [
    "GROUP",
    "MalformedMessage",
    "RedisTaskTransport",
    "ReplyMessage",
    "TaskMessage",
    "alive_key",
    "dead_letter_stream",
    "parse_reply_stream",
    "reply_stream",
    "task_stream",
]
