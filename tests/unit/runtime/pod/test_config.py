"""Table tests for session_runtime.pod.config (environment → PodConfig)."""

from __future__ import annotations

from pathlib import Path

import pytest

from session_runtime.pod.config import PodConfigError, parse_env, termination_log_from_env

BASE = {
    "BERTH_SESSION": "team-a/fix-bug",
    "BERTH_SESSION_UID": "0b6c1f2e-uid",
    "BERTH_EPOCH": "2",
    "BERTH_STORE_DIR": "store",
    "BERTH_WORKSPACE": "ws",
    "BERTH_OPTIONS_FILE": "opts/options.json",
    "BERTH_API_TOKEN_FILE": "secret/api-token",
}


def test_minimal_env_uses_defaults() -> None:
    cfg = parse_env(BASE)
    assert (cfg.namespace, cfg.name, cfg.session_key) == ("team-a", "fix-bug", "team-a/fix-bug")
    assert cfg.epoch == 2
    assert cfg.store_dir == Path("store")
    assert cfg.resume_run_id is None
    assert cfg.termination_log is None
    assert cfg.http_port == 8080
    assert cfg.pod_ip == "0.0.0.0"


def test_full_env() -> None:
    cfg = parse_env(
        BASE
        | {
            "BERTH_RESUME_RUN_ID": "run-7",
            "BERTH_TERMINATION_LOG": "tl",
            "BERTH_REDIS_URL": "redis://127.0.0.1:6379/0",
            "BERTH_SHARED_ROOT": "vol",
            "POD_NAME": "p",
            "POD_IP": "127.0.0.9",
            "NODE_NAME": "n1",
            "BERTH_HTTP_PORT": "9090",
            "OPENAI_API_KEY": "sk-secret",
            "OPENAI_BASE_URL": "http://127.0.0.1:1/v1",
        }
    )
    assert cfg.resume_run_id == "run-7"
    assert cfg.termination_log == Path("tl")
    assert cfg.shared_root == Path("vol")
    assert (cfg.pod_ip, cfg.http_port, cfg.node_name) == ("127.0.0.9", 9090, "n1")
    assert "sk-secret" not in repr(cfg)  # the key is left to the runtime's LLM client


@pytest.mark.parametrize(
    ("override", "fragment"),
    [
        ({"BERTH_SESSION": ""}, "BERTH_SESSION is not set"),
        ({"BERTH_SESSION": "no-slash"}, "BERTH_SESSION must be '<namespace>/<name>'"),
        ({"BERTH_SESSION": "Bad_NS/x"}, "BERTH_SESSION must be"),
        ({"BERTH_SESSION_UID": " "}, "BERTH_SESSION_UID is not set"),
        ({"BERTH_EPOCH": "x"}, "BERTH_EPOCH must be an integer >= 0"),
        ({"BERTH_EPOCH": "-1"}, "BERTH_EPOCH must be an integer >= 0"),
        ({"BERTH_STORE_DIR": ""}, "BERTH_STORE_DIR is not set"),
        ({"BERTH_WORKSPACE": ""}, "BERTH_WORKSPACE is not set"),
        ({"BERTH_OPTIONS_FILE": ""}, "BERTH_OPTIONS_FILE is not set"),
        ({"BERTH_API_TOKEN_FILE": ""}, "BERTH_API_TOKEN_FILE is not set"),
        ({"BERTH_HTTP_PORT": "http"}, "BERTH_HTTP_PORT must be an integer"),
        ({"BERTH_HTTP_PORT": "70000"}, "BERTH_HTTP_PORT must be an integer"),
    ],
)
def test_bad_env_is_reported(override: dict[str, str], fragment: str) -> None:
    with pytest.raises(PodConfigError) as info:
        parse_env(BASE | override)
    assert any(fragment in p for p in info.value.problems), info.value.problems


def test_every_problem_is_listed_at_once() -> None:
    with pytest.raises(PodConfigError) as info:
        parse_env({"BERTH_EPOCH": "nope"})
    assert len(info.value.problems) == 7
    assert str(info.value).startswith("invalid session pod environment: ")


@pytest.mark.parametrize(("value", "expected"), [("", None), ("x/tl", Path("x/tl"))])
def test_termination_log_alone(value: str, expected: Path | None) -> None:
    assert termination_log_from_env({"BERTH_TERMINATION_LOG": value}) == expected
