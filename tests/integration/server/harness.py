"""Run ``berth-session`` as a real process for the integration tests of the session pod.

Each test gets its own scripted OpenAI-compatible server (real HTTP, in a thread of the test
process), its own store/workspace/options under ``tmp_path`` and a free port on 127.0.0.1.
Waiting is by polling a condition with a generous cap that only turns a hang into a failure;
no assertion depends on timing.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from berth_contract import names
from berth_contract.taskauth import derive_session_key
from session_runtime.llm.scripted import ScriptedServer

TEST_MASTER = b"test-master-key-of-32-bytes-xxxx"
"""The namespace master key of test workers (tests/integration/lanes/conftest.py MASTER)."""

#: Upper bound for any wait; reaching it is a failure (a hang), not a timing assertion.
WAIT_CAP_SECONDS = 60.0


#: A bash command that records that it started and then blocks until ``go`` exists.
def blocking_bash(marker: str, go: str = "go") -> dict[str, Any]:
    return {
        "name": "bash",
        "arguments": {"command": f"echo ran >> {marker}; while [ ! -f {go} ]; do sleep 0.05; done"},
    }


def bash(command: str) -> dict[str, Any]:
    return {"name": "bash", "arguments": {"command": command}}


def wait_for(what: str, check: Callable[[], Any], cap: float = WAIT_CAP_SECONDS) -> Any:
    """Poll ``check`` until it returns a truthy value; raise AssertionError after ``cap`` s."""
    end = time.monotonic() + cap
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > end:
            raise AssertionError(f"gave up waiting for {what}")
        time.sleep(0.05)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def session_command() -> list[str]:
    """The installed console script, else ``python -m session_runtime.server``."""
    script = Path(sys.executable).parent / "berth-session"
    if script.exists():
        return [str(script)]
    found = shutil.which("berth-session")
    return [found] if found else [sys.executable, "-m", "session_runtime.server"]


@dataclass
class PodProcess:
    """One running ``berth-session``."""

    proc: subprocess.Popen[bytes]
    base_url: str
    termination_log: Path
    stderr_path: Path
    token: str = ""

    def request(
        self, method: str, path: str, body: Any = None, headers: dict[str, str] | None = None
    ) -> tuple[int, Any]:
        """One HTTP call; with ``headers`` None the pod's API token is sent as a Bearer token,
        otherwise exactly ``headers`` (so tests can send none or a wrong one)."""
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(self.base_url + path, data=data, method=method)
        req.add_header("Content-Type", "application/json")
        if headers is None:
            headers = {"Authorization": f"Bearer {self.token}"}
        for key, value in headers.items():
            req.add_header(key, value)
        try:
            with urllib.request.urlopen(req, timeout=10) as resp:
                raw = resp.read()
                status = resp.status
                ctype = resp.headers.get("Content-Type", "")
        except urllib.error.HTTPError as exc:
            raw, status, ctype = exc.read(), exc.code, exc.headers.get("Content-Type", "")
        return status, (json.loads(raw) if "json" in ctype else raw.decode())

    def try_get(self, path: str) -> tuple[int, Any] | None:
        try:
            return self.request("GET", path)
        except (urllib.error.URLError, ConnectionError, TimeoutError):
            return None

    def state(self) -> dict[str, Any]:
        status, body = self.request("GET", "/v1/state")
        assert status == 200, body
        assert isinstance(body, dict)
        return body

    def wait_ready(self) -> None:
        def ready() -> bool:
            if self.proc.poll() is not None:
                raise AssertionError(f"berth-session exited early:\n{self.stderr()}")
            answer = self.try_get("/readyz")
            return answer is not None and answer[0] == 200

        wait_for("readyz", ready)

    def wait_state(self, predicate: Callable[[dict[str, Any]], bool], what: str) -> dict[str, Any]:
        def check() -> dict[str, Any] | None:
            if self.proc.poll() is not None:
                raise AssertionError(f"exited while waiting for {what}:\n{self.stderr()}")
            st = self.state()
            return st if predicate(st) else None

        result: dict[str, Any] = wait_for(what, check)
        return result

    def wait_exit(self) -> int:
        try:
            return self.proc.wait(timeout=WAIT_CAP_SECONDS)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            raise AssertionError(f"berth-session did not exit:\n{self.stderr()}") from None

    def signal(self, sig: signal.Signals) -> None:
        self.proc.send_signal(sig)

    def termination(self) -> dict[str, Any]:
        text = self.termination_log.read_text()
        obj = json.loads(text)
        assert isinstance(obj, dict)
        return obj

    def stderr(self) -> str:
        return self.stderr_path.read_text(errors="replace")


@dataclass
class PodWorld:
    """Store, workspace, options and model endpoint shared by the pods of one test."""

    root: Path
    llm: ScriptedServer
    namespace: str = "team-a"
    name: str = "fix-bug"
    uid: str = "9f1c2d3e-0000-4000-8000-000000000001"
    options: dict[str, Any] = field(default_factory=dict)
    pods: list[PodProcess] = field(default_factory=list)
    token: str = "test-api-token-0123456789-abcdefghijklmnopq"

    @property
    def store(self) -> Path:
        return self.root / "store"

    @property
    def workspace(self) -> Path:
        """``workspaces/<ns>/<name>`` under the root, where a worker serving it builds it too."""
        return self.root / "workspaces" / self.namespace / self.name

    def lines(self, name: str) -> list[str]:
        path = self.workspace / name
        return path.read_text().splitlines() if path.exists() else []

    def touch(self, name: str) -> None:
        (self.workspace / name).write_text("")

    def env(self, epoch: int, resume_run_id: str | None, tag: str, **extra: str) -> dict[str, str]:
        options_file = self.root / "options" / "options.json"
        options_file.parent.mkdir(exist_ok=True)
        options_file.write_text(json.dumps(self.options))
        token_file = self.root / "secret" / "api-token"
        token_file.parent.mkdir(exist_ok=True)
        token_file.write_text(self.token + "\n")
        key_file = self.root / "secret" / "task-key"
        key_file.write_bytes(derive_session_key(TEST_MASTER, self.namespace, self.name))
        env = {k: v for k, v in os.environ.items() if not k.startswith(("BERTH_", "OPENAI_"))}
        env.update(
            {
                "BERTH_API_TOKEN_FILE": str(token_file),
                "BERTH_SESSION": f"{self.namespace}/{self.name}",
                "BERTH_SESSION_UID": self.uid,
                "BERTH_EPOCH": str(epoch),
                "BERTH_STORE_DIR": str(self.store),
                "BERTH_WORKSPACE": str(self.workspace),
                "BERTH_WORKSPACE_ROOT": str(self.workspace),
                "BERTH_TASK_KEY_FILE": str(key_file),
                "BERTH_OPTIONS_FILE": str(options_file),
                "BERTH_TERMINATION_LOG": str(self.root / f"termination-{tag}"),
                "POD_NAME": f"{self.name}-{tag}",
                "POD_IP": "127.0.0.1",
                "NODE_NAME": "node-a",
                "BERTH_HTTP_PORT": str(free_port()),
                "OPENAI_API_KEY": "sk-test-not-a-secret",
                "OPENAI_BASE_URL": self.llm.base_url,
                "PYTHONUNBUFFERED": "1",
            }
        )
        if resume_run_id:
            env["BERTH_RESUME_RUN_ID"] = resume_run_id
        env.update(extra)
        return env

    def start(
        self, epoch: int, resume_run_id: str | None = None, tag: str = "a", **extra: str
    ) -> PodProcess:
        env = self.env(epoch, resume_run_id, tag, **extra)
        stderr_path = self.root / f"stderr-{tag}"
        with stderr_path.open("wb") as err:
            proc = subprocess.Popen(
                session_command(),
                env=env,
                cwd=self.root,
                stdin=subprocess.DEVNULL,
                stdout=err,
                stderr=err,
            )
        pod = PodProcess(
            proc,
            f"http://127.0.0.1:{env['BERTH_HTTP_PORT']}",
            Path(env["BERTH_TERMINATION_LOG"]),
            stderr_path,
            token=self.token,
        )
        self.pods.append(pod)
        return pod

    def model_requests(self) -> list[dict[str, Any]]:
        return list(self.llm.requests)


@contextmanager
def pod_world(root: Path, script: dict[str, Any], **options: Any) -> Iterator[PodWorld]:
    """A scripted model plus a session directory; kills leftover pods on exit."""
    llm = ScriptedServer(script)
    llm.start_in_thread()
    world = PodWorld(root, llm)
    world.workspace.mkdir(parents=True, exist_ok=True)
    world.options = {
        "schemaVersion": 1,
        "session": {"namespace": world.namespace, "name": world.name, "uid": world.uid},
        "prompt": "Fix the failing test",
        "model": "openai/scripted-model",
        "identity": {"tenantId": "acme", "principal": "alice"},
        "resultStream": names.reply_stream(world.namespace, world.uid),
        "passivation": {"deadlineSeconds": 60},
        **options,
    }
    try:
        yield world
    finally:
        for pod in world.pods:
            if pod.proc.poll() is None:
                pod.proc.kill()
                pod.proc.wait()
        llm.stop_thread()
