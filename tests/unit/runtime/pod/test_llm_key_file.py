"""The LLM key reaches the client from the mounted file ``BERTH_LLM_API_KEY_FILE`` (never from
the environment tools inherit); ``OPENAI_API_KEY`` stays for local runs."""

from __future__ import annotations

from pathlib import Path

import pytest

from session_runtime.llm.client import ProviderConfig, read_key_file, resolve_endpoint


@pytest.fixture(autouse=True)
def clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for key in ("BERTH_LLM_API_KEY_FILE", "OPENAI_API_KEY", "OPENAI_BASE_URL"):
        monkeypatch.delenv(key, raising=False)
    read_key_file.cache_clear()


def test_key_file_is_used_when_no_env_key(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    key = tmp_path / "api-key"
    key.write_text("sk-from-file\n")
    monkeypatch.setenv("BERTH_LLM_API_KEY_FILE", str(key))
    assert resolve_endpoint(None) == (None, "sk-from-file")
    provider = ProviderConfig("openai", base_url="http://llm/v1", api_key_env="OPENAI_API_KEY")
    assert resolve_endpoint(provider) == ("http://llm/v1", "sk-from-file")


def test_key_file_is_read_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    key = tmp_path / "api-key"
    key.write_text("first")
    monkeypatch.setenv("BERTH_LLM_API_KEY_FILE", str(key))
    assert resolve_endpoint(None)[1] == "first"
    key.write_text("second")
    assert resolve_endpoint(None)[1] == "first"


def test_openai_env_still_works_for_local_runs(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-local")
    assert resolve_endpoint(None) == (None, "sk-local")


@pytest.mark.parametrize("content", [None, b"", b"   \n", b"x" * 5000])
def test_unusable_key_file_falls_back(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, content: bytes | None
) -> None:
    key = tmp_path / "api-key"
    if content is not None:
        key.write_bytes(content)
    monkeypatch.setenv("BERTH_LLM_API_KEY_FILE", str(key))
    assert resolve_endpoint(None)[1] == "unset"
