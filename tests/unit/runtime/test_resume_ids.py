"""A resumed process with a fresh replay id generator never reuses the id of the run it resumes
(A3S: resume_run allocates a new run id and keeps the original run intact)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from session_runtime import Agent, SessionOptions
from session_runtime.hostenv import HostEnv
from session_runtime.store import MemorySessionStore


def _agent(srv: Any) -> Agent:
    return Agent.create(
        {
            "default_model": "scripted/m",
            "providers": {"scripted": {"base_url": srv.base_url, "api_key": "k", "models": ["m"]}},
        }
    )


async def test_resume_in_a_new_process_gets_a_new_run_id(scripted: Any, tmp_path: Path) -> None:
    write = {"name": "write", "arguments": {"file_path": "a", "content": "1"}}
    srv = await scripted(
        {
            "cursor": "history",
            "turns": [
                {"tool_calls": [write]},
                {"text": "done"},
            ],
        }
    )
    store = MemorySessionStore()

    def opts() -> SessionOptions:
        return SessionOptions(
            model="scripted/m", session_id="s", session_store=store, host_env=HostEnv.replay()
        )

    first = _agent(srv)
    session = first.session(str(tmp_path), opts())
    result = await session.send_async("go")
    original = result.run_id
    await first.close_async()

    second = _agent(srv)  # a "new process": a fresh replay id generator starting at 0 again
    resumed = second.resume_session("s", opts())
    again = await resumed.resume_run_async(original)
    assert again.run_id != original
    ids = [r["id"] if isinstance(r, dict) else r.id for r in resumed.runs()]
    assert original in ids and again.run_id in ids
    await second.close_async()
