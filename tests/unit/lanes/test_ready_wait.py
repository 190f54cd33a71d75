"""``berth-wait-ready``, the LaneWorker container's postStart hook: exit 0 once the port accepts
connections, exit 1 with a message after the timeout."""

from __future__ import annotations

import socket
import threading
import time

import pytest

from session_runtime.ready_wait import main, wait_until_accepting


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_a_listening_port_is_ready_at_once() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        assert main(["--host", "127.0.0.1", "--port", str(port), "--timeout-seconds", "5"]) == 0


def test_it_waits_for_a_port_that_opens_later() -> None:
    port = _closed_port()
    server = socket.socket()

    def open_later() -> None:
        time.sleep(0.3)
        server.bind(("127.0.0.1", port))
        server.listen()

    opener = threading.Thread(target=open_later)
    opener.start()
    try:
        started = time.monotonic()
        assert wait_until_accepting("127.0.0.1", port, timeout=10, interval=0.05)
        assert time.monotonic() - started >= 0.25  # it did wait for the port
    finally:
        opener.join()
        server.close()


def test_a_port_that_never_opens_fails_with_a_message(capsys: pytest.CaptureFixture[str]) -> None:
    port = _closed_port()
    args = ["--host", "127.0.0.1", "--port", str(port), "--timeout-seconds", "0.3"]
    assert main(args) == 1
    err = capsys.readouterr().err
    assert f"127.0.0.1:{port}" in err and "0.3 s" in err


def test_the_host_defaults_to_the_pod_ip(monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[str] = []
    monkeypatch.setenv("POD_IP", "10.1.2.3")
    monkeypatch.setattr(
        "session_runtime.ready_wait.wait_until_accepting",
        lambda host, port, **_: seen.append(f"{host}:{port}") or True,
    )
    assert main(["--port", "9090"]) == 0
    assert seen == ["10.1.2.3:9090"]
