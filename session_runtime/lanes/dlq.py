"""Dead-letter queue of the lane queue: commands that failed for good.

Owned by ``session_runtime.lanes``; filled by the queue when a command fails and no retry is left,
read through ``LaneQueue.dead_letters()`` (A3S ``session.dead_letters()``). Entry fields follow
the A3S contract: ``command_id, command_type, lane, error, attempts, failed_at`` (epoch ms).
Bounded: the oldest entry is dropped when ``max_size`` is reached (A3S default 1000).
"""

from __future__ import annotations

from collections import deque
from dataclasses import asdict, dataclass
from typing import Any

from session_runtime.tools.base import Lane


@dataclass(frozen=True, slots=True)
class DeadLetter:
    """One dead-lettered command. ``command_id`` is the tool call id; ``failed_at`` epoch ms."""

    command_id: str
    command_type: str
    lane: Lane
    error: str
    attempts: int
    failed_at: int

    def to_dict(self) -> dict[str, Any]:
        """The entry as a dict of the A3S dead-letter fields (as ``dead_letters()`` returns)."""
        return asdict(self)


class DeadLetterQueue:
    """A FIFO of at most ``max_size`` :class:`DeadLetter` entries."""

    def __init__(self, max_size: int) -> None:
        self._entries: deque[DeadLetter] = deque(maxlen=max_size)
        self.dropped = 0

    def push(self, entry: DeadLetter) -> None:
        """Append ``entry``; when full, the oldest entry is dropped and counted in ``dropped``."""
        if self._entries.maxlen is not None and len(self._entries) == self._entries.maxlen:
            self.dropped += 1
        self._entries.append(entry)

    def entries(self) -> list[dict[str, Any]]:
        """Entries oldest first, as dicts."""
        return [e.to_dict() for e in self._entries]

    def __len__(self) -> int:
        return len(self._entries)
