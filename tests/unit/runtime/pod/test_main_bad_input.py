"""``berth-session``'s handling of unusable input, in-process: one clear termination message,
outcome ``failed``, exit code 2, no traceback (the real-process variant is in the integration
suite)."""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path

import pytest

from berth_contract.options import OptionsError
from berth_contract.termination import validate
from session_runtime import server
from session_runtime.pod.config import PodConfigError


def good_env(tmp_path: Path) -> dict[str, str]:
    options = tmp_path / "options.json"
    options.write_text(
        json.dumps(
            {
                "prompt": "p",
                "model": "openai/m",
                "session": {"namespace": "ns", "name": "s", "uid": "u"},
            }
        )
    )
    (tmp_path / "api-token").write_text("t0k3n\n")
    return {
        "BERTH_API_TOKEN_FILE": str(tmp_path / "api-token"),
        "BERTH_SESSION": "ns/s",
        "BERTH_SESSION_UID": "u",
        "BERTH_EPOCH": "1",
        "BERTH_STORE_DIR": str(tmp_path / "store"),
        "BERTH_WORKSPACE": str(tmp_path / "ws"),
        "BERTH_OPTIONS_FILE": str(options),
        "BERTH_TERMINATION_LOG": str(tmp_path / "termination-log"),
    }


def test_load_accepts_matching_options(tmp_path: Path) -> None:
    cfg, opts, token = server.load(good_env(tmp_path))
    assert cfg.session_key == "ns/s" and opts.prompt == "p"
    assert token == b"t0k3n"  # surrounding whitespace stripped


@pytest.mark.parametrize(
    ("override", "error", "fragment"),
    [
        ({"BERTH_SESSION": "ns/other"}, OptionsError, "is for ns/s (uid u), not ns/other"),
        ({"BERTH_SESSION_UID": "v"}, OptionsError, "not ns/s (uid v)"),
        ({"BERTH_EPOCH": ""}, PodConfigError, "BERTH_EPOCH is not set"),
    ],
)
def test_load_refuses(
    tmp_path: Path, override: dict[str, str], error: type[Exception], fragment: str
) -> None:
    with pytest.raises(error) as info:
        server.load(good_env(tmp_path) | override)
    assert fragment in str(info.value)


@pytest.mark.parametrize(
    ("breakage", "fragment"),
    [
        ("missing-options", "cannot read options file"),
        ("bad-json", "is not valid JSON"),
        ("bad-epoch", "BERTH_EPOCH must be an integer"),
        ("no-session", "BERTH_SESSION is not set"),
        ("no-token-file", "BERTH_API_TOKEN_FILE file"),
        ("empty-token", "BERTH_API_TOKEN_FILE file"),
    ],
)
def test_main_reports_bad_input(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    breakage: str,
    fragment: str,
) -> None:
    env = good_env(tmp_path)
    if breakage == "missing-options":
        env["BERTH_OPTIONS_FILE"] = str(tmp_path / "nope.json")
    elif breakage == "bad-json":
        Path(env["BERTH_OPTIONS_FILE"]).write_text("{'prompt': ")
    elif breakage == "bad-epoch":
        env["BERTH_EPOCH"] = "soon"
    elif breakage == "no-token-file":
        env["BERTH_API_TOKEN_FILE"] = str(tmp_path / "missing-token")
    elif breakage == "empty-token":
        Path(env["BERTH_API_TOKEN_FILE"]).write_text("  \n")
    else:
        del env["BERTH_SESSION"]
    for key in list(os.environ):
        if key.startswith("BERTH_"):
            monkeypatch.delenv(key)
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    handlers = {sig: signal.getsignal(sig) for sig in (signal.SIGTERM, signal.SIGINT)}
    with pytest.raises(SystemExit) as info:
        server.main()
    assert info.value.code == 2
    # run in-process, main() leaves the signal handlers alone (only the console script's
    # launcher installs the early one, session_runtime.launch)
    assert {sig: signal.getsignal(sig) for sig in handlers} == handlers
    msg = json.loads(Path(env["BERTH_TERMINATION_LOG"]).read_text())
    assert validate(msg) == []
    assert msg["outcome"] == "failed" and fragment in msg["reason"]
    assert "Traceback" not in capsys.readouterr().err


def test_a_finished_session_writes_its_termination_message_then_exits_at_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """After the session ends the process leaves with ``os._exit`` (no interpreter
    finalization, which costs hundreds of ms on every passivation), after the termination
    message and with the outcome's exit code."""
    from berth_contract.termination import TerminationMessage

    class Exited(Exception):
        pass

    def fake_exit(code: int) -> None:
        raise Exited(code)

    async def ended(*_: object) -> TerminationMessage:
        return TerminationMessage(outcome="fenced", reason="a newer epoch owns the session")

    env = good_env(tmp_path)
    for key in list(os.environ):
        if key.startswith("BERTH_"):
            monkeypatch.delenv(key)
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    monkeypatch.setattr(server, "run", ended)
    monkeypatch.setattr(server.os, "_exit", fake_exit)
    with pytest.raises(Exited) as info:
        server.main()
    assert info.value.args == (3,)
    msg = json.loads(Path(env["BERTH_TERMINATION_LOG"]).read_text())
    assert msg["outcome"] == "fenced"


@pytest.mark.parametrize(
    ("mode", "lanes", "refused"),
    [
        ("required", {}, True),
        ("best-effort", {}, False),
        ("required", {"execute": {"mode": "external", "laneWorker": {"name": "w"}}}, False),
    ],
)
def test_tool_sandbox_probe_without_landlock(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    mode: str,
    lanes: dict[str, object],
    refused: bool,
) -> None:
    """Without Landlock (the kernel answer stood in for: this kernel has it; the e2e test
    runs on a node without it) a session that runs bash here refuses at start-up, naming
    its node; best-effort or an all-external execute lane starts."""
    from session_runtime.tools import sandbox

    env = good_env(tmp_path) | {"NODE_NAME": "node-b", sandbox.SANDBOX_MODE_ENV: mode}
    opts = json.loads(Path(env["BERTH_OPTIONS_FILE"]).read_text())
    Path(env["BERTH_OPTIONS_FILE"]).write_text(json.dumps(opts | {"lanes": lanes}))
    for key in list(os.environ):
        if key.startswith("BERTH_"):
            monkeypatch.delenv(key)
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    monkeypatch.setattr(sandbox, "landlock_abi", lambda: 0)
    cfg, loaded, _ = server.load(env)
    refusal = server.tool_sandbox_refusal(cfg, loaded)
    assert (refusal is not None) == refused
    if refusal is not None:
        assert refusal.startswith("ToolSandboxUnavailable: node node-b ")
