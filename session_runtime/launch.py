"""Entry points of the pod processes, ``berth-session`` and ``berth-worker``: each takes stop
signals from its first instruction (:func:`session_runtime.early_signals.catch`: PID 1 of a
container drops a SIGTERM it has no handler for), then imports and runs the real ``main``.

This module imports nothing heavy: the imports of the runtime are what the early handler covers.
"""

from __future__ import annotations

from session_runtime import early_signals


def session() -> None:
    """Console script ``berth-session`` (:func:`session_runtime.server.main`)."""
    early_signals.catch()
    from session_runtime.server import main

    main()


def worker() -> int:
    """Console script ``berth-worker`` (:func:`session_runtime.worker.main`); its exit code."""
    early_signals.catch()
    from session_runtime.worker import main

    return main()
