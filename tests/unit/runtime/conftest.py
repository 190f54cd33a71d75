"""Fixtures for the runtime tests: a real scripted OpenAI-compatible server over HTTP, a
workspace directory, an agent pointed at the server, and a small dict-backed session store that
implements ``store.base.SessionStore`` (used until the store package's MemorySessionStore lands).
"""

from __future__ import annotations

import copy
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from session_runtime import Agent, SessionOptions
from session_runtime.llm.scripted import ScriptedServer
from session_runtime.store.base import LoopCheckpoint, PendingRound

ServerFactory = Callable[[Any], Awaitable[ScriptedServer]]


@pytest.fixture
async def scripted() -> AsyncIterator[ServerFactory]:
    """``await scripted(turns)`` starts a ScriptedServer on a free port; all stop at teardown."""
    servers: list[ScriptedServer] = []

    async def start(script: Any) -> ScriptedServer:
        srv = ScriptedServer(script)
        await srv.start()
        servers.append(srv)
        return srv

    yield start
    for srv in servers:
        await srv.stop()


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    ws = tmp_path / "ws"
    ws.mkdir()
    return ws


def make_agent(srv: ScriptedServer) -> Agent:
    return Agent.create({"providers": {"openai": {"base_url": srv.base_url, "api_key": "k"}}})


@pytest.fixture
async def agent_for() -> AsyncIterator[Callable[[ScriptedServer], Agent]]:
    agents: list[Agent] = []

    def build(srv: ScriptedServer) -> Agent:
        agent = make_agent(srv)
        agents.append(agent)
        return agent

    yield build
    for agent in agents:
        await agent.close_async()


def opts(**kw: Any) -> SessionOptions:
    """SessionOptions with a fast LLM backoff for tests."""
    kw.setdefault("llm_backoff_ms", 1)
    return SessionOptions(**kw)


class DictStore:
    """A dict-backed SessionStore that records every call in ``calls`` (name, args...)."""

    def __init__(self) -> None:
        self.sessions: dict[str, dict[str, Any]] = {}
        self.checkpoints: dict[tuple[str, str], LoopCheckpoint] = {}
        self.pending: dict[tuple[str, str], PendingRound] = {}
        self.calls: list[tuple[Any, ...]] = []

    def save_session(self, session_id: str, data: dict[str, Any]) -> None:
        self.calls.append(("save_session", session_id))
        self.sessions[session_id] = copy.deepcopy(data)

    def load_session(self, session_id: str) -> dict[str, Any] | None:
        data = self.sessions.get(session_id)
        return copy.deepcopy(data) if data is not None else None

    def begin_round(
        self, session_id: str, run_id: str, turn: int, assistant_message: dict[str, Any]
    ) -> None:
        self.calls.append(("begin_round", run_id, turn))
        self.pending[(session_id, run_id)] = PendingRound(
            run_id, turn, copy.deepcopy(assistant_message)
        )

    def record_tool_result(
        self, session_id: str, run_id: str, turn: int, tool_call_id: str, result: dict[str, Any]
    ) -> None:
        self.calls.append(("record_tool_result", run_id, turn, tool_call_id))
        self.pending[(session_id, run_id)].results[tool_call_id] = dict(result)

    def commit_round(self, checkpoint: LoopCheckpoint) -> None:
        self.calls.append(("commit_round", checkpoint.run_id, checkpoint.turn))
        key = (checkpoint.session_id, checkpoint.run_id)
        self.checkpoints[key] = copy.deepcopy(checkpoint)
        pending = self.pending.get(key)
        if pending is not None and pending.turn <= checkpoint.turn:
            del self.pending[key]

    def load_checkpoint(self, session_id: str, run_id: str) -> LoopCheckpoint | None:
        # Keyed by run id alone on purpose: a shared store may hand back another session's
        # checkpoint, which the session must refuse.
        for (_sid, rid), cp in self.checkpoints.items():
            if rid == run_id:
                return copy.deepcopy(cp)
        return None

    def load_pending_round(self, session_id: str, run_id: str) -> PendingRound | None:
        pending = self.pending.get((session_id, run_id))
        return copy.deepcopy(pending) if pending is not None else None


@pytest.fixture
def store() -> DictStore:
    return DictStore()
