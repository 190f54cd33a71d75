"""Metered wrappers of the session's store and budget guard (the session pod's metrics).

Owned by the ``berth-session`` entrypoint (``session_runtime.server``): it wraps the file store in
:class:`MeteredStore` and installs :class:`MeteredBudgetGuard` for ``spec.budget``. Both keep the
core's contracts (``SessionStore``, A3S ``BudgetGuard``) and only add metrics and the fencing
notice.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, TypeVar

from berth_contract.options import BudgetOptions
from session_runtime.agent.budget import TokenBudgetGuard
from session_runtime.errors import FencedError
from session_runtime.metrics import SessionMetrics
from session_runtime.store.base import (
    LoopCheckpoint,
    PendingRound,
    SessionStore,
    WorkflowCheckpoint,
)

T = TypeVar("T")


class MeteredStore:
    """Wraps the session store: times ``commit_round``, counts rounds, notices fencing.

    Implements ``SessionStore`` by calling the wrapped store. ``commit_round`` feeds
    ``berth_session_checkpoint_write_seconds`` and, when the checkpoint's ``turn`` moved past the
    last one seen for its run, ``berth_session_rounds_total``. Any ``FencedError`` raised through
    a wrapped method calls ``on_fenced`` before it propagates (the loop may swallow store errors).
    """

    def __init__(
        self,
        inner: SessionStore,
        metrics: SessionMetrics,
        on_fenced: Callable[[FencedError], None],
    ) -> None:
        self._inner = inner
        self._metrics = metrics
        self._on_fenced = on_fenced
        self._turns: dict[str, int] = {}
        #: Rounds the first run this process commits already had (a resumed run's checkpoint
        #: turn), so only rounds done here are counted.
        self.resume_start_turn = 0

    def _call(self, fn: Callable[..., T], *args: Any) -> T:
        try:
            return fn(*args)
        except FencedError as exc:
            self._on_fenced(exc)
            raise

    def save_session(self, session_id: str, data: dict[str, Any]) -> None:
        """``SessionStore.save_session``."""
        self._call(self._inner.save_session, session_id, data)

    def load_session(self, session_id: str) -> dict[str, Any] | None:
        """``SessionStore.load_session``."""
        return self._call(self._inner.load_session, session_id)

    def begin_round(
        self, session_id: str, run_id: str, turn: int, assistant_message: dict[str, Any]
    ) -> None:
        """``SessionStore.begin_round``."""
        self._call(self._inner.begin_round, session_id, run_id, turn, assistant_message)

    def record_tool_result(
        self, session_id: str, run_id: str, turn: int, tool_call_id: str, result: dict[str, Any]
    ) -> None:
        """``SessionStore.record_tool_result``."""
        self._call(self._inner.record_tool_result, session_id, run_id, turn, tool_call_id, result)

    def load_checkpoint(self, session_id: str, run_id: str) -> LoopCheckpoint | None:
        """``SessionStore.load_checkpoint``."""
        return self._call(self._inner.load_checkpoint, session_id, run_id)

    def load_pending_round(self, session_id: str, run_id: str) -> PendingRound | None:
        """``SessionStore.load_pending_round``."""
        return self._call(self._inner.load_pending_round, session_id, run_id)

    def save_workflow_checkpoint(self, session_id: str, checkpoint: WorkflowCheckpoint) -> None:
        """``SessionStore.save_workflow_checkpoint``."""
        self._call(self._inner.save_workflow_checkpoint, session_id, checkpoint)

    def load_workflow_checkpoint(
        self, session_id: str, workflow_id: str
    ) -> WorkflowCheckpoint | None:
        """``SessionStore.load_workflow_checkpoint``."""
        return self._call(self._inner.load_workflow_checkpoint, session_id, workflow_id)

    def delete_workflow_checkpoint(self, session_id: str, workflow_id: str) -> None:
        """``SessionStore.delete_workflow_checkpoint``."""
        self._call(self._inner.delete_workflow_checkpoint, session_id, workflow_id)

    def commit_round(self, checkpoint: LoopCheckpoint) -> None:
        """Time the durable commit, then count the round if ``checkpoint.turn`` advanced."""
        started = time.perf_counter()
        try:
            self._inner.commit_round(checkpoint)
        except FencedError as exc:
            self._on_fenced(exc)
            raise
        self._metrics.checkpoint_write_seconds.observe(time.perf_counter() - started)
        run_id, turn = str(checkpoint.run_id), int(checkpoint.turn)
        if run_id not in self._turns:
            self._turns[run_id], self.resume_start_turn = self.resume_start_turn, 0
        if turn > self._turns[run_id]:
            self._metrics.rounds_total.inc(turn - self._turns[run_id])
            self._turns[run_id] = turn


class MeteredBudgetGuard(TokenBudgetGuard):
    """The core's ``TokenBudgetGuard`` for ``spec.budget`` that also counts tokens per LLM call.

    Always installed (with no limits it allows everything) because its ``record_after_llm`` is
    where ``berth_session_llm_tokens_total`` comes from. The budget spans all runs of the session:
    :meth:`carry` sets what earlier runs and pods already consumed.
    """

    def __init__(self, budget: BudgetOptions, metrics: SessionMetrics) -> None:
        super().__init__(
            max_total_tokens=budget.max_total_tokens,
            max_tool_calls=budget.max_tool_calls,
            soft_limit_percent=budget.soft_limit_percent,
        )
        self._metrics = metrics

    def carry(self, total_tokens: int, tool_calls: int) -> None:
        """Start from ``total_tokens`` tokens and ``tool_calls`` calls already consumed."""
        self.tokens_used = max(self.tokens_used, total_tokens)
        self.tool_calls = max(self.tool_calls, tool_calls)

    def record_after_llm(self, session_id: str, usage: dict[str, int]) -> None:
        """Count the call's tokens in the metrics, then in the budget."""
        self._metrics.observe_llm_usage(usage)
        super().record_after_llm(session_id, usage)
