"""A resumed run that dies before its first checkpoint must not make the next pod start the task
afresh (found by the crash campaign, ``tests/chaos``).

Run A runs a bash call and dies before its result is recorded; run B (resumed from A on the next
placement) dies right after its run record was saved, before it wrote anything else. The third
placement starts the way the session pod does (``plan_start`` on the saved runs, then
``resume_run``, starting afresh only on ``ResumeError``). It must resume from A's checkpoint,
report the call as interrupted, and never run the bash call again.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from session_runtime import Agent, ResumeError, SessionOptions
from session_runtime.pod.start import plan_start
from session_runtime.store import FileSessionStore

from .harness import scripted_server

pytestmark = pytest.mark.timeout(120)

SID = "lineage"
SCRIPT = {
    "turns": [
        {"tool_calls": [{"id": "c1", "name": "bash", "arguments": {"command": "echo x >> s"}}]},
        {"text": "done"},
    ],
    "cursor": "history",
}


class Crash(BaseException):
    """The process dies here (nothing after this point happens)."""


class DyingStore(FileSessionStore):
    """A store whose process dies at the first call of ``crash_on``."""

    def __init__(self, root: Path, epoch: int, crash_on: str) -> None:
        super().__init__(root, epoch=epoch)
        self.crash_on = crash_on

    def record_tool_result(self, *args: Any, **kwargs: Any) -> None:
        if self.crash_on == "record_tool_result":
            raise Crash
        super().record_tool_result(*args, **kwargs)

    def begin_round(self, *args: Any, **kwargs: Any) -> None:
        if self.crash_on == "begin_round":
            raise Crash
        super().begin_round(*args, **kwargs)


def start_like_the_pod(store: FileSessionStore, ws: Path, base_url: str) -> Any:
    """One placement: build the session, plan its first step, run it (``SessionPod.start``)."""
    agent = Agent.create({"providers": {"openai": {"base_url": base_url, "api_key": "k"}}})
    options = SessionOptions(
        model="openai/scripted", session_id=SID, session_store=store, llm_backoff_ms=1
    )
    saved = store.load_session(SID) is not None
    if saved:
        session = agent.resume_session(SID, options, workspace=str(ws))
    else:
        session = agent.session(str(ws), options)
    plan = plan_start(
        None,
        saved,
        session.runs(),
        False,
        has_checkpoint=lambda run_id: store.load_checkpoint(SID, run_id) is not None,
    )
    if plan.action == "resume" and plan.run_id:
        try:
            return session.resume_run(plan.run_id)
        except ResumeError:
            return session.send("task")
    return session.send("task")


def test_a_resumed_run_that_died_before_its_checkpoint_is_not_restarted(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    with scripted_server(SCRIPT) as srv:
        with pytest.raises(Crash):  # A: the tool ran, its result never reached the store
            start_like_the_pod(
                DyingStore(tmp_path / "st", 1, "record_tool_result"), ws, srv.base_url
            )
        assert (ws / "s").read_text() == "x\n"
        with pytest.raises(Crash):  # B: resumed from A, dies before anything but its record
            start_like_the_pod(DyingStore(tmp_path / "st", 2, "begin_round"), ws, srv.base_url)
        runs = FileSessionStore(tmp_path / "st", epoch=3).load_session(SID)["runs"]  # type: ignore[index]
        assert [r.get("resumed_from") is not None for r in runs] == [False, True]
        result = start_like_the_pod(FileSessionStore(tmp_path / "st", epoch=3), ws, srv.base_url)
    assert result.text == "done"
    assert (ws / "s").read_text() == "x\n"  # never run again
    final = FileSessionStore(tmp_path / "st", epoch=4).load_checkpoint(SID, result.run_id)
    assert final is not None
    [tool] = [m for m in final.messages if m.get("role") == "tool"]
    assert tool["tool_call_id"] == "c1" and "interrupted" in tool["content"]
