"""Resuming the run a placement names (``BERTH_RESUME_RUN_ID``, docs/architecture.md §8).

Owned by the ``berth-session`` entrypoint; :class:`~session_runtime.pod.lifecycle.SessionPod`
starts it as the pod's run when :func:`~session_runtime.pod.start.plan_start` says ``resume``.
"""

from __future__ import annotations

import logging

from session_runtime.agent.results import AgentResult
from session_runtime.agent.session import Session
from session_runtime.errors import ResumeError

log = logging.getLogger("berth.session")


async def resume_or_restart(session: Session, run_id: str, prompt: str) -> AgentResult:
    """``resume_run(run_id)``; without any checkpoint of that run the task starts afresh.

    :func:`~session_runtime.pod.start.plan_start` only names such a run when no run of its resume
    lineage has a checkpoint (the first pod died before the run's first commit, so no tool can
    have run). A run a message started is started afresh from that message (same prompt and
    message id, A3S ``send`` with ``message_id``), else from ``prompt`` (the session's task).
    Errors other than ResumeError propagate.
    """
    try:
        return await session.resume_run_async(run_id)
    except ResumeError as exc:
        record = session.run_snapshot(run_id) or {}
        message_id = record.get("message_id")
        if message_id:
            log.warning("%s: starting message %s afresh", exc, message_id)
            return await session.send_async(
                str(record.get("prompt") or prompt),
                message_id=str(message_id),
                invoked_by=record.get("invoked_by"),
            )
        log.warning("%s: starting the task afresh", exc)
        return await session.send_async(prompt)
