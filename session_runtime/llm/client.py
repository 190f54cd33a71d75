"""The LLM client: chat completions through the official ``openai`` package.

Owned by ``session_runtime.llm``; the agent loop calls :meth:`LlmClient.complete` once per model
turn. Works against any OpenAI-compatible endpoint (a provider's ``base_url``, or the
``OPENAI_BASE_URL``/``OPENAI_API_KEY`` environment as the openai package reads them). In a session
pod the key is a mounted file named by ``BERTH_LLM_API_KEY_FILE`` (read once, never copied into
the environment tools inherit); ``OPENAI_API_KEY`` remains for local runs. Requests
always stream (``stream_options.include_usage``), so text arrives as deltas and usage at the end.

Retries: the openai package's own machinery (``max_retries`` per provider, default 0 here; the
operator renders ``spec.llm.maxRetries``, default 2) retries connection errors, 408, 409, 429 and
5xx with backoff, honouring ``Retry-After``. Errors: what is still failing after those retries —
transient failures (connection, timeout, 429, 5xx) raise ``LlmTransientError``, which the loop's
circuit breaker counts; others raise ``LlmError``.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import importlib
import os
import ssl
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

import openai

from berth_contract import envvars
from session_runtime.errors import ConfigError, LlmError, LlmTransientError

TextCallback = Callable[[str], Awaitable[None]]


@dataclass(frozen=True, slots=True)
class RawToolCall:
    """A tool call as the model sent it: ``arguments`` is the raw JSON text (maybe malformed)."""

    id: str
    name: str
    arguments: str


@dataclass(slots=True)
class LlmResponse:
    """One model turn: text, tool calls, ``finish_reason`` (``stop``/``tool_calls``/``length``)
    and ``usage`` (``prompt_tokens``, ``completion_tokens``, ``total_tokens``)."""

    text: str
    tool_calls: list[RawToolCall] = field(default_factory=list)
    finish_reason: str | None = None
    usage: dict[str, int] = field(default_factory=dict)


class LlmClient(Protocol):
    """What the loop needs from a model endpoint."""

    model: str

    async def complete(
        self,
        messages: list[dict[str, Any]],
        tools: list[dict[str, Any]] | None,
        on_text: TextCallback | None = None,
    ) -> LlmResponse:
        """One chat completion over OpenAI-format ``messages`` with optional ``tools``;
        ``on_text`` gets text deltas in order. Raises LlmTransientError / LlmError."""
        ...


@dataclass(frozen=True, slots=True)
class ProviderConfig:
    """A provider of the agent config: ``base_url`` (None = openai's default / env), the name of
    the env var holding its key (``api_key_env``), an optional literal ``api_key`` (never saved),
    and the ``models`` it serves (informational)."""

    name: str
    base_url: str | None = None
    api_key_env: str | None = None
    api_key: str | None = None
    models: tuple[str, ...] = ()
    timeout_s: float | None = None
    """Per-request timeout (seconds); None: the session's ``llm_timeout_s``."""
    max_retries: int = 0
    """Retries of the openai client (connection errors, 408, 409, 429, 5xx; ``Retry-After``)."""
    organization: str | None = None
    """``OpenAI-Organization`` header."""
    project: str | None = None
    """``OpenAI-Project`` header."""
    headers: tuple[tuple[str, str], ...] = ()
    """Extra request headers (a proxy's routing or tenant headers; never credentials)."""
    ca_file: str | None = None
    """PEM bundle of the CAs to trust for ``base_url`` (a private or proxy endpoint)."""


def parse_model(model: str) -> tuple[str, str]:
    """Split ``provider/model`` into its parts (``gpt-4o`` alone means provider ``openai``).

    Raises ConfigError for an empty provider or model name.
    """
    provider, sep, name = model.partition("/")
    if not sep:
        provider, name = "openai", model
    if not provider or not name:
        raise ConfigError(f"model must look like 'provider/model', got {model!r}")
    return provider, name


#: Environment variable naming the file that holds the LLM API key (the Berth pod contract).
_MAX_KEY_FILE_BYTES = 4096


@functools.lru_cache(maxsize=8)
def read_key_file(path: str) -> str | None:
    """The API key in ``path`` (whitespace stripped), read once per path; None when the file is
    missing, unreadable, empty or larger than 4 KiB. The key is never logged."""
    try:
        with open(path, "rb") as fh:
            raw = fh.read(_MAX_KEY_FILE_BYTES + 1)
    except OSError:
        return None
    if len(raw) > _MAX_KEY_FILE_BYTES:
        return None
    return raw.decode(errors="replace").strip() or None


def resolve_endpoint(provider: ProviderConfig | None) -> tuple[str | None, str]:
    """(base_url, api_key) for a provider. The key is, in order: the provider's literal
    ``api_key``, its ``api_key_env`` variable, the file named by ``BERTH_LLM_API_KEY_FILE``,
    ``OPENAI_API_KEY``. The base URL falls back to ``OPENAI_BASE_URL``."""
    base_url = provider.base_url if provider else None
    key: str | None = None
    if provider is not None:
        key = provider.api_key or (
            os.environ.get(provider.api_key_env) if provider.api_key_env else None
        )
    base_url = base_url or os.environ.get("OPENAI_BASE_URL")
    key_file = os.environ.get(envvars.LLM_API_KEY_FILE, "").strip()
    key = key or (read_key_file(key_file) if key_file else None)
    key = key or os.environ.get("OPENAI_API_KEY")
    # Local OpenAI-compatible servers often need no key; the openai package requires a value.
    return base_url, key or "unset"


@functools.cache
def default_tls_context() -> ssl.SSLContext:
    """The process's TLS context for endpoints without a CA bundle of their own: the system's
    trust store as OpenSSL finds it (``SSL_CERT_FILE``/``SSL_CERT_DIR`` honoured, as the HTTP
    client's own default does). Built once: loading the trust store costs ~25 ms of CPU, which
    a new client per event loop would otherwise pay again."""
    return ssl.create_default_context()


def warm_up() -> None:
    """Do now what the first request would do lazily: import the HTTP stack behind the
    ``openai`` client (its chat resources, streaming, transport and async backend) and build
    the shared TLS context. No request is sent and no thread is started, so a warm pod can call
    it before it confines itself (:mod:`session_runtime.pod.warm`). About 180 ms of CPU moved
    from a session's first model call to the warm pod's start-up."""
    client = openai.AsyncOpenAI(
        api_key="warm-up",
        base_url="http://127.0.0.1:9/v1",
        http_client=openai.DefaultAsyncHttpxClient(verify=default_tls_context()),
    )
    client.chat.completions  # noqa: B018 - imports the chat resources on first access
    # Imported by the first streamed answer and the first connection; modules of the openai
    # package's dependencies, so a layout change there only costs the first call its speed.
    for module in ("openai.lib.streaming.chat", "anyio._backends._asyncio", "jiter"):
        with contextlib.suppress(ImportError):
            importlib.import_module(module)


class OpenAIChatClient:
    """:class:`LlmClient` over ``openai.AsyncOpenAI``. ``model`` is the name sent to the server
    (the part after ``provider/``). One AsyncOpenAI per event loop (its HTTP pool is loop-bound).
    ``timeout_s`` is the per-request timeout in seconds; ``provider`` carries the client settings
    (retries, organization, project, headers, CA bundle; see :class:`ProviderConfig`).
    Raises ``ConfigError`` when the CA bundle cannot be read."""

    def __init__(
        self,
        model: str,
        base_url: str | None,
        api_key: str,
        timeout_s: float = 600.0,
        provider: ProviderConfig | None = None,
    ) -> None:
        self.model = model
        self.base_url = base_url
        self._api_key = api_key
        self._provider = provider or ProviderConfig(name="openai")
        self._timeout_s = self._provider.timeout_s or timeout_s
        self._ssl: ssl.SSLContext | None = None
        if self._provider.ca_file:
            try:
                self._ssl = ssl.create_default_context(cafile=self._provider.ca_file)
            except (OSError, ssl.SSLError) as exc:
                raise ConfigError(
                    f"cannot read the LLM CA bundle {self._provider.ca_file}: {exc}"
                ) from exc
        self._clients: dict[int, tuple[asyncio.AbstractEventLoop, openai.AsyncOpenAI]] = {}

    def _client(self) -> openai.AsyncOpenAI:
        loop = asyncio.get_running_loop()
        entry = self._clients.get(id(loop))
        if entry is None or entry[0] is not loop:
            for key, (other, _) in list(self._clients.items()):
                if other.is_closed():
                    del self._clients[key]
            p = self._provider
            client = openai.AsyncOpenAI(
                api_key=self._api_key,
                base_url=self.base_url,
                max_retries=p.max_retries,
                timeout=self._timeout_s,
                organization=p.organization,
                project=p.project,
                default_headers=dict(p.headers) or None,
                http_client=openai.DefaultAsyncHttpxClient(
                    verify=self._ssl if self._ssl is not None else default_tls_context()
                ),
            )
            entry = (loop, client)
            self._clients[id(loop)] = entry
        return entry[1]

    async def aclose(self) -> None:
        """Close the HTTP client of the running loop (others are dropped with their loop)."""
        entry = self._clients.pop(id(asyncio.get_running_loop()), None)
        if entry is not None:
            await entry[1].close()

    async def complete(
        self,
        messages: list[dict[str, Any]],
        tools: list[dict[str, Any]] | None,
        on_text: TextCallback | None = None,
    ) -> LlmResponse:
        """Stream one chat completion; call ``on_text`` for every text delta, in order."""
        kwargs: dict[str, Any] = {
            "model": self.model,
            "messages": messages,
            "stream": True,
            "stream_options": {"include_usage": True},
        }
        if tools:
            kwargs["tools"] = tools
        try:
            stream = await self._client().chat.completions.create(**kwargs)
            return await _collect(stream, on_text)
        except (openai.APIConnectionError, openai.APITimeoutError) as exc:
            raise LlmTransientError(f"LLM connection failed: {exc}") from exc
        except openai.APIStatusError as exc:
            msg = f"LLM request failed with HTTP {exc.status_code}: {_error_text(exc)}"
            if exc.status_code == 429 or exc.status_code >= 500:
                raise LlmTransientError(msg) from exc
            raise LlmError(msg) from exc
        except openai.OpenAIError as exc:
            raise LlmError(f"LLM request failed: {exc}") from exc


def _error_text(exc: openai.APIStatusError) -> str:
    body = exc.body
    if isinstance(body, dict):
        inner = body.get("error", body)
        if isinstance(inner, dict) and "message" in inner:
            return str(inner["message"])
    return str(exc.message)


async def _collect(stream: Any, on_text: TextCallback | None) -> LlmResponse:  # noqa: C901
    text_parts: list[str] = []
    calls: dict[int, dict[str, Any]] = {}
    finish: str | None = None
    usage: dict[str, int] = {}
    async for chunk in stream:
        if chunk.usage is not None:
            usage = {
                "prompt_tokens": int(chunk.usage.prompt_tokens or 0),
                "completion_tokens": int(chunk.usage.completion_tokens or 0),
                "total_tokens": int(chunk.usage.total_tokens or 0),
            }
        for choice in chunk.choices:
            delta = choice.delta
            if delta.content:
                text_parts.append(delta.content)
                if on_text is not None:
                    await on_text(delta.content)
            for tc in delta.tool_calls or []:
                slot = calls.setdefault(tc.index, {"id": "", "name": "", "arguments": ""})
                if tc.id:
                    slot["id"] = tc.id
                if tc.function is not None:
                    if tc.function.name:
                        slot["name"] += tc.function.name
                    if tc.function.arguments:
                        slot["arguments"] += tc.function.arguments
            if choice.finish_reason:
                finish = choice.finish_reason
    tool_calls = [RawToolCall(c["id"], c["name"], c["arguments"]) for _, c in sorted(calls.items())]
    return LlmResponse("".join(text_parts), tool_calls, finish, usage)
