"""Entry points of the pod processes, ``berth-session`` and ``berth-worker``: each takes stop
signals from its first instruction (:func:`session_runtime.early_signals.catch`: PID 1 of a
container drops a SIGTERM it has no handler for), then imports and runs the real ``main``.

This module imports nothing heavy: the imports of the runtime are what the early handler covers.
"""

from __future__ import annotations

from session_runtime import early_signals, listen


def session() -> None:
    """Console script ``berth-session`` (:func:`session_runtime.server.main`)."""
    early_signals.catch()
    from session_runtime.server import main

    main()


def worker() -> int:
    """Console script ``berth-worker`` (:func:`session_runtime.worker.main`); its exit code.
    The metrics port (the readiness probe's) listens before the imports
    (:func:`session_runtime.listen.worker_metrics_from_env`)."""
    early_signals.catch()
    listener = listen.worker_metrics_from_env()
    from session_runtime.worker import main

    return main(listener=listener)
