"""Table tests of the transport's pure parts: stream names, message codec, workspace
confinement and worker settings (no Redis needed)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from session_runtime.transport import (
    MalformedMessage,
    ReplyMessage,
    TaskMessage,
    alive_key,
    parse_reply_stream,
    reply_stream,
    task_stream,
)
from session_runtime.worker import WorkerSettings, WorkspaceRefused, resolve_workspace

TASK = {
    "task_id": "task-1",
    "session": "team-a/s1",
    "session_uid": "0b7c-uid",
    "epoch": "3",
    "run_id": "run-1",
    "tool_call_id": "call_1",
    "lane": "execute",
    "command_type": "bash",
    "payload": '{"command": "ls"}',
    "workspace": "workspaces/team-a/s1",
    "deadline_ms": "1700000000000",
    "reply_to": "berth:team-a:s:0b7c-uid:results",
}


def test_names_follow_architecture_section_7() -> None:
    assert task_stream("team-a", "pool") == "berth:team-a:lw:pool:tasks"
    assert reply_stream("team-a", "0b7c-uid") == "berth:team-a:s:0b7c-uid:results"
    assert parse_reply_stream("berth:team-a:s:0b7c-uid:results") == ("team-a", "0b7c-uid")
    assert alive_key("ns", "pool", "pod-1") == "berth:ns:lw:pool:alive:pod-1"


@pytest.mark.parametrize(
    "bad",
    [("Team", "pool"), ("ns", "po:ol"), ("ns", "*"), ("", "pool"), ("ns", "-x")],
)
def test_names_refuse_injection(bad: tuple[str, str]) -> None:
    with pytest.raises(ValueError):
        task_stream(*bad)


@pytest.mark.parametrize(
    "name", ["berth:ns:s:uid:results:x", "berth:ns:lw:p:tasks", "other", "berth:NS:s:u:results"]
)
def test_parse_reply_stream_refuses_other_keys(name: str) -> None:
    with pytest.raises(ValueError):
        parse_reply_stream(name)


def test_task_round_trip_bytes() -> None:
    encoded = {k.encode(): v.encode() for k, v in TASK.items()}
    task = TaskMessage.from_fields(encoded)
    assert task.payload == {"command": "ls"} and task.epoch == 3
    assert TaskMessage.from_fields(task.to_fields()) == task


@pytest.mark.parametrize(
    ("change", "reason_part"),
    [
        ({"payload": "[1, 2"}, "payload"),
        ({"payload": "[1, 2]"}, "payload"),
        ({"lane": "fast"}, "lane"),
        ({"deadline_ms": "soon"}, "deadline_ms"),
        ({"epoch": "-1"}, "epoch"),
        ({"session": "no-slash"}, "session"),
        ({"task_id": ""}, "task_id"),
    ],
)
def test_malformed_task_has_a_reason(change: dict[str, str], reason_part: str) -> None:
    with pytest.raises(MalformedMessage) as info:
        TaskMessage.from_fields({**TASK, **change})
    assert reason_part in info.value.reason
    assert info.value.partial["task_id"] == change.get("task_id", "task-1")


def test_missing_field_is_named() -> None:
    fields = dict(TASK)
    del fields["reply_to"]
    with pytest.raises(MalformedMessage, match="reply_to"):
        TaskMessage.from_fields(fields)


def test_reply_round_trip_and_external_view() -> None:
    reply = ReplyMessage(
        task_id="t",
        tool_call_id="c",
        success=True,
        result={"output": "x", "exit_code": 2, "is_error": False},
        worker="w-1",
        started_ms=5,
        ended_ms=9,
    )
    back = ReplyMessage.from_fields(reply.to_fields())
    assert back == reply
    ext = back.to_external(ref="1-0")
    assert (ext.success, ext.result["exit_code"], ext.error, ext.ref) == (True, 2, None, "1-0")
    failed = ReplyMessage.from_fields({"task_id": "t", "success": "false", "error": "worker lost"})
    assert failed.to_external().error == "worker lost" and failed.result == {}
    with pytest.raises(MalformedMessage):
        ReplyMessage.from_fields({"task_id": "t", "success": "maybe"})


@pytest.fixture
def root(tmp_path: Path) -> Path:
    (tmp_path / "shared" / "workspaces" / "ns" / "s").mkdir(parents=True)
    (tmp_path / "outside").mkdir()
    os.symlink(tmp_path / "outside", tmp_path / "shared" / "workspaces" / "link")
    (tmp_path / "shared" / "file").write_text("")
    return tmp_path / "shared"


@pytest.mark.parametrize(
    ("workspace", "ok"),
    [
        ("workspaces/ns/s", True),
        ("workspaces/ns/../ns/s", True),
        ("workspaces/../../outside", False),
        ("workspaces/link", False),  # symlink out of the volume
        (".", False),  # the volume root itself
        ("", False),
        ("file", False),  # not a directory
        ("workspaces/ns/missing", False),
        ("/etc", False),
    ],
)
def test_resolve_workspace(root: Path, workspace: str, ok: bool) -> None:
    if ok:
        assert resolve_workspace(str(root), workspace) == str((root / "workspaces/ns/s").resolve())
    else:
        with pytest.raises(WorkspaceRefused):
            resolve_workspace(str(root), workspace)


def test_absolute_workspace_inside_root_is_accepted(root: Path) -> None:
    ws = str(root / "workspaces" / "ns" / "s")
    assert resolve_workspace(str(root), ws) == os.path.realpath(ws)


ENV = {
    "BERTH_REDIS_URL": "redis://127.0.0.1:6379/0",
    "BERTH_NAMESPACE": "team-a",
    "BERTH_LANEWORKER": "pool",
    "POD_NAME": "pool-abc",
    "BERTH_SHARED_ROOT": "/mnt/shared",
}


def test_settings_from_env_and_flags() -> None:
    s = WorkerSettings.from_env(ENV, [])
    assert (s.concurrency, s.metrics_port, s.pod_ip, s.task_timeout_seconds) == (
        1,
        9090,
        "127.0.0.1",
        600.0,
    )
    assert s.task_stream == "berth:team-a:lw:pool:tasks"
    s2 = WorkerSettings.from_env(
        {**ENV, "BERTH_WORKER_CONCURRENCY": "4", "POD_IP": "10.0.0.7"}, ["--metrics-port", "0"]
    )
    assert (s2.concurrency, s2.pod_ip, s2.metrics_port) == (4, "10.0.0.7", 0)


@pytest.mark.parametrize(
    "env",
    [
        {k: v for k, v in ENV.items() if k != "POD_NAME"},
        {**ENV, "BERTH_SHARED_ROOT": "relative/path"},
        {**ENV, "BERTH_WORKER_CONCURRENCY": "0"},
        {**ENV, "BERTH_NAMESPACE": "Bad:Name"},
    ],
)
def test_settings_refuse_bad_env(env: dict[str, str]) -> None:
    with pytest.raises(SystemExit):
        WorkerSettings.from_env(env, [])
