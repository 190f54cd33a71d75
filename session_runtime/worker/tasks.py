"""What a worker checks on a task and how it answers one: the outcome labels, the reply, the
rejections, the size limit, the session's own workspace a task runs in and the span of its
execution."""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from contextlib import contextmanager

from opentelemetry import trace
from opentelemetry.trace import SpanKind

from berth_contract import names
from berth_contract import tracing as attrs
from berth_telemetry import logs
from berth_telemetry.tracing import extract
from session_runtime.tracing import active
from session_runtime.transport.codec import ReplyMessage, TaskMessage

tracer = trace.get_tracer("berth.worker")

OUTCOMES = ("ok", "tool_error", "timeout", "expired", "refused", "malformed", "lost", "error")
WORKER_LOST = "worker lost"


def now_ms() -> int:
    """Wall-clock time in epoch milliseconds (the task and reply messages' time unit)."""
    return int(time.time() * 1000)


def task_reply(
    task: TaskMessage,
    worker: str,
    started_ms: int,
    success: bool,
    output: str = "",
    exit_code: int = 0,
    is_error: bool = False,
    *,
    error: str = "",
) -> ReplyMessage:
    """The reply to ``task`` from ``worker`` (epoch-ms times; a failure carries ``error``)."""
    result = {"output": output, "exit_code": exit_code, "is_error": is_error}
    return ReplyMessage(
        task_id=task.task_id,
        tool_call_id=task.tool_call_id,
        success=success,
        result=result if success else {},
        error=error,
        worker=worker,
        started_ms=started_ms,
        ended_ms=now_ms(),
    )


class WorkspaceRefused(ValueError):
    """The task's workspace cannot be built inside its own session's workspace root."""


class TaskRejected(ValueError):
    """A task that must not run and must not be answered; ``reason`` is a metric label."""

    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(detail)
        self.reason = reason


#: Largest task entry accepted, in bytes of field names and values (a bigger one is rejected).
MAX_TASK_BYTES = 1024 * 1024
REJECT_REASONS = ("mac", "namespace", "reply_to", "oversize", "duplicate")


def resolve_workspace(workspaces_root: str, namespace: str, session: str, relative: str) -> str:
    """``<workspaces_root>/<namespace>/<session>/<relative>``, checked: the session's own
    directory by construction. ``relative`` is ``.`` or a relative path without ``..``.

    Raises :class:`WorkspaceRefused` for an absolute or escaping ``relative``, a NUL byte, a
    missing directory, or any symlink from the session's root down (a swapped-in link could lead
    elsewhere; directories are opened with ``O_NOFOLLOW`` component by component).
    """
    if "\x00" in relative:
        raise WorkspaceRefused("workspace path contains a NUL byte")
    parts = [p for p in relative.split("/") if p not in ("", ".")]
    if relative.startswith("/") or ".." in parts:
        raise WorkspaceRefused(f"workspace {relative!r} leaves the session's workspace; refused")
    names.namespace(namespace)
    path = os.path.realpath(workspaces_root)
    flags = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        for part in (namespace, session, *parts):
            try:
                nxt = os.open(part, flags, dir_fd=fd)
            except OSError:
                raise WorkspaceRefused(
                    f"workspace {relative!r} of session {namespace}/{session} is not a directory "
                    "(missing, or a symlink)"
                ) from None
            os.close(fd)
            fd = nxt
            path = os.path.join(path, part)
    finally:
        os.close(fd)
    return path


@contextmanager
def execution_span(task: TaskMessage) -> Iterator[None]:
    """The span of running an admitted ``task`` (kind CONSUMER): a child of the tool-call span
    named by the task's W3C trace context (a new trace without one). The session, epoch, run and
    identity labels on it, and on the block's log records, come from the task's own fields, which
    the session's MAC covers: a trace context never says which session a task is for."""
    logs.bind(session=task.session, epoch=task.epoch, run_id=task.run_id)
    parent = extract({"traceparent": task.traceparent, "tracestate": task.tracestate})
    span = tracer.start_span(
        f"execute_tool {task.command_type}",
        parent,
        kind=SpanKind.CONSUMER,
        attributes={
            attrs.SESSION: task.session,
            attrs.SESSION_UID: task.session_uid,
            attrs.EPOCH: task.epoch,
            attrs.RUN_ID: task.run_id,
            attrs.LANE: task.lane,
            attrs.TASK_ID: task.task_id,
            "gen_ai.operation.name": "execute_tool",
            "gen_ai.tool.name": task.command_type,
            "gen_ai.tool.call.id": task.tool_call_id,
            **attrs.identity_attributes(dict(task.labels)),
        },
    )
    with active(span):
        yield
