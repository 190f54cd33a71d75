"""The scripted OpenAI-compatible server: real HTTP with the official openai client, streaming
and not, conversation keys, matching mode, and the command-line program."""

from __future__ import annotations

import asyncio
import json
import socket
import sys
from pathlib import Path
from typing import Any

import openai
import pytest

from session_runtime.errors import ConfigError, LlmError
from session_runtime.llm.client import (
    OpenAIChatClient,
    ProviderConfig,
    parse_model,
    resolve_endpoint,
)
from session_runtime.llm.scripted import ScriptedServer, load_script, parse_script


def _client(srv: ScriptedServer) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(base_url=srv.base_url, api_key="k", max_retries=0)


async def test_non_streaming_tool_call_and_usage(scripted: Any) -> None:
    srv = await scripted(
        [
            {
                "tool_calls": [{"name": "ls", "arguments": {"path": "."}}],
                "usage": {"prompt_tokens": 7, "completion_tokens": 3},
            },
            {"text": "bye"},
        ]
    )
    client = _client(srv)
    resp = await client.chat.completions.create(
        model="m", messages=[{"role": "user", "content": "hi"}]
    )
    tool_calls = resp.choices[0].message.tool_calls
    assert tool_calls is not None
    call = tool_calls[0]
    assert isinstance(call, openai.types.chat.ChatCompletionMessageFunctionToolCall)
    assert call.function.name == "ls" and json.loads(call.function.arguments) == {"path": "."}
    assert resp.choices[0].finish_reason == "tool_calls"
    assert resp.usage is not None and resp.usage.total_tokens == 10
    resp2 = await client.chat.completions.create(
        model="m", messages=[{"role": "user", "content": "hi"}]
    )
    assert resp2.choices[0].message.content == "bye"
    await client.close()


async def test_streaming_through_the_runtime_client(scripted: Any) -> None:
    srv = await scripted(
        {
            "turns": [
                {"text": "abcdefghij" * 5},
                {"tool_calls": [{"name": "bash", "arguments": {"command": "echo 1"}}]},
            ],
            "chunk_chars": 7,
        }
    )
    llm = OpenAIChatClient("m", srv.base_url, "k")
    deltas: list[str] = []

    async def on_text(t: str) -> None:
        deltas.append(t)

    msgs = [{"role": "user", "content": "stream"}]
    first = await llm.complete(msgs, None, on_text)
    assert first.text == "abcdefghij" * 5 and len(deltas) == 8 and "".join(deltas) == first.text
    assert first.finish_reason == "stop" and first.usage["total_tokens"] > 0
    second = await llm.complete(msgs, None)
    assert [(c.name, json.loads(c.arguments)) for c in second.tool_calls] == [
        ("bash", {"command": "echo 1"})
    ]
    with pytest.raises(LlmError, match="script exhausted"):
        await llm.complete(msgs, None)
    await llm.aclose()


async def test_conversations_replay_independently_and_matching_mode(scripted: Any) -> None:
    srv = await scripted(
        [
            {"text": "first"},
            {"text": "needle found", "when_last_tool_output_contains": "needle"},
            {"text": "fallback"},
        ]
    )
    llm = OpenAIChatClient("m", srv.base_url, "k")
    a = [{"role": "user", "content": "A"}]
    b = [{"role": "user", "content": "B"}]
    assert (await llm.complete(a, None)).text == "first"
    assert (await llm.complete(b, None)).text == "first"  # B replays from the start
    with_tool = [*a, {"role": "tool", "tool_call_id": "x", "content": "a needle here"}]
    assert (await llm.complete(with_tool, None)).text == "needle found"
    no_match = [*b, {"role": "tool", "tool_call_id": "x", "content": "hay"}]
    assert (await llm.complete(no_match, None)).text == "fallback"  # turn 1 skipped
    keys = {r["key"] for r in srv.requests}
    assert len(keys) == 2
    await llm.aclose()


async def test_error_turns_and_delay(scripted: Any) -> None:
    srv = await scripted(
        [{"error": {"status": 429, "message": "slow down"}}, {"text": "ok", "delay_ms": 20}]
    )
    client = _client(srv)
    with pytest.raises(openai.RateLimitError):
        await client.chat.completions.create(model="m", messages=[{"role": "user", "content": "x"}])
    ok = await client.chat.completions.create(
        model="m", messages=[{"role": "user", "content": "x"}]
    )
    assert ok.choices[0].message.content == "ok"
    await client.close()


def test_script_parsing(tmp_path: Path) -> None:
    y = tmp_path / "s.yaml"
    y.write_text("turns:\n  - text: hi\non_exhausted: repeat_last\n")
    assert load_script(y).on_exhausted == "repeat_last"
    j = tmp_path / "s.json"
    j.write_text(json.dumps([{"text": "x"}]))
    assert load_script(j).turns == [{"text": "x"}]
    bads: list[Any] = [{"nope": 1}, [{"usage": {}}], {"turns": [], "on_exhausted": "loop"}]
    for bad in bads:
        with pytest.raises(ValueError):
            parse_script(bad)


def test_model_strings_and_endpoints(monkeypatch: pytest.MonkeyPatch) -> None:
    assert parse_model("openai/gpt-4o") == ("openai", "gpt-4o")
    assert parse_model("gpt-4o") == ("openai", "gpt-4o")
    assert parse_model("local/org/model") == ("local", "org/model")
    with pytest.raises(ConfigError):
        parse_model("openai/")
    monkeypatch.setenv("OPENAI_BASE_URL", "http://env:1/v1")
    monkeypatch.setenv("OPENAI_API_KEY", "env-key")
    monkeypatch.setenv("MY_KEY", "mine")
    assert resolve_endpoint(None) == ("http://env:1/v1", "env-key")
    p = ProviderConfig("p", base_url="http://p:2/v1", api_key_env="MY_KEY")
    assert resolve_endpoint(p) == ("http://p:2/v1", "mine")


REPO_ROOT = str(Path(__file__).resolve().parents[4])


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def test_command_line_server(tmp_path: Path) -> None:
    script = tmp_path / "conv.json"
    script.write_text(json.dumps({"turns": [{"text": "from a process"}]}))
    port = _free_port()
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "session_runtime.llm.scripted",
        "--script",
        str(script),
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        cwd=REPO_ROOT,
    )
    try:
        llm = OpenAIChatClient("m", f"http://127.0.0.1:{port}/v1", "k")
        while True:  # wait for the process to listen (bounded by the global test timeout)
            try:
                resp = await llm.complete([{"role": "user", "content": "hi"}], None)
                break
            except LlmError:
                await asyncio.sleep(0.05)
        assert resp.text == "from a process"
        await llm.aclose()
    finally:
        proc.terminate()
        await proc.wait()


async def test_recorded_conversation_replays_identically(
    scripted: Any, agent_for: Any, tmp_path: Path
) -> None:
    from session_runtime.llm.scripted import script_from_history
    from tests.unit.runtime.conftest import opts

    original = [
        {"tool_calls": [{"name": "write", "arguments": {"file_path": "r.txt", "content": "r"}}]},
        {"text": "recorded answer"},
    ]
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    srv = await scripted(original)
    first = agent_for(srv).session(str(tmp_path / "a"), opts())
    await first.send_async("record me")
    replay_srv = await scripted(script_from_history(first.history()))
    second = agent_for(replay_srv).session(str(tmp_path / "b"), opts())
    result = await second.send_async("record me")
    assert result.text == "recorded answer"
    assert (tmp_path / "b" / "r.txt").read_text() == "r"
    assert second.history()[1:] == first.history()[1:]


async def test_history_cursor_answers_the_turn_the_history_calls_for(scripted: Any) -> None:
    """``cursor: history`` is stateless: a resumed conversation whose first pod abandoned an
    in-flight call still gets the turn that matches its history, not the one after it."""
    srv = await scripted({"cursor": "history", "turns": [{"text": "t0"}, {"text": "t1"}]})
    client = _client(srv)
    first = [{"role": "user", "content": "go"}]
    for _ in range(2):  # the same history twice (an abandoned call, then the retry)
        resp = await client.chat.completions.create(model="m", messages=first)
        assert resp.choices[0].message.content == "t0"
    later = [*first, {"role": "assistant", "content": "t0"}, {"role": "user", "content": "more"}]
    resp = await client.chat.completions.create(model="m", messages=later)
    assert resp.choices[0].message.content == "t1"
    await client.close()
    with pytest.raises(ValueError, match="cursor"):
        parse_script({"cursor": "sideways", "turns": [{"text": "x"}]})


async def test_provider_settings_reach_the_server_and_retries_honour_retry_after(
    scripted: Any, tmp_path: Path
) -> None:
    """The openai client's own retries (not a hand loop) take a 429 with Retry-After, and the
    organization, project and extra headers of the provider are sent."""
    from session_runtime.errors import LlmTransientError

    overloaded = {"error": {"status": 429, "message": "slow down", "retry_after": 0}}
    srv = await scripted([overloaded, {"text": "after the retry"}])
    provider = ProviderConfig(
        name="openai",
        max_retries=2,
        organization="org-1",
        project="proj-1",
        headers=(("X-Tenant", "acme"),),
        timeout_s=30,
    )
    client = OpenAIChatClient("m", srv.base_url, "k", provider=provider)
    answer = await client.complete([{"role": "user", "content": "hi"}], None)
    assert answer.text == "after the retry"
    assert len(srv.requests) == 2  # the 429 and its retry
    sent = srv.requests[-1]["headers"]
    assert (sent["openai-organization"], sent["openai-project"]) == ("org-1", "proj-1")
    assert sent["x-tenant"] == "acme"
    assert "authorization" not in sent  # the server never records credentials
    await client.aclose()

    srv = await scripted([overloaded, {"text": "never reached"}])
    no_retry = OpenAIChatClient("m", srv.base_url, "k", provider=ProviderConfig(name="openai"))
    with pytest.raises(LlmTransientError, match="429"):
        await no_retry.complete([{"role": "user", "content": "hi"}], None)
    await no_retry.aclose()


def test_an_unreadable_ca_bundle_is_a_config_error(tmp_path: Path) -> None:
    bad = tmp_path / "ca.crt"
    bad.write_text("not a certificate")
    with pytest.raises(ConfigError, match="CA bundle"):
        OpenAIChatClient("m", None, "k", provider=ProviderConfig(name="x", ca_file=str(bad)))
