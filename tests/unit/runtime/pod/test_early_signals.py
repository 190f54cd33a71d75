"""Stop signals that reach a pod's process before its event loop does (``session_runtime.
early_signals``): a container's process is PID 1 of its PID namespace, and PID 1 drops a signal it
has no handler for, so a warm pod deleted while it imported ran on until the kubelet's SIGKILL at
the end of its grace period. The processes here run as PID 1 of a new PID namespace
(``unshare --pid``), as in a container."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import IO

import pytest

from session_runtime.tools import sandbox
from tests.unit.runtime.pod.test_warm import free_port, warm_env


def test_a_stop_signal_before_any_handler_is_remembered_and_taken_once() -> None:
    code = (
        "import os, signal\n"
        "from session_runtime import early_signals as e\n"
        "e.catch()\n"
        "os.kill(os.getpid(), signal.SIGTERM)\n"
        "os.kill(os.getpid(), signal.SIGINT)\n"
        "first, second = e.take(), e.take()\n"
        "print(first and first.name, second)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=30)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["SIGTERM", "None"]


def as_pid_1(
    cmd: list[str], env: dict[str, str], stderr: int | IO[bytes] = subprocess.PIPE
) -> tuple[subprocess.Popen[bytes], int]:
    """Run ``cmd`` as PID 1 of a new PID namespace: (the ``unshare`` process, the host's pid of
    ``cmd``'s process)."""
    proc = subprocess.Popen(
        ["unshare", "--pid", "--fork", "--kill-child", *cmd],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=stderr,
    )
    children = Path(f"/proc/{proc.pid}/task/{proc.pid}/children")
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        pids = children.read_text().split() if children.exists() else []
        if pids:
            return proc, int(pids[0])
        time.sleep(0.002)
    proc.kill()
    proc.wait()
    raise AssertionError("unshare started no process")


def wait_until_importing(pid: int, library: str) -> None:
    """Until ``library`` (a shared object the runtime's imports load early) is mapped into
    ``pid``: the interpreter has run the entry point and is importing the rest."""
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            if library in Path(f"/proc/{pid}/maps").read_text():
                return
        except OSError:
            pass
        time.sleep(0.002)
    raise AssertionError(f"{library} never loaded into pid {pid}")


def signalled_while_importing(cmd: list[str], env: dict[str, str]) -> tuple[int, str]:
    """Run ``cmd`` as PID 1, send it SIGTERM while it imports the runtime; (its exit status,
    its stderr). AssertionError when it is still running 30 s later (the signal dropped)."""
    proc, pid = as_pid_1(cmd, env)
    try:
        wait_until_importing(pid, "_pydantic_core")
        os.kill(pid, signal.SIGTERM)
        try:
            _, raw = proc.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            raise AssertionError("the SIGTERM sent while it imported was dropped") from None
        return proc.returncode, raw.decode(errors="replace")
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


@pytest.mark.skipif(shutil.which("unshare") is None, reason="needs unshare(1) (util-linux)")
@pytest.mark.skipif(sandbox.landlock_abi() < 1, reason="needs Landlock (Linux >= 5.13)")
def test_a_warm_pod_signalled_while_it_imports_stops_at_once(tmp_path: Path) -> None:
    """SIGTERM while ``berth-session`` (warm mode, PID 1) is still importing the runtime: the
    process exits 0 as soon as it could serve, instead of serving on and ignoring it."""
    script = str(Path(sys.executable).parent / "berth-session")
    code, err = signalled_while_importing([script], warm_env(tmp_path, free_port()))
    assert code == 0, err[-2000:]
    assert "warm pod stopped before it was adopted" in err
