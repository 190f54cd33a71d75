"""The chart's bundled Redis as a local process, for tests that restart it.

Debian's ``redis-server`` runs the redis.conf and ACL file the chart renders (``helm template``,
persistence on by default: ``appendonly yes``); :meth:`ChartRedis.restart` stops it as the
kubelet stops its pod (SIGTERM) and starts it again on the same data directory, as the pod is
started again on its claim.
"""

from __future__ import annotations

import signal
import socket
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from redis.asyncio import Redis

from tests.unit.chart.test_redis_acl import PASSWORDS, chart_files, start_redis, wait_listening


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class ChartRedis:
    """The chart's Redis on ``port`` with its data in ``tmp``; ``restart()`` stops it with
    SIGTERM (as the kubelet does) and starts it on the same files."""

    def __init__(self, files: dict[str, str], tmp: Path) -> None:
        self.files, self.tmp, self.port = files, tmp, free_port()
        self.proc = self._start()

    def _start(self) -> subprocess.Popen[bytes]:
        proc = start_redis(self.files, self.tmp, "--port", str(self.port))
        wait_listening(proc, self.port, self.tmp)
        return proc

    def restart(self) -> None:
        self.stop()
        self.proc = self._start()

    def stop(self) -> None:
        self.proc.send_signal(signal.SIGTERM)
        assert self.proc.wait(timeout=30) == 0, (self.tmp / "redis.log").read_text()

    def operator(self) -> Redis[Any]:
        return Redis(port=self.port, username="berth-operator", password=PASSWORDS["operator"])


@pytest.fixture
def chart_redis(tmp_path: Path) -> Iterator[ChartRedis]:
    server = ChartRedis(chart_files(), tmp_path)
    yield server
    if server.proc.poll() is None:
        server.stop()
