"""``berth-wait-ready``: block until a local TCP port accepts connections (a postStart hook).

LaneWorker pods have no readiness probe: their container's ``postStart`` exec hook runs this
command, which returns once the worker serves its metrics port — and ``berth-worker`` opens that
port only after it has joined its consumer group and written its liveness key
(``session_runtime.worker.serve``). The kubelet does not report a container as running until its
postStart hook has returned, and a container without a readiness probe is Ready once running
(Kubernetes, "Container hooks" and "Container probes"), so the pod turns Ready the moment the
worker can take tasks — not at the next tick of a probe period. Istio's
``holdApplicationUntilProxyStarts`` uses the same hook.

    berth-wait-ready --port 9090 [--host H] [--timeout-seconds 60] [--interval-seconds 0.05]

``--host`` defaults to ``$POD_IP`` (the worker binds its metrics server there), else 127.0.0.1.
Exit 0 once a connection is accepted; exit 1 with a message on stderr after the timeout (the
kubelet then kills the container and records a ``FailedPostStartHook`` Event with it). Standard
library only: a hook that imported the worker would double its start-up.
"""

from __future__ import annotations

import argparse
import os
import socket
import sys
import time
from collections.abc import Sequence


def accepts(host: str, port: int, timeout: float) -> bool:
    """Whether ``host:port`` accepts a TCP connection within ``timeout`` seconds."""
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return True
    except OSError:
        return False


def wait_until_accepting(host: str, port: int, *, timeout: float, interval: float) -> bool:
    """Try ``host:port`` every ``interval`` seconds until it accepts (True) or ``timeout``
    seconds have passed (False)."""
    deadline = time.monotonic() + timeout
    while True:
        if accepts(host, port, timeout=max(interval, 0.05)):
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(interval)


def main(argv: Sequence[str] | None = None) -> int:
    """Console entry point ``berth-wait-ready``; returns the exit code."""
    parser = argparse.ArgumentParser(prog="berth-wait-ready", description=__doc__.split("\n")[0])
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--host", default=os.environ.get("POD_IP") or "127.0.0.1")
    parser.add_argument("--timeout-seconds", type=float, default=60.0)
    parser.add_argument("--interval-seconds", type=float, default=0.05)
    args = parser.parse_args(argv)
    if wait_until_accepting(
        args.host, args.port, timeout=args.timeout_seconds, interval=args.interval_seconds
    ):
        return 0
    print(
        f"berth-wait-ready: nothing accepted connections on {args.host}:{args.port} within "
        f"{args.timeout_seconds:g} s (the worker opens it once it has joined its consumer group; "
        "see the container's log)",
        file=sys.stderr,
    )
    return 1


if __name__ == "__main__":
    sys.exit(main())
