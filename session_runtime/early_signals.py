"""Stop signals that arrive before an event loop can take them.

As PID 1 of its PID namespace (a container's process, unless the pod shares its PID namespace),
a process gets no default action for a signal it has no handler for: the kernel drops it. Without
this module that was a pod's whole start-up (the interpreter importing the runtime: about half a
second of CPU, seconds on a busy node) and the moment between one event loop and the next (a warm
pod's server and the adopted session's). A pod deleted then ran on until the kubelet killed it at
the end of its grace period (``terminationGracePeriodSeconds``: the passivation deadline plus
slack, 135 s by default), and ``kubectl drain``, a namespace's deletion or a warm pool's
scale-down waited all that time. The operator's pods also share their PID namespace with pause
(``berth_operator.builders.security.SHARE_PROCESS_NAMESPACE``), so a signal that comes even before
:func:`catch` ends the process by the default action; one that comes after it ends the process the
way a signal during the run does (a warm pod exits 0, a session pod passivates before its run).

:func:`catch` installs a handler that only remembers the signal. An event loop's own handlers
(``loop.add_signal_handler``) replace it; whoever installs them calls :func:`take` and acts on a
signal that came before as if it had just arrived. The entry points (``session_runtime.launch``)
call :func:`catch` before they import anything else.
"""

from __future__ import annotations

import signal
from types import FrameType
from typing import Final

STOP_SIGNALS: Final = (signal.SIGTERM, signal.SIGINT)
"""The signals that stop a pod's process: SIGTERM (the kubelet) and SIGINT (a terminal)."""

_pending: list[signal.Signals] = []


def catch() -> None:
    """Remember :data:`STOP_SIGNALS` from now on, until an event loop's handlers replace this
    one. Call it first thing in a process, and again once an event loop has closed (closing
    removes the loop's handlers and restores the default action, which PID 1 does not have)."""
    for sig in STOP_SIGNALS:
        signal.signal(sig, _remember)


def _remember(signum: int, _frame: FrameType | None) -> None:
    _pending.append(signal.Signals(signum))


def take() -> signal.Signals | None:
    """The first stop signal remembered since the last call (None when none came); the
    remembered ones are forgotten."""
    first = _pending[0] if _pending else None
    _pending.clear()
    return first


__all__ = ["STOP_SIGNALS", "catch", "take"]
