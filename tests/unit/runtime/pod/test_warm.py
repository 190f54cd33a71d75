"""Warm mode of berth-session: the adoption request, its validation and idempotency, and the
Landlock confinement of the adopted process."""

from __future__ import annotations

import base64
import json
import os
import signal
import socket
import subprocess
import sys
import textwrap
import time
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from aiohttp.test_utils import TestClient, TestServer

from session_runtime.llm.scripted import ScriptedServer
from session_runtime.pod.config import PodConfigError
from session_runtime.pod.warm import AdoptRequest, WarmConfig, WarmServer, adopted_config
from session_runtime.tools import sandbox
from tests.e2e.passivation_support import step_script

TOKEN = b"pool-token-0123456789"


def warm_config(tmp_path: Path) -> WarmConfig:
    return WarmConfig(
        pool="p",
        namespace="ns",
        token_file=tmp_path / "token",
        store_dir=tmp_path / "store",
        workspaces_dir=tmp_path / "workspaces",
        tmp_dir=tmp_path / "tmp",
        pod_name="p-w-1",
        pod_ip="127.0.0.1",
        node_name="n",
        http_port=0,
        termination_log=None,
        openai_base_url=None,
    )


def body(**kw: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "session": {"namespace": "ns", "name": "s", "uid": "uid-1"},
        "epoch": 1,
        "options": {"prompt": "p", "model": "openai/x"},
        "apiToken": "t" * 20,
        "taskKey": base64.b64encode(b"\x00key").decode(),
    }
    base.update(kw)
    return base


def test_adopted_config_places_the_session_in_its_own_directories(tmp_path: Path) -> None:
    wc = warm_config(tmp_path)
    (tmp_path / "tmp").mkdir()
    cfg, opts, token = adopted_config(wc, AdoptRequest.model_validate(body(workspaceSubPath="a")))
    assert cfg.workspace_root == tmp_path / "workspaces" / "s"
    assert cfg.workspace == tmp_path / "workspaces" / "s" / "a"
    assert (tmp_path / "store" / "ns" / "s").is_dir()
    assert token == b"t" * 20 and opts.prompt == "p" and cfg.epoch == 1
    assert cfg.task_key_file is not None and cfg.task_key_file.read_bytes() == b"\x00key"
    assert oct(cfg.task_key_file.stat().st_mode & 0o777) == "0o600"


@pytest.mark.parametrize(
    ("override", "problem"),
    [
        ({"session": {"namespace": "other", "name": "s", "uid": "u"}}, "namespace"),
        ({"workspaceSubPath": "../victim"}, ".."),
        ({"workspaceSubPath": "/etc"}, "relative"),
    ],
)
def test_adoption_outside_the_pods_namespace_or_workspace_is_refused(
    tmp_path: Path, override: dict[str, Any], problem: str
) -> None:
    wc = warm_config(tmp_path)
    with pytest.raises(PodConfigError, match=problem):
        adopted_config(wc, AdoptRequest.model_validate(body(**override)))


async def test_adopt_needs_the_pool_token_and_is_idempotent(tmp_path: Path) -> None:
    (tmp_path / "tmp").mkdir()
    server = WarmServer(warm_config(tmp_path), TOKEN)
    async with TestClient(TestServer(server.app())) as client:
        assert (await client.get("/readyz")).status == 200
        assert (await client.get("/metrics")).status == 200
        assert (await client.post("/v1/adopt", json=body())).status == 401
        wrong = {"Authorization": "Bearer nope"}
        assert (await client.post("/v1/adopt", json=body(), headers=wrong)).status == 403
        auth = {"Authorization": f"Bearer {TOKEN.decode()}"}
        bad = await client.post("/v1/adopt", json=body(workspaceSubPath=".."), headers=auth)
        assert bad.status == 400 and server.result is None
        ok = await client.post("/v1/adopt", json=body(), headers=auth)
        assert ok.status == 202 and server.result is not None
        assert ok.headers.get("Connection") == "close"  # the warm server closes next
        again = await client.post("/v1/adopt", json=body(), headers=auth)
        assert again.status == 202  # the same session and epoch: idempotent
        other = body(session={"namespace": "ns", "name": "t", "uid": "uid-2"})
        assert (await client.post("/v1/adopt", json=other, headers=auth)).status == 409
        assert (await client.get("/readyz")).status == 503
        assert server.adopted.is_set()


@pytest.mark.skipif(sandbox.landlock_abi() < 1, reason="needs Landlock (Linux >= 5.13)")
def test_confined_process_reaches_only_its_own_session(tmp_path: Path) -> None:
    """After ``confine`` the process (and its children) read its own workspace and store and
    nothing of another session's."""
    for d in ("workspaces/s", "workspaces/victim", "store/ns/s", "store/ns/victim"):
        (tmp_path / d).mkdir(parents=True)
    (tmp_path / "workspaces/victim/secret.txt").write_text("secret")
    (tmp_path / "store/ns/victim/state").write_text("secret")
    (tmp_path / "workspaces/s/mine.txt").write_text("mine")
    code = textwrap.dedent(
        f"""
        import subprocess
        from pathlib import Path
        from session_runtime.pod.config import PodConfig
        from session_runtime.pod.warm import confine
        root = Path({str(tmp_path)!r})
        cfg = PodConfig(namespace="ns", name="s", session_uid="u", epoch=1,
                        store_dir=root / "store", workspace=root / "workspaces/s",
                        options_file=root / "o", workspace_root=root / "workspaces/s")
        (root / "tmp").mkdir()
        confine(cfg, tmp_dir=str(root / "tmp"))
        print(open(root / "workspaces/s/mine.txt").read())
        (root / "store/ns/s/x").write_text("ok")
        for p in ("workspaces/victim/secret.txt", "store/ns/victim/state"):
            try:
                open(root / p).read(); print("LEAK", p)
            except PermissionError:
                print("denied", p)
        r = subprocess.run(["cat", str(root / "workspaces/victim/secret.txt")],
                           capture_output=True, text=True)
        print("child", r.returncode, r.stdout.strip() or "-")
        """
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    lines = out.stdout.split("\n")
    assert lines[0] == "mine", out
    assert "LEAK" not in out.stdout and out.stdout.count("denied") == 2, out.stdout
    assert "child 1 -" in out.stdout, out.stdout


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def warm_env(tmp_path: Path, port: int) -> dict[str, str]:
    """The environment of a warm ``berth-session`` on 127.0.0.1:``port`` (pool token written)."""
    (tmp_path / "token").write_bytes(TOKEN)
    return {
        **os.environ,
        "BERTH_WARM_POOL": "p",
        "BERTH_WARM_TOKEN_FILE": str(tmp_path / "token"),
        "BERTH_STORE_DIR": str(tmp_path / "store"),
        "BERTH_WORKSPACES_DIR": str(tmp_path / "workspaces"),
        "POD_NAMESPACE": "ns",
        "POD_IP": "127.0.0.1",
        "BERTH_HTTP_PORT": str(port),
    }


def start_warm(tmp_path: Path, port: int, **env: str) -> subprocess.Popen[bytes]:
    """``berth-session`` in warm mode on 127.0.0.1:``port``, once its /readyz answers 200."""
    proc = subprocess.Popen(
        [str(Path(sys.executable).parent / "berth-session")],
        env={**warm_env(tmp_path, port), **env},
        stderr=subprocess.PIPE,
    )
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=1) as r:
                if r.status == 200:
                    return proc
        except OSError:
            time.sleep(0.1)
        if proc.poll() is not None:
            break
    proc.kill()
    _, err = proc.communicate()
    raise AssertionError(f"warm process never ready: {err.decode(errors='replace')[-2000:]}")


def stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        proc.kill()
        proc.wait()


@pytest.mark.skipif(sandbox.landlock_abi() < 1, reason="needs Landlock (Linux >= 5.13)")
def test_a_warm_pod_is_ready_and_stops_on_sigterm(tmp_path: Path) -> None:
    """``berth-session`` in warm mode answers /readyz and exits 0 on SIGTERM (as PID 1 it would
    otherwise wait for the kubelet's SIGKILL)."""
    proc = start_warm(tmp_path, free_port())
    try:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 0
    finally:
        stop(proc)


@pytest.mark.skipif(sandbox.landlock_abi() < 1, reason="needs Landlock (Linux >= 5.13)")
def test_the_session_api_answers_a_request_sent_the_moment_the_adoption_is_answered(
    tmp_path: Path,
) -> None:
    """The warm server hands its listening socket to the session API: one ``GET /v1/state``
    sent right after the 202, on a new connection and never retried, waits for the session API
    and is answered with the adopted run — not refused while the process switches over (the
    operator would only ask again on its next pass)."""
    (tmp_path / "key").write_text("sk-test")
    (tmp_path / "tmp").mkdir()
    srv = ScriptedServer(step_script(50, delay_ms=100, sleep_s=0.1))
    srv.start_in_thread()
    port = free_port()
    proc = start_warm(
        tmp_path,
        port,
        TMPDIR=str(tmp_path / "tmp"),
        OPENAI_BASE_URL=srv.base_url,
        BERTH_LLM_API_KEY_FILE=str(tmp_path / "key"),
        BERTH_TERMINATION_LOG=str(tmp_path / "tmp" / "termination-log"),
        BERTH_LOG_LEVEL="WARNING",  # stderr is a pipe nobody reads while the run goes on
    )
    try:
        api_token = "t" * 32
        adopt = urllib.request.Request(
            f"http://127.0.0.1:{port}/v1/adopt",
            data=json.dumps(
                body(apiToken=api_token, options={"prompt": "p", "model": "openai/x"})
            ).encode(),
            method="POST",
            headers={"Authorization": f"Bearer {TOKEN.decode()}"},
        )
        with urllib.request.urlopen(adopt, timeout=30) as r:
            assert r.status == 202
            assert r.headers.get("Connection") == "close"
        state = urllib.request.Request(
            f"http://127.0.0.1:{port}/v1/state",
            headers={"Authorization": f"Bearer {api_token}"},
        )
        with urllib.request.urlopen(state, timeout=30) as r:  # once: no retry
            answer = json.loads(r.read())
        assert answer["session"] == "ns/s" and answer["epoch"] == 1
        assert answer["runId"], answer
    finally:
        stop(proc)
        srv.stop_thread()


def test_warm_imports_leave_nothing_for_the_first_model_call_and_start_no_thread() -> None:
    """What a warm pod does before adoption covers the LLM client's lazy work: after
    ``warm_imports`` the first streamed chat completion imports no module of the HTTP stack,
    and no thread is left (``confine`` needs a single-threaded process)."""
    code = textwrap.dedent(
        """
        import asyncio, sys, threading
        from session_runtime.pod.warm import warm_imports
        warm_imports()
        assert threading.active_count() == 1, threading.enumerate()
        from session_runtime.llm.client import OpenAIChatClient, default_tls_context
        from session_runtime.llm.scripted import ScriptedServer

        async def main():
            async with ScriptedServer({"turns": [{"text": "hi"}]}) as srv:
                before = set(sys.modules)
                llm = OpenAIChatClient("m", srv.base_url, "k")
                out = await llm.complete([{"role": "user", "content": "x"}], None)
                assert out.text == "hi", out
                return sorted(set(sys.modules) - before)

        new = asyncio.run(main())
        stack = ("openai", "httpx", "httpcore", "anyio", "h11", "jiter", "truststore", "ssl")
        print(" ".join(m for m in new if m.split(".")[0].rstrip("2") in stack) or "none")
        assert default_tls_context() is default_tls_context()
        """
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "none", f"imported by the first call: {out.stdout}"


def test_a_created_session_pod_loads_the_cluster_budget_guard_only_when_it_has_one() -> None:
    """The cluster budget guard (its service client, the Redis ledger's types) is ~35 ms of a
    session process' start-up: ``berth-session`` does not import it unless the pod is given a
    budget service, while a warm pod imports it before adoption (an adopted session may have
    one)."""
    code = textwrap.dedent(
        """
        import sys
        import session_runtime.server
        heavy = ("session_runtime.budget.guard", "redis")
        print(*[m for m in heavy if m in sys.modules] or ["none"])
        from session_runtime.pod.warm import warm_imports
        warm_imports()
        print(*[m for m in heavy if m in sys.modules] or ["none"])
        """
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    created, warm = out.stdout.splitlines()
    assert created == "none", f"imported at start-up: {created}"
    assert "session_runtime.budget.guard" in warm.split()
