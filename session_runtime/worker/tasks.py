"""What a worker checks on a task and how it answers one: the outcome labels, the reply, the
rejections, the size limit and the session's own workspace a task runs in."""

from __future__ import annotations

import os
import time

from berth_contract import names
from session_runtime.transport.codec import ReplyMessage, TaskMessage

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
