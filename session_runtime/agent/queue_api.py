"""The lane-queue part of the session API (A3S ``set_lane_handler``, ``pending_external_tasks``,
``complete_external_task``, ``queue_stats``, ``queue_metrics``, ``dead_letters``).

Owned by ``session_runtime.agent``; mixed into ``Session``. Each call goes to the session's
:class:`~session_runtime.lanes.queue.LaneQueue` (built from ``SessionOptions.queue_config`` or
injected as the executor); without a queue the contract says there is no queue, so the calls
return neutral values. The async twins exist because the A3S SDK has them; the queue's methods
are synchronous.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from session_runtime.lanes.external import ExternalTaskResult, completion_of
from session_runtime.tools.base import ToolExecutor

if TYPE_CHECKING:  # the lanes package loads its queue on first use (session_runtime.lazy)
    from session_runtime.lanes.queue import LaneQueue

EMPTY_STATS: dict[str, Any] = {
    "total_pending": 0,
    "total_active": 0,
    "external_pending": 0,
    "lanes": {},
}


class QueueApi:
    """Mixin; the host class sets ``_executor`` and ``_queue`` (None: no lane queue)."""

    _executor: ToolExecutor
    _queue: LaneQueue | None

    @property
    def executor(self) -> ToolExecutor:
        """The executor in use (direct, lane queue, or injected by the host)."""
        return self._executor

    def set_lane_handler(self, lane: str, mode: str, timeout_ms: int | None = None) -> None:
        """Set a lane's handler mode (internal | external | hybrid) and timeout (ms) at run time.
        No-op without a queue. Errors of the queue (ConfigError for a bad lane/mode) propagate."""
        if self._queue is not None:
            self._queue.set_lane_handler(lane, mode, timeout_ms)

    async def set_lane_handler_async(
        self, lane: str, mode: str, timeout_ms: int | None = None
    ) -> None:
        """Async twin of :meth:`set_lane_handler`."""
        self.set_lane_handler(lane, mode, timeout_ms)

    def pending_external_tasks(self) -> list[dict[str, Any]]:
        """External tasks waiting for completion (A3S ExternalTask dicts; [] without a queue)."""
        return [] if self._queue is None else list(self._queue.pending_external_tasks())

    async def pending_external_tasks_async(self) -> list[dict[str, Any]]:
        """Async twin of :meth:`pending_external_tasks`."""
        return self.pending_external_tasks()

    def complete_external_task(
        self,
        task_id: str,
        success: bool | ExternalTaskResult | dict[str, Any],
        result: Any = None,
        error: str | None = None,
    ) -> bool:
        """Deliver an external task's result: ``(task_id, success, result, error)`` with
        ``result`` = ``{output, exit_code}``, or ``(task_id, ExternalTaskResult | its dict)`` as
        the A3S docs write it. False if the task is unknown or there is no queue; TypeError for
        an ambiguous call (see ``lanes.external.completion_of``)."""
        done = completion_of(success, result, error)
        return False if self._queue is None else self._queue.complete_external_task(task_id, done)

    async def complete_external_task_async(
        self,
        task_id: str,
        success: bool | ExternalTaskResult | dict[str, Any],
        result: Any = None,
        error: str | None = None,
    ) -> bool:
        """Async twin of :meth:`complete_external_task`."""
        return self.complete_external_task(task_id, success, result, error)

    def queue_stats(self) -> dict[str, Any]:
        """``{total_pending, total_active, external_pending, lanes}`` (zeros without a queue)."""
        return dict(EMPTY_STATS) if self._queue is None else dict(self._queue.queue_stats())

    def queue_metrics(self) -> dict[str, Any] | None:
        """The queue's metrics snapshot, or None (no queue, or metrics off)."""
        value = None if self._queue is None else self._queue.queue_metrics()
        return None if value is None else dict(value)

    def dead_letters(self) -> list[dict[str, Any]]:
        """Dead-lettered commands ([] without a queue or DLQ)."""
        return [] if self._queue is None else list(self._queue.dead_letters())
