"""Lane-task transport over Redis Streams (docs/architecture.md §7).

- :mod:`~berth_contract.names`: stream and key names;
- :mod:`~session_runtime.transport.codec`: task/reply messages, validated with pydantic;
- :class:`RedisTaskTransport`: the session side, an ``ExternalTransport`` for ``LaneQueue``;
- :func:`stream_pressure`: lag + pending of a LaneWorker pool, for the autoscaler;
  :func:`await_new_entries`: its wake-up when tasks land after :func:`last_entry_id`.

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
from session_runtime.transport.pressure import await_new_entries, last_entry_id, stream_pressure

if TYPE_CHECKING:
    from session_runtime.transport.client import RedisTaskTransport

# the session side's client on first use: it brings in the lane queue, which users of the names
# and of stream_pressure alone (the operator) never need
__getattr__ = lazy.exports(__name__, {"RedisTaskTransport": "session_runtime.transport.client"})

__all__ = [
    "GROUP",
    "MalformedMessage",
    "RedisTaskTransport",
    "ReplyMessage",
    "TaskMessage",
    "alive_key",
    "await_new_entries",
    "dead_letter_stream",
    "last_entry_id",
    "parse_reply_stream",
    "reply_stream",
    "stream_pressure",
    "task_stream",
]
