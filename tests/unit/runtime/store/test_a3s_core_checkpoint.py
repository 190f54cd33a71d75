"""Checkpoint interchange with a3s-code-core 9.x (session_runtime.a3s_core.checkpoint), no
cluster: a passivated Berth session exported to ``SessionCheckpointExportV1`` is resumed by
a3s-code-core's own ``resume_run``, a run a3s-code-core checkpointed is imported into Berth's
file store and resumed by Berth's ``resume_run``, each without running a tool twice; what does not
map is refused with a message naming the field."""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path
from typing import Any

import pytest

from session_runtime import Agent, RunPassivatedError, SessionOptions
from session_runtime.a3s_core import binding as core
from session_runtime.a3s_core import cli
from session_runtime.a3s_core.checkpoint import export_session, import_checkpoint, load_into_core
from session_runtime.a3s_core.messages import Unmapped, to_berth, to_core
from session_runtime.llm.scripted import ScriptedServer
from session_runtime.store.file import FileSessionStore
from tests.a3s_core_support import acl_config, binding

BASH_ONCE = {"tool_calls": [{"name": "bash", "arguments": {"command": "echo once >> side.txt"}}]}


def script(*later: dict[str, Any]) -> dict[str, Any]:
    """Round one runs ``BASH_ONCE``; the turn answered is the number of assistant messages in
    the request, so a run resumed elsewhere gets the turn its history calls for."""
    return {"turns": [BASH_ONCE, *later], "cursor": "history", "on_exhausted": "error"}


async def started(turns: dict[str, Any]) -> ScriptedServer:
    srv = ScriptedServer(turns)
    await srv.start()
    return srv


def berth_agent(srv: ScriptedServer) -> Agent:
    return Agent.create({"providers": {"openai": {"base_url": srv.base_url, "api_key": "k"}}})


def test_messages_map_both_ways_and_refuse_what_does_not() -> None:
    berth = [
        {"role": "system", "content": "be brief"},
        {"role": "user", "content": "go"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {"id": "c1", "type": "function", "function": {"name": "bash", "arguments": "{}"}}
            ],
        },
        {"role": "tool", "tool_call_id": "c1", "content": "ok"},
        {"role": "assistant", "content": "done"},
    ]
    system, messages = to_core(berth, "m")
    assert system == "be brief" and [m["role"] for m in messages] == ["user", "assistant"] * 2
    assert to_berth(messages, "m", system) == berth
    image = {"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}}]}
    with pytest.raises(Unmapped, match=r"m\[0\]\.content\[0\]\.type") as info:
        to_core([image], "m")
    assert info.value.field == "m[0].content[0].type"
    with pytest.raises(Unmapped, match=r"m\[1\]\.name"):
        to_core([berth[1], {"role": "user", "content": "x", "name": "bob"}], "m")
    picture = {"role": "user", "content": [{"type": "image", "source": {}}]}
    with pytest.raises(Unmapped, match=r"c\[0\]\.content\[0\]\.type"):
        to_berth([picture], "c")


async def test_a_passivated_berth_session_resumes_in_a3s_code_core(tmp_path: Path) -> None:
    binding()
    workspace = tmp_path / "ws"
    workspace.mkdir()
    berth_model = await started(script({"text": "berth finished"}))
    store = FileSessionStore(tmp_path / "berth", epoch=1)
    session = berth_agent(berth_model).session(
        str(workspace), SessionOptions(session_store=store, session_id="sess-b", llm_backoff_ms=1)
    )
    passivated: list[Any] = []

    async def passivate_after_round_one(event: dict[str, Any]) -> None:
        if event["turn"] == 1:
            deadline = int(time.time() * 1000) + 10_000
            passivated.append(asyncio.ensure_future(session.passivate_async("drain", deadline)))

    session.register_hook("drain", "turn_end", passivate_after_round_one)
    with pytest.raises(RunPassivatedError) as info:
        await session.send_async("go")
    await asyncio.gather(*passivated)
    await berth_model.stop()
    assert (workspace / "side.txt").read_text() == "once\n"

    exported = export_session(store, "sess-b")
    assert exported.run_id == info.value.run_id
    assert "session.options.llm_backoff_ms" in exported.dropped  # a host setting, not state
    core_store = core.CoreStore(str(tmp_path / "core"))
    loaded = load_into_core(exported.export, core_store)
    assert (loaded.session_id, loaded.run_id) == ("sess-b", info.value.run_id)

    core_model = await started(script({"text": "resumed by a3s-code-core"}))
    agent = core.CoreAgent(acl_config(core_model.base_url))
    resumed = agent.resume_session("sess-b", core_store)
    result = await asyncio.to_thread(resumed.resume_run, info.value.run_id)
    await core_model.stop()
    assert result.text == "resumed by a3s-code-core"
    # One model call continued the run after round one; no tool ran again. (a3s-code-core
    # 9.1.3 shows the model that round as empty turns: it rebuilds tool turns from its own
    # workspace fact log, which a Berth-run session does not have; docs/a3s-compatibility.md.)
    [request] = [q for q in core_model.requests if q["stream"]]
    assert [m["role"] for m in request["messages"]] == ["system", "user", "assistant", "user"]
    assert not [b for m in result.messages for b in m["content"] if b["type"] == "tool_use"]
    assert (workspace / "side.txt").read_text() == "once\n"
    store.close()


async def test_a_run_a3s_code_core_checkpointed_resumes_in_berth(tmp_path: Path) -> None:
    binding()
    workspace = tmp_path / "ws"
    workspace.mkdir()
    write_once = {"name": "write", "arguments": {"file_path": "side.txt", "content": "once\n"}}
    core_model = await started(
        {
            "turns": [{"tool_calls": [write_once]}, {"error": {"status": 400, "message": "gone"}}],
            "cursor": "history",
        }
    )
    agent = core.CoreAgent(acl_config(core_model.base_url))
    exports = str(tmp_path / "exports")
    session = agent.session(str(workspace), session_id="sess-9", export_dir=exports)
    with pytest.raises(RuntimeError):  # the model fails after round one was checkpointed
        await asyncio.to_thread(session.send, "go")
    await core_model.stop()
    assert (workspace / "side.txt").read_text() == "once\n"
    export = core.latest_export(exports)  # written by a3s-code-core at the round boundary
    assert export is not None

    store = FileSessionStore(tmp_path / "berth", epoch=1)
    with pytest.raises(Unmapped, match=r"logical_resume\.capability_binding"):
        import_checkpoint(export, store)  # an authority ceiling Berth does not enforce
    assert store.list_sessions() == []
    accept = frozenset({"logical_resume.capability_binding"})
    imported = import_checkpoint(export, store, accept=accept)
    assert imported.session_id == "sess-9" and imported.run_id is not None
    assert "logical_resume.capability_binding" in imported.dropped
    berth_model = await started(script({"text": "resumed by berth"}))
    resumed = berth_agent(berth_model).resume_session(
        "sess-9", SessionOptions(session_store=store, llm_backoff_ms=1), workspace=str(workspace)
    )
    tools_run: list[Any] = []
    resumed.register_hook("spy", "pre_tool_use", tools_run.append)
    result = await resumed.resume_run_async(imported.run_id)
    await berth_model.stop()
    assert result.text == "resumed by berth"
    assert tools_run == []  # round one (the write) was not run again
    assert (workspace / "side.txt").read_text() == "once\n"
    store.close()


def test_what_berth_cannot_hold_is_refused_naming_the_field(tmp_path: Path) -> None:
    binding()
    snapshot = core.checkpoint_open(core.checkpoint_export(_fresh_snapshot(tmp_path), None))[
        "snapshot"
    ]
    snapshot["session"]["tasks"] = [{"id": "t1", "content": "todo", "status": "pending"}]
    store = FileSessionStore(tmp_path / "berth", epoch=1)
    with pytest.raises(Unmapped, match=r"cannot carry session\.tasks across"):
        import_checkpoint(core.checkpoint_export(snapshot, None), store)
    assert store.list_sessions() == []  # nothing written
    store.close()


def test_the_console_script_imports_and_names_what_it_refuses(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    binding()
    snapshot = core.checkpoint_open(core.checkpoint_export(_fresh_snapshot(tmp_path), None))
    good, bad = tmp_path / "good.json", tmp_path / "bad.json"
    good.write_text(json.dumps(core.checkpoint_export(snapshot["snapshot"], None)))
    snapshot["snapshot"]["session"]["parent_id"] = "sess-parent"
    bad.write_text(json.dumps(core.checkpoint_export(snapshot["snapshot"], None)))
    store = str(tmp_path / "berth")

    assert cli.main(["import", "--store", store, "--from", str(bad)]) == 2
    assert "cannot carry session.parent_id across" in capsys.readouterr().err
    assert cli.main(["import", "--store", store, "--from", str(good)]) == 0
    assert "imported session sess-f, run None" in capsys.readouterr().out
    out = tmp_path / "back.json"
    assert cli.main(["export", "--store", store, "--session", "sess-f", "--out", str(out)]) == 0
    back = core.checkpoint_open(json.loads(out.read_text()))
    assert back["snapshot"]["session"]["id"] == "sess-f"


def _fresh_snapshot(tmp_path: Path) -> dict[str, Any]:
    core_store = core.CoreStore(str(tmp_path / "fresh"))
    (tmp_path / "fresh-ws").mkdir()
    s = core.CoreAgent(acl_config()).session(
        str(tmp_path / "fresh-ws"), session_id="sess-f", store=core_store
    )
    s.save()
    snap = core_store.load_snapshot("sess-f")
    assert snap is not None
    return snap
