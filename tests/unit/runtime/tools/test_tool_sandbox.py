"""Bash runs with a scrubbed environment and under Landlock: it sees its workspace and system
directories only, never the server's credentials, files outside, or the server's /proc entry."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from session_runtime.tools import run_tool, sandbox

pytestmark = pytest.mark.skipif(sandbox.landlock_abi() < 1, reason="kernel without Landlock")


@pytest.fixture
def ws(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    for name, value in {
        "OPENAI_API_KEY": "sk-test-leak",
        "BERTH_REDIS_URL": "redis://:hunter2@redis:6379/0",
        "REDIS_PASSWORD": "hunter2",
        "GITHUB_TOKEN": "ghp_leak",
    }.items():
        monkeypatch.setenv(name, value)
    (tmp_path / "outside").mkdir()
    (tmp_path / "outside" / "secret.txt").write_text("TOP SECRET\n")
    (tmp_path / "ws").mkdir()
    return tmp_path / "ws"


def real_path(p: Path) -> str:
    return os.path.realpath(p)


async def bash(ws: Path, command: str) -> tuple[str, int]:
    res = await run_tool("bash", {"command": command}, str(ws), "b")
    assert not res.is_error, res.output
    return res.output, res.exit_code


async def test_bash_cannot_read_or_write_outside_the_workspace(ws: Path) -> None:
    out, code = await bash(ws, f"cat {ws.parent}/outside/secret.txt")
    assert code != 0 and "TOP SECRET" not in out and "Permission denied" in out
    out, code = await bash(ws, f"echo pwned > {ws.parent}/outside/new.txt")
    assert code != 0 and not (ws.parent / "outside" / "new.txt").exists()
    out, code = await bash(ws, "ls /var/run /tmp / 2>&1; cat /proc/1/status")
    assert code != 0


async def test_bash_cannot_read_the_servers_environ(ws: Path) -> None:
    out, code = await bash(ws, f"cat /proc/{os.getpid()}/environ; cat /proc/$PPID/environ")
    assert code != 0 and "sk-test-leak" not in out and "PATH=" not in out


async def test_bash_environment_is_scrubbed(ws: Path) -> None:
    out, code = await bash(ws, "env")
    assert code == 0
    names = {line.split("=", 1)[0] for line in out.splitlines() if "=" in line}
    assert not {n for n in names if n.startswith(("BERTH_", "OPENAI", "REDIS"))}
    assert "sk-test-leak" not in out and "hunter2" not in out and "ghp_leak" not in out
    env = dict(line.split("=", 1) for line in out.splitlines() if "=" in line)
    assert env["HOME"] == real_path(ws)


async def test_workspace_and_tmpdir_are_writable(ws: Path) -> None:
    cmd = 'echo hi > f.txt && mkdir -p d/e && mktemp -p "$TMPDIR" && cat f.txt'
    out, code = await bash(ws, cmd)
    assert code == 0 and out.strip().endswith("hi"), out
    assert (ws / "f.txt").read_text() == "hi\n" and (ws / "d" / "e").is_dir()


async def test_bash_cannot_signal_the_server(ws: Path) -> None:
    out, code = await bash(ws, f"kill -0 {os.getpid()}")
    assert code != 0 and "not permitted" in out


def test_helper_runs_confined_commands_and_rejects_bad_usage(tmp_path: Path) -> None:
    # An unknown option or no command is a usage error; a confined command runs.
    argv = sandbox.helper_argv(["true"], rw=[str(tmp_path)], ro=["/usr"], best_effort=False)
    assert subprocess.run(argv, check=False).returncode == 0
    bad = subprocess.run([*argv[:4], "--bogus", "--", "true"], check=False, capture_output=True)
    assert bad.returncode == 2 and b"unknown option" in bad.stderr
    assert sys.executable == argv[0]


def test_sandbox_mode_is_validated(monkeypatch: pytest.MonkeyPatch) -> None:
    assert sandbox.sandbox_mode() in ("required", "best-effort")
    monkeypatch.setenv(sandbox.SANDBOX_MODE_ENV, "off")
    with pytest.raises(sandbox.SandboxError):
        sandbox.sandbox_mode()
    monkeypatch.delenv(sandbox.SANDBOX_MODE_ENV)
    assert sandbox.sandbox_mode() == "required"


def test_tool_env_keeps_only_the_allow_list() -> None:
    src = {"PATH": "/bin", "LANG": "C.UTF-8", "OPENAI_API_KEY": "k", "BERTH_X": "y", "A_TOKEN": "t"}
    assert sandbox.tool_env("/w", "/t", src) == {
        "PATH": "/bin",
        "LANG": "C.UTF-8",
        "HOME": "/w",
        "PWD": "/w",
        "TMPDIR": "/t",
    }
