"""``Agent``: configuration and provider state, and the registry of its live sessions.

Owned by ``session_runtime.agent``; the entry point of the public API (A3S ``Agent.create``,
``agent.session``, ``agent.resume_session``, ``list_sessions``, ``close_session``, ``close``,
``is_closed``).

Config (``Agent.create(config)``): a dict, a path to a JSON/YAML file, or inline JSON/YAML text::

    {"default_model": "openai/gpt-4o-mini",
     "providers": {"openai": {"base_url": "http://127.0.0.1:8099/v1",
                              "api_key_env": "OPENAI_API_KEY", "models": ["gpt-4o-mini"]}}}

A model string is ``provider/model``; a provider missing from the config uses the
``OPENAI_BASE_URL``/``OPENAI_API_KEY`` environment as the openai package does. Keys never enter
saved session data.
"""

from __future__ import annotations

import dataclasses
import json
import os
import threading
from typing import Any

from session_runtime.agent.bridge import LoopThread
from session_runtime.agent.options import SessionOptions, merge_options
from session_runtime.agent.session import Session
from session_runtime.errors import AgentClosedError, ConfigError, ResumeError, SessionNotFoundError
from session_runtime.hostenv import HostEnv
from session_runtime.llm.client import (
    LlmClient,
    OpenAIChatClient,
    ProviderConfig,
    parse_model,
    resolve_endpoint,
)
from session_runtime.tools.base import ToolExecutor

DEFAULT_MODEL = "openai/gpt-4o-mini"


def load_config(config: str | os.PathLike[str] | dict[str, Any] | None) -> dict[str, Any]:
    """Normalise the ``Agent.create`` argument into a dict. Raises ConfigError."""
    if config is None:
        return {}
    if isinstance(config, dict):
        return dict(config)
    text = str(config)
    if os.path.isfile(text):
        with open(text, encoding="utf-8") as fh:
            text = fh.read()
    try:
        data: Any = json.loads(text)
    except ValueError:
        import yaml

        try:
            data = yaml.safe_load(text)
        except yaml.YAMLError as exc:
            raise ConfigError(f"agent config is neither JSON nor YAML: {exc}") from exc
    if not isinstance(data, dict):
        raise ConfigError("agent config must be a mapping with default_model and providers")
    return data


def parse_providers(raw: Any) -> dict[str, ProviderConfig]:
    """``{name: {base_url, api_key_env, api_key?, models, timeout_s?, max_retries?,
    organization?, project?, headers?, ca_file?}}`` -> ProviderConfig by name. Raises
    ConfigError for a malformed entry."""
    if raw is None:
        return {}
    if not isinstance(raw, dict):
        raise ConfigError("providers must be a mapping of name to settings")
    out: dict[str, ProviderConfig] = {}
    for name, spec in raw.items():
        if not isinstance(spec, dict):
            raise ConfigError(f"provider {name!r} must be a mapping")
        headers = spec.get("headers") or {}
        if not isinstance(headers, dict):
            raise ConfigError(f"provider {name!r}: headers must be a mapping")
        timeout = spec.get("timeout_s")
        out[str(name)] = ProviderConfig(
            name=str(name),
            base_url=spec.get("base_url"),
            api_key_env=spec.get("api_key_env"),
            api_key=spec.get("api_key"),
            models=tuple(spec.get("models") or ()),
            timeout_s=float(timeout) if timeout else None,
            max_retries=int(spec.get("max_retries") or 0),
            organization=spec.get("organization"),
            project=spec.get("project"),
            headers=tuple((str(k), str(v)) for k, v in headers.items()),
            ca_file=spec.get("ca_file"),
        )
    return out


class Agent:
    """Owns providers and live sessions. Build with :meth:`create`."""

    def __init__(self, config: dict[str, Any]) -> None:
        self.default_model = str(config.get("default_model") or DEFAULT_MODEL)
        self.providers = parse_providers(config.get("providers"))
        self._sessions: dict[str, Session] = {}
        self._lock = threading.Lock()
        self._closed = False
        self._bridge = LoopThread()
        self._env = HostEnv()

    @classmethod
    def create(cls, config: str | os.PathLike[str] | dict[str, Any] | None = None) -> Agent:
        """Create an agent from a dict, a config file path, inline JSON/YAML, or None."""
        return cls(load_config(config))

    def llm_for(self, model: str | None, timeout_s: float = 600.0) -> LlmClient:
        """An OpenAI-compatible client for ``provider/model`` (default model if None)."""
        provider, name = parse_model(model or self.default_model)
        config = self.providers.get(provider)
        base_url, key = resolve_endpoint(config)
        return OpenAIChatClient(name, base_url, key, timeout_s, config)

    def _check_open(self) -> None:
        if self._closed:
            raise AgentClosedError()

    def _register(self, session: Session) -> Session:
        with self._lock:
            self._sessions[session.session_id] = session
        return session

    def _forget(self, session_id: str) -> None:
        with self._lock:
            self._sessions.pop(session_id, None)

    def session(
        self,
        workspace: str | os.PathLike[str],
        options: SessionOptions | None = None,
        *,
        executor: ToolExecutor | None = None,
        llm: LlmClient | None = None,
        **option_fields: Any,
    ) -> Session:
        """A new session bound to ``workspace`` (an existing directory).

        Options come as one ``SessionOptions`` or as its fields in keywords, as the A3S docs
        write both (``agent.session("/repo", queue_config=qc)``). ``executor`` replaces the
        tool executor (the session pod injects a LaneQueue with a Redis transport); ``llm``
        replaces the OpenAI client (tests of other components). Raises TypeError for options
        given both ways or an unknown keyword (named), AgentClosedError, ConfigError,
        ValueError (bad workspace or limits).
        """
        self._check_open()
        if option_fields:
            if options is not None:
                raise TypeError(
                    "agent.session: pass a SessionOptions or its fields as keywords, not both"
                )
            known = {f.name for f in dataclasses.fields(SessionOptions)}
            unknown = sorted(set(option_fields) - known)
            if unknown:
                raise TypeError(f"agent.session: unknown session options: {', '.join(unknown)}")
            options = SessionOptions(**option_fields)
        # A copy: the caller may reuse one SessionOptions for several sessions.
        opts = dataclasses.replace(options) if options is not None else SessionOptions()
        env = opts.host_env or self._env
        opts.host_env = env
        session_id = opts.session_id or env.new_id()
        opts.session_id = session_id
        return self._register(
            Session(
                session_id=session_id,
                workspace=str(workspace),
                options=opts,
                llm=llm or self.llm_for(opts.model, opts.llm_timeout_s),
                bridge=self._bridge,
                executor=executor,
                on_close=self._forget,
                owns_llm=llm is None,
            )
        )

    def resume_session(
        self,
        session_id: str,
        options: SessionOptions | None = None,
        *,
        workspace: str | os.PathLike[str] | None = None,
        executor: ToolExecutor | None = None,
        llm: LlmClient | None = None,
    ) -> Session:
        """Rebuild a saved session from ``options.session_store`` (caller options win over the
        stored ones, identity labels included). ``workspace`` overrides the stored path (a new pod
        may mount it elsewhere). Runs that were running when the process stopped are listed as
        ``interrupted``; pass their id to ``resume_run``.

        Raises ResumeError without a store, SessionNotFoundError if nothing was saved.
        """
        self._check_open()
        if options is None or options.session_store is None:
            raise ResumeError("resume_session requires a session_store")
        data = options.session_store.load_session(session_id)
        if data is None:
            raise SessionNotFoundError(session_id)
        merged = merge_options(dict(data.get("options") or {}), options)
        merged.session_id = session_id
        merged.host_env = merged.host_env or self._env
        return self._register(
            Session(
                session_id=session_id,
                workspace=str(workspace or data.get("workspace") or ""),
                options=merged,
                llm=llm or self.llm_for(merged.model, merged.llm_timeout_s),
                bridge=self._bridge,
                executor=executor,
                restored=data,
                on_close=self._forget,
                owns_llm=llm is None,
            )
        )

    def list_sessions(self) -> list[str]:
        """Ids of the live (not closed) sessions, sorted."""
        with self._lock:
            return sorted(sid for sid, s in self._sessions.items() if not s.is_closed())

    def get_session(self, session_id: str) -> Session | None:
        """A live session by id (Berth convenience)."""
        with self._lock:
            return self._sessions.get(session_id)

    def close_session(self, session_id: str) -> bool:
        """Close one live session by id; False if there is none."""
        session = self.get_session(session_id)
        if session is None:
            return False
        session.close()
        return True

    async def close_session_async(self, session_id: str) -> bool:
        """Async twin of :meth:`close_session`."""
        session = self.get_session(session_id)
        if session is None:
            return False
        await session.close_async()
        return True

    def close(self) -> None:
        """Close every live session and the agent (idempotent); later ``session``/
        ``resume_session`` raise AgentClosedError."""
        if self._closed:
            return
        self._closed = True
        with self._lock:
            sessions = list(self._sessions.values())
        for s in sessions:
            s.close()
        self._bridge.stop()

    async def close_async(self) -> None:
        """Async twin of :meth:`close`."""
        if self._closed:
            return
        self._closed = True
        with self._lock:
            sessions = list(self._sessions.values())
        for s in sessions:
            await s.close_async()
        self._bridge.stop()

    def is_closed(self) -> bool:
        """True after ``close()``."""
        return self._closed
