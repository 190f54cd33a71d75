"""The worker process: the ``/metrics`` server, :func:`serve` (a worker with its signal handling
and metrics server) and :func:`main` (``berth-worker``)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
import threading
from collections.abc import Sequence
from http.server import ThreadingHTTPServer
from typing import Any

from prometheus_client import CollectorRegistry, MetricsHandler
from redis.asyncio import Redis

from berth_contract import envvars
from berth_contract import tracing as names
from berth_telemetry import logs, tracing
from session_runtime import early_signals, listen
from session_runtime.store.fscheck import FilesystemCheckError, check_volume
from session_runtime.tools import sandbox
from session_runtime.transport.connect import connect
from session_runtime.worker.lane import LaneWorker
from session_runtime.worker.metrics import WorkerMetrics
from session_runtime.worker.settings import WorkerSettings

log = logging.getLogger("berth.worker")

#: The kubelet's default ``terminationMessagePath`` (worker containers keep it).
TERMINATION_LOG = "/dev/termination-log"


class MetricsServer(ThreadingHTTPServer):
    """prometheus-client's ``/metrics`` handler over a socket bound already (possibly long
    before: ``session_runtime.listen``), served from a daemon thread. A client that gave up
    while its request waited in the backlog (a readiness probe past its timeout) is not an
    error worth a traceback."""

    def __init__(self, sock: socket.socket, registry: CollectorRegistry) -> None:
        super().__init__(
            sock.getsockname()[:2], MetricsHandler.factory(registry), bind_and_activate=False
        )
        self.socket.close()
        self.socket = sock
        self.serving = False

    def handle_error(self, request: Any, client_address: Any) -> None:
        """Log a failed request at debug level, instead of ``socketserver``'s traceback."""
        log.debug("metrics request from %s failed", client_address, exc_info=True)

    def start(self) -> None:
        """Serve from a daemon thread until :meth:`stop`."""
        self.serving = True
        threading.Thread(target=self.serve_forever, name="metrics", daemon=True).start()

    def stop(self) -> None:
        """Stop serving (when :meth:`start` was called) and close the socket."""
        if self.serving:
            self.shutdown()  # waits for serve_forever, which only a started server runs
        self.server_close()


async def serve(settings: WorkerSettings, listener: socket.socket | None = None) -> None:
    """Run a worker with signal handling and the metrics server until SIGTERM/SIGINT.
    ``listener``: the metrics socket, bound already (else bound here). It listens from the
    start, and is answered from the moment the worker joined its consumer group: the
    readiness probe's connection waits for that instead of being refused."""
    redis: Redis[Any] = connect(settings.redis_url)
    metrics = WorkerMetrics()
    server: MetricsServer | None = None
    if settings.metrics_port > 0:
        server = MetricsServer(
            listener or listen.listen(settings.pod_ip, settings.metrics_port), metrics.registry
        )
    elif listener is not None:
        listener.close()
    worker = LaneWorker(settings, redis, metrics=metrics)
    loop = asyncio.get_running_loop()
    for sig in early_signals.STOP_SIGNALS:
        loop.add_signal_handler(sig, worker.stop)
    if early_signals.take() is not None:  # came while the worker started
        worker.stop()
    log.info(
        "serving %s as %s (concurrency %d, workspaces under %s)",
        settings.task_stream,
        settings.pod_name,
        settings.concurrency,
        settings.workspaces_root,
    )
    try:
        await worker.run(ready=server.start if server is not None else None)
    finally:
        client: Any = redis  # aclose() is newer than the redis stubs
        await client.aclose()
        if server is not None:
            server.stop()


def main(argv: Sequence[str] | None = None, listener: socket.socket | None = None) -> int:
    """Run a LaneWorker (``berth-worker``, via ``session_runtime.launch``); returns the exit
    code (0 after a clean stop). ``listener``: the metrics socket, bound before the imports."""
    logs.configure(os.environ.get(envvars.LOG_LEVEL, "INFO"))
    settings = WorkerSettings.from_env(argv=argv)
    tracing.configure(
        "berth-worker",
        {
            "k8s.namespace.name": settings.namespace,
            "k8s.pod.name": settings.pod_name,
            names.NODE: os.environ.get(envvars.NODE_NAME),
            names.LANEWORKER: settings.laneworker,
        },
    )
    try:
        mode = sandbox.sandbox_mode()
    except sandbox.SandboxError as exc:
        return _refuse(str(exc), 2)
    refusal = sandbox.startup_refusal(mode, sandbox.landlock_abi(), os.environ.get("NODE_NAME"))
    if refusal is not None:
        return _refuse(refusal, 1)
    try:  # the shared volume keeps the promises tools and the store rely on
        check_volume(settings.workspaces_root)
    except FilesystemCheckError as exc:
        return _refuse(str(exc), 1)
    asyncio.run(serve(settings, listener))
    return 0


def _refuse(message: str, code: int) -> int:
    """Start-up refusal (no Landlock with ``BERTH_TOOL_SANDBOX=required``, or a bad value of
    it): the message goes to stderr and to the container's termination log
    (:data:`TERMINATION_LOG`, the kubelet's default ``terminationMessagePath``), where the
    operator finds it; returns ``code``, the exit code."""
    log.error("%s", message)
    with contextlib.suppress(OSError), open(TERMINATION_LOG, "w", encoding="utf-8") as f:
        f.write(message)
    return code
