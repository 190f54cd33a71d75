"""Local ``redis-server`` processes configured as managed services run them, for the tests named
``…single_password…`` and ``…redis_tls…``.

- :func:`single_password_redis_url`: no ACL users, one ``requirepass`` password for the default
  user (ElastiCache/Memorystore/Azure Cache AUTH without users); the URL carries it
  (``redis://:<password>@...``).
- :func:`redis_tls_url`: TLS only (no plain port) with a certificate of a private CA made by
  ``openssl`` for 127.0.0.1, plus the single password; the URL names the CA file
  (``rediss://:<password>@...?ssl_ca_certs=<ca.crt>``), as the chart's URLs do.

Both are session-scoped, in a temp dir, without persistence; tests skip when ``redis-server`` or
``openssl`` is missing.
"""

from __future__ import annotations

import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.unit.chart.test_redis_acl import _make_tls

PASSWORD = "single-Pw_0123456789abcdef"
"""The one AUTH password of the default user."""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _serve(workdir: Path, port: int, *args: str) -> subprocess.Popen[bytes]:
    binary = shutil.which("redis-server")
    if binary is None:
        pytest.skip("redis-server is not installed")
    cmd = [binary, "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"]
    cmd += ["--dir", str(workdir), "--requirepass", PASSWORD, *args]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 20
    while True:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                return proc
        except OSError:
            pass
        if proc.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError("redis-server did not start")
        time.sleep(0.05)


@pytest.fixture(scope="session")
def single_password_redis_url() -> Iterator[str]:
    """``redis://:<password>@127.0.0.1:<port>/0`` of a server with only ``requirepass``."""
    workdir = Path(tempfile.mkdtemp(prefix="berth-redis-pw-"))
    port = _free_port()
    proc = _serve(workdir, port, "--port", str(port))
    yield f"redis://:{PASSWORD}@127.0.0.1:{port}/0"
    proc.terminate()
    proc.wait(timeout=10)
    shutil.rmtree(workdir, ignore_errors=True)


@pytest.fixture(scope="session")
def redis_tls_url() -> Iterator[str]:
    """``rediss://:<password>@127.0.0.1:<port>/0?ssl_ca_certs=<ca>`` of a TLS-only server whose
    certificate a private CA signed."""
    workdir = Path(tempfile.mkdtemp(prefix="berth-redis-tls-"))
    _make_tls(workdir / "tls")
    tls, port = workdir / "tls", _free_port()
    proc = _serve(
        workdir,
        port,
        *("--port", "0", "--tls-port", str(port), "--tls-auth-clients", "no"),
        *("--tls-cert-file", str(tls / "tls.crt"), "--tls-key-file", str(tls / "tls.key")),
        *("--tls-ca-cert-file", str(tls / "ca.crt")),
    )
    yield f"rediss://:{PASSWORD}@127.0.0.1:{port}/0?ssl_ca_certs={tls / 'ca.crt'}"
    proc.terminate()
    proc.wait(timeout=10)
    shutil.rmtree(workdir, ignore_errors=True)
