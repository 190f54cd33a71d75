"""Fixtures for the lane transport tests: a private ``redis-server`` and ``berth-worker`` processes.

``redis_url`` starts Debian's ``redis-server`` on a free loopback port in a temporary directory
(``--save "" --appendonly no``) once per module and stops it afterwards; no system service is
used. ``workers`` starts real ``berth-worker`` processes (``python -m session_runtime.worker``)
configured only through env, and stops (or kills) them at teardown. Tests are skipped when no
``redis-server`` binary exists.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
from redis.asyncio import Redis

from session_runtime.transport.connect import connect
from tests.unit.runtime.pod.test_early_signals import as_pid_1

REPO = Path(__file__).resolve().parents[3]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def private_tmp() -> Iterator[Path]:
    """A temp dir of our own (pytest's shared basetemp rotation may remove ``tmp_path`` while
    worker processes of a long test still use it when several pytest runs share a machine)."""
    path = Path(tempfile.mkdtemp(prefix="berth-lanes-"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture(scope="module")
def redis_url() -> Iterator[str]:
    binary = shutil.which("redis-server")
    if binary is None:
        pytest.skip("redis-server is not installed")
    port = free_port()
    workdir = Path(tempfile.mkdtemp(prefix="berth-redis-"))
    proc = subprocess.Popen(
        [
            binary,
            "--port",
            str(port),
            "--bind",
            "127.0.0.1",
            "--save",
            "",
            "--appendonly",
            "no",
            "--dir",
            str(workdir),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 20
    while True:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.2) as conn:
                conn.sendall(b"PING\r\n")
                if conn.recv(16).startswith(b"+PONG"):
                    break
        except OSError:
            pass
        if proc.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError("redis-server did not start")
        time.sleep(0.05)
    yield f"redis://127.0.0.1:{port}/0"
    proc.terminate()
    proc.wait(timeout=10)
    shutil.rmtree(workdir, ignore_errors=True)


@pytest.fixture
async def redis(redis_url: str) -> AsyncIterator[Redis[Any]]:
    client: Redis[Any] = connect(redis_url)
    yield client
    closer: Any = client
    await closer.aclose()


MASTER = b"test-master-key-of-32-bytes-xxxx"
"""The namespace master key the test workers hold (``berth-task-key`` in a cluster)."""


@pytest.fixture
def shared_root(private_tmp: Path) -> Path:
    root = private_tmp / "shared"
    (root / "workspaces").mkdir(parents=True)
    (private_tmp / "master").write_bytes(MASTER)
    return root


class Workers:
    """Starts and stops ``berth-worker`` processes of one LaneWorker pool."""

    def __init__(self, redis_url: str, namespace: str, laneworker: str, shared_root: Path) -> None:
        self.redis_url = redis_url
        self.namespace = namespace
        self.laneworker = laneworker
        self.shared_root = shared_root
        self.procs: dict[str, subprocess.Popen[bytes]] = {}
        self.logs: dict[str, Path] = {}

    def start(
        self,
        name: str,
        concurrency: int = 1,
        metrics_port: int = 0,
        pid_1: bool = False,
        **env: str,
    ) -> int:
        """Start worker ``name``; its pid. ``pid_1``: the installed ``berth-worker`` as PID 1 of
        a new PID namespace, as in a container (``self.procs[name]`` is then the ``unshare``
        process and the pid returned the worker's own)."""
        log = self.shared_root.parent / f"{name}.log"
        (self.shared_root / "workspaces").mkdir(exist_ok=True)
        (self.shared_root.parent / "master").write_bytes(MASTER)
        full = {
            **os.environ,
            "PYTHONPATH": str(REPO),
            "BERTH_REDIS_URL": self.redis_url,
            "BERTH_NAMESPACE": self.namespace,
            "BERTH_LANEWORKER": self.laneworker,
            "POD_NAME": name,
            "POD_IP": "127.0.0.1",
            "BERTH_WORKER_CONCURRENCY": str(concurrency),
            "BERTH_WORKSPACES_ROOT": str(self.shared_root / "workspaces"),
            "BERTH_TASK_MASTER_KEY_FILE": str(self.shared_root.parent / "master"),
            "BERTH_TASK_TIMEOUT_SECONDS": "60",
            "BERTH_METRICS_PORT": str(metrics_port),
            "BERTH_WORKER_HEARTBEAT_SECONDS": "1",
            "BERTH_RECLAIM_INTERVAL_SECONDS": "0.2",
            # What a worker image's PATH looks like: tools run under Landlock with only the
            # system directories and the Python prefix visible, so a developer's PATH entries
            # under $HOME (a pyenv shim for ``python3``) cannot run there.
            "PATH": os.pathsep.join((str(Path(sys.executable).parent), "/usr/bin", "/bin")),
            **env,
        }
        self.logs[name] = log
        if pid_1:
            script = str(Path(sys.executable).parent / "berth-worker")
            with log.open("wb") as err:
                self.procs[name], pid = as_pid_1([script], full, stderr=err)
            return pid
        self.procs[name] = subprocess.Popen(
            [sys.executable, "-m", "session_runtime.worker"],
            env=full,
            cwd=str(REPO),
            stdout=subprocess.DEVNULL,
            stderr=log.open("wb"),
        )
        return self.procs[name].pid

    def signal(self, name: str, sig: int) -> None:
        self.procs[name].send_signal(sig)

    def log(self, name: str) -> str:
        return self.logs[name].read_text(errors="replace")

    def stop_all(self) -> None:
        for proc in self.procs.values():
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        for proc in self.procs.values():
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        for name in self.procs:  # shown by pytest for failed tests only
            sys.stderr.write(f"--- log of worker {name} ---\n{self.log(name)[-3000:]}\n")


@pytest.fixture
def workers_factory(redis_url: str, shared_root: Path) -> Iterator[Any]:
    made: list[Workers] = []

    def make(namespace: str, laneworker: str) -> Workers:
        w = Workers(redis_url, namespace, laneworker, shared_root)
        made.append(w)
        return w

    yield make
    for w in made:
        w.stop_all()
