"""The lane-queue part of the session API (A3S ``set_lane_handler``, ``pending_external_tasks``,
``complete_external_task``, ``queue_stats``, ``queue_metrics``, ``dead_letters``).

Owned by ``session_runtime.agent``; mixed into ``Session``. Each call goes to the session's
executor when it has the method (the ``LaneQueue``, sync or async methods both work); without a
queue the contract says there is no queue, so the calls return neutral values.
"""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Coroutine
from typing import Any, TypeVar

from session_runtime.lanes.external import ExternalTaskResult, completion_of
from session_runtime.tools.base import ToolExecutor

T = TypeVar("T")

EMPTY_STATS: dict[str, Any] = {
    "total_pending": 0,
    "total_active": 0,
    "external_pending": 0,
    "lanes": {},
}


async def _await(value: Awaitable[T]) -> T:
    return await value


class QueueApi:
    """Mixin; the host class provides ``_executor`` and ``_sync(coro)``."""

    _executor: ToolExecutor

    def _sync(self, coro: Coroutine[Any, Any, T]) -> T:
        raise NotImplementedError

    @property
    def executor(self) -> ToolExecutor:
        """The executor in use (direct, lane queue, or injected by the host)."""
        return self._executor

    def _queue_call(self, name: str, *args: Any) -> tuple[bool, Any]:
        fn = getattr(self._executor, name, None)
        if fn is None:
            return False, None
        return True, fn(*args)

    async def _queue_async(self, name: str, *args: Any) -> tuple[bool, Any]:
        found, value = self._queue_call(name, *args)
        if inspect.isawaitable(value):
            value = await value
        return found, value

    def _queue_sync(self, name: str, *args: Any) -> tuple[bool, Any]:
        found, value = self._queue_call(name, *args)
        if inspect.isawaitable(value):
            value = self._sync(_await(value))
        return found, value

    def set_lane_handler(self, lane: str, mode: str, timeout_ms: int | None = None) -> None:
        """Set a lane's handler mode (internal | external | hybrid) and timeout (ms) at run time.
        No-op without a queue. Errors of the queue (ConfigError for a bad lane/mode) propagate."""
        self._queue_sync("set_lane_handler", lane, mode, timeout_ms)

    async def set_lane_handler_async(
        self, lane: str, mode: str, timeout_ms: int | None = None
    ) -> None:
        """Async twin of :meth:`set_lane_handler`."""
        await self._queue_async("set_lane_handler", lane, mode, timeout_ms)

    def pending_external_tasks(self) -> list[dict[str, Any]]:
        """External tasks waiting for completion (A3S ExternalTask dicts; [] without a queue)."""
        found, value = self._queue_sync("pending_external_tasks")
        return list(value) if found and value is not None else []

    async def pending_external_tasks_async(self) -> list[dict[str, Any]]:
        """Async twin of :meth:`pending_external_tasks`."""
        found, value = await self._queue_async("pending_external_tasks")
        return list(value) if found and value is not None else []

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
        found, value = self._queue_sync("complete_external_task", task_id, done)
        return bool(value) if found else False

    async def complete_external_task_async(
        self,
        task_id: str,
        success: bool | ExternalTaskResult | dict[str, Any],
        result: Any = None,
        error: str | None = None,
    ) -> bool:
        """Async twin of :meth:`complete_external_task`."""
        done = completion_of(success, result, error)
        found, value = await self._queue_async("complete_external_task", task_id, done)
        return bool(value) if found else False

    def queue_stats(self) -> dict[str, Any]:
        """``{total_pending, total_active, external_pending, lanes}`` (zeros without a queue)."""
        found, value = self._queue_sync("queue_stats")
        return dict(value) if found and value is not None else dict(EMPTY_STATS)

    def queue_metrics(self) -> dict[str, Any] | None:
        """The queue's metrics snapshot, or None (no queue, or metrics off)."""
        found, value = self._queue_sync("queue_metrics")
        return dict(value) if found and value is not None else None

    def dead_letters(self) -> list[dict[str, Any]]:
        """Dead-lettered commands ([] without a queue or DLQ)."""
        found, value = self._queue_sync("dead_letters")
        return list(value) if found and value is not None else []
