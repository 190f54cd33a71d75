"""Processes the campaign runs the system under test with: the zygote client and a private
``redis-server`` that faults can restart.

Owned by the chaos harness; used by :mod:`tests.chaos.runner`. Nothing here uses a system service:
Redis is Debian's ``redis-server`` binary, forked by the zygote, on a free loopback port in a
private directory with persistence off (``--save "" --appendonly no``), so a restart loses every
stream, group and key, as a Redis without persistence does.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]


def free_port() -> int:
    """A free loopback TCP port."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Zygote:
    """Client of :mod:`tests.chaos.child` (see its docstring for the protocol). Thread-safe:
    one request at a time."""

    def __init__(self) -> None:
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join([str(REPO), env.get("PYTHONPATH", "")])
        # What a worker image's PATH looks like (tools run under Landlock: only system dirs).
        env["PATH"] = os.pathsep.join((str(Path(sys.executable).parent), "/usr/bin", "/bin"))
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "tests.chaos.child"],
            cwd=REPO,
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        self._lock = threading.Lock()

    def _ask(self, msg: dict[str, Any]) -> dict[str, Any]:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        with self._lock:
            self.proc.stdin.write(json.dumps(msg) + "\n")
            self.proc.stdin.flush()
            line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError("the chaos zygote exited")
        reply: dict[str, Any] = json.loads(line)
        return reply

    def session(self, job: dict[str, Any]) -> int:
        """Fork a session process; returns its pid."""
        return int(self._ask({"op": "session", "job": job})["pid"])

    def exec(self, argv: list[str]) -> int:
        """Fork and exec ``argv`` (stdio on /dev/null); returns its pid."""
        return int(self._ask({"op": "exec", "argv": argv})["pid"])

    def worker(self, job: dict[str, Any]) -> int:
        """Fork a ``berth-worker`` process; returns its pid."""
        return int(self._ask({"op": "worker", "job": job})["pid"])

    def poll(self, pid: int) -> int | None:
        """Exit status of ``pid`` (code, or -signal) once it ended, else None."""
        reply = self._ask({"op": "poll", "pid": pid})
        if reply.get("error"):
            raise RuntimeError(f"poll {pid}: {reply['error']}")
        status = reply["status"]
        return None if status is None else int(status)

    def close(self) -> None:
        """Close the zygote (its children are reaped by init once it exits)."""
        if self.proc.stdin is not None:
            self.proc.stdin.close()
        self.proc.wait(timeout=30)
        if self.proc.stdout is not None:
            self.proc.stdout.close()


class RedisServer:
    """A private ``redis-server`` on a fixed loopback port; :meth:`restart` keeps the port.

    It is a child of the zygote, which kills it when the campaign goes away (even by SIGKILL:
    the zygote's stdin closes), so an interrupted campaign leaves no Redis behind.
    """

    def __init__(self, workdir: Path, zygote: Zygote) -> None:
        binary = shutil.which("redis-server")
        if binary is None:
            raise RuntimeError("redis-server is not installed")
        self.binary = binary
        self.workdir = workdir
        self.zygote = zygote
        workdir.mkdir(parents=True, exist_ok=True)
        self.port = free_port()
        self.pid: int | None = None
        self.start()

    @property
    def url(self) -> str:
        """``redis://127.0.0.1:<port>/0``."""
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> None:
        """Start and wait until it answers PING (RuntimeError after 20 s)."""
        args = ["--port", str(self.port), "--bind", "127.0.0.1", "--save", "", "--appendonly"]
        self.pid = self.zygote.exec([self.binary, *args, "no", "--dir", str(self.workdir)])
        deadline = time.monotonic() + 20
        while True:
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.2) as conn:
                    conn.sendall(b"PING\r\n")
                    if conn.recv(16).startswith(b"+PONG"):
                        return
            except OSError:
                pass
            if self.zygote.poll(self.pid) is not None or time.monotonic() > deadline:
                self.pid = None
                raise RuntimeError("redis-server did not start")
            time.sleep(0.01)

    def stop(self) -> None:
        """SIGKILL it (nothing is saved) and reap it."""
        if self.pid is not None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, signal.SIGKILL)
            while self.zygote.poll(self.pid) is None:
                time.sleep(0.005)
            self.pid = None

    def restart(self) -> None:
        """Kill and start again on the same port, empty."""
        self.stop()
        self.start()
