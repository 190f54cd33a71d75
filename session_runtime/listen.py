"""Listening sockets bound before a process imports its runtime.

A pod's readiness probe connects as soon as the kubelet sees the container running. A socket
that listens from the process's first instructions takes that connection into its backlog while
the interpreter is still importing; the server that later serves the socket answers the waiting
probe as soon as it is ready (within the probe's ``timeoutSeconds``) instead of the connection
being refused and the probe tried again a whole ``periodSeconds`` later. Standard library only:
this is imported before anything heavy (``session_runtime.launch``).
"""

from __future__ import annotations

import os
import socket


def listen(host: str, port: int, backlog: int = 128) -> socket.socket:
    """A blocking TCP socket bound to ``(host, port)`` and listening. ``host`` is a numeric
    IPv4 or IPv6 address (no name lookup: no thread is started). Raises OSError (the port is
    taken, the address is not this host's)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
        sock.listen(backlog)
    except OSError:
        sock.close()
        raise
    return sock


def worker_metrics_from_env() -> socket.socket | None:
    """The LaneWorker's metrics socket, bound early: ``BERTH_METRICS_PORT`` (default 9090) on
    ``POD_IP`` (default 127.0.0.1). None when the port is 0 or either value cannot be used here;
    the worker's settings then report a bad value, and a taken port fails when it binds."""
    try:
        port = int(os.environ.get("BERTH_METRICS_PORT", "9090"))
        if not 0 < port < 65536:
            return None
        return listen(os.environ.get("POD_IP", "127.0.0.1"), port)
    except (ValueError, OSError):
        return None
