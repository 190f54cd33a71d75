"""Fixtures for the store tests: every contract test runs against each store implementation."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from session_runtime.store import FileSessionStore, LoopCheckpoint, MemorySessionStore


@pytest.fixture(params=["memory", "file"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Any:
    """Each SessionStore implementation, empty."""
    if request.param == "memory":
        return MemorySessionStore()
    return FileSessionStore(tmp_path / "store", epoch=1)


def assistant(turn: int, *calls: tuple[str, str, str]) -> dict[str, Any]:
    """An OpenAI-format assistant message asking for ``calls`` = (id, name, arguments-json)."""
    return {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {"id": cid, "type": "function", "function": {"name": name, "arguments": args}}
            for cid, name, args in calls
        ],
    }


def tool_msg(call_id: str, output: str) -> dict[str, Any]:
    return {"role": "tool", "tool_call_id": call_id, "content": output}


def checkpoint(
    session_id: str, run_id: str, turn: int, messages: list[dict[str, Any]], **kw: Any
) -> LoopCheckpoint:
    return LoopCheckpoint(
        run_id=run_id,
        session_id=session_id,
        turn=turn,
        messages=messages,
        total_usage=kw.pop(
            "total_usage",
            {"prompt_tokens": 10 * turn, "completion_tokens": turn, "total_tokens": 11 * turn},
        ),
        tool_calls_count=kw.pop("tool_calls_count", turn),
        checkpoint_ms=kw.pop("checkpoint_ms", 1_000 + turn),
        **kw,
    )
