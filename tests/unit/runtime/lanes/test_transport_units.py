"""Table tests of the transport's pure parts: stream names, message codec, workspace
confinement and worker settings (no Redis needed)."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path
from typing import Any

import pytest

from berth_contract.taskauth import (
    canonical,
    derive_session_key,
    read_key_file,
    sign_fields,
    verify_fields,
)
from session_runtime.transport import (
    MalformedMessage,
    ReplyMessage,
    TaskMessage,
    alive_key,
    parse_reply_stream,
    reply_stream,
    task_stream,
)
from session_runtime.worker.settings import WorkerSettings
from session_runtime.worker.tasks import WorkspaceRefused, resolve_workspace

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
    "reply_to": "berth:team-a:s:{0b7c-uid}:results",
}


def test_names_follow_architecture_section_7() -> None:
    assert task_stream("team-a", "pool") == "berth:team-a:lw:{pool}:tasks"
    assert reply_stream("team-a", "0b7c-uid") == "berth:team-a:s:{0b7c-uid}:results"
    assert parse_reply_stream("berth:team-a:s:{0b7c-uid}:results") == ("team-a", "0b7c-uid")
    assert alive_key("ns", "pool", "pod-1") == "berth:ns:lw:{pool}:alive:pod-1"


@pytest.mark.parametrize(
    "bad",
    [("Team", "pool"), ("ns", "po:ol"), ("ns", "*"), ("", "pool"), ("ns", "-x")],
)
def test_names_refuse_injection(bad: tuple[str, str]) -> None:
    with pytest.raises(ValueError):
        task_stream(*bad)


@pytest.mark.parametrize(
    "name",
    [
        "berth:ns:s:{uid}:results:x",
        "berth:ns:lw:{p}:tasks",
        "other",
        "berth:NS:s:{u}:results",
        "berth:ns:s:uid:results",
    ],
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
    """A ``workspaces`` directory: sessions s and b of ns, a link out of it, a file."""
    ws = tmp_path / "workspaces"
    (ws / "ns" / "s" / "sub").mkdir(parents=True)
    (ws / "ns" / "b").mkdir(parents=True)
    (tmp_path / "outside").mkdir()
    os.symlink(tmp_path / "outside", ws / "ns" / "s" / "link")
    os.symlink(ws / "ns" / "b", ws / "ns" / "s" / "to-b")
    os.symlink(tmp_path / "outside", ws / "ns" / "linked")
    (ws / "ns" / "s" / "file").write_text("")
    return ws


@pytest.mark.parametrize(
    ("session", "relative", "ok"),
    [
        ("s", ".", True),
        ("s", "sub", True),
        ("s", "./sub/", True),
        ("s", "../b", False),  # another session of the namespace
        ("s", "sub/../../b", False),
        ("s", "link", False),  # symlink out of the volume
        ("s", "to-b", False),  # symlink to another session
        ("linked", ".", False),  # the session directory itself a symlink
        ("s", "file", False),  # not a directory
        ("s", "missing", False),
        ("s", "/etc", False),
        ("s", "sub\x00", False),
        ("missing", ".", False),
    ],
)
def test_workspace_is_built_from_the_session(
    root: Path, session: str, relative: str, ok: bool
) -> None:
    """The worker builds <root>/<ns>/<session>/<relative>; a task cannot name another place."""
    if ok:
        expected = os.path.normpath(root / "ns" / session / relative.strip("./") or ".")
        got = resolve_workspace(str(root), "ns", session, relative)
        assert os.path.normpath(got) == os.path.normpath(expected)
    else:
        with pytest.raises(WorkspaceRefused):
            resolve_workspace(str(root), "ns", session, relative)


def test_task_macs_bind_a_task_to_its_session() -> None:
    master = b"m" * 32
    key_a = derive_session_key(master, "ns", "a")
    assert key_a != derive_session_key(master, "ns", "b") != derive_session_key(master, "x", "a")
    fields = {"task_id": "t1", "session": "ns/a", "workspace": "."}
    signed = sign_fields(key_a, fields)
    assert verify_fields(key_a, signed)
    assert not verify_fields(key_a, fields)  # unsigned
    assert not verify_fields(derive_session_key(master, "ns", "b"), signed)  # other session
    for field, value in (("session", "ns/b"), ("workspace", "../b"), ("extra", "1")):
        assert not verify_fields(key_a, {**signed, field: value}), field
    # Length-prefixed encoding: moving bytes between fields changes the MAC.
    assert canonical({"a": "bc"}) != canonical({"ab": "c"})


def test_key_files_must_hold_32_bytes(tmp_path: Path) -> None:
    good, bad = tmp_path / "k", tmp_path / "short"
    good.write_bytes(b"k" * 32)
    bad.write_bytes(b"k" * 31)
    assert read_key_file(good) == b"k" * 32
    for path in (bad, tmp_path / "missing"):
        with pytest.raises(ValueError, match="task key file"):
            read_key_file(path)


ENV = {
    "BERTH_REDIS_URL": "redis://127.0.0.1:6379/0",
    "BERTH_NAMESPACE": "team-a",
    "BERTH_LANEWORKER": "pool",
    "POD_NAME": "pool-abc",
    "BERTH_WORKSPACES_ROOT": "/mnt/shared/workspaces",
}


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    key = tmp_path / "master"
    key.write_bytes(b"k" * 32)
    return {**ENV, "BERTH_TASK_MASTER_KEY_FILE": str(key)}


def test_settings_from_env_and_flags(env: dict[str, str]) -> None:
    s = WorkerSettings.from_env(env, [])
    assert (s.concurrency, s.metrics_port, s.pod_ip, s.task_timeout_seconds) == (
        1,
        9090,
        "127.0.0.1",
        600.0,
    )
    assert s.task_stream == "berth:team-a:lw:{pool}:tasks"
    s2 = WorkerSettings.from_env(
        {**env, "BERTH_WORKER_CONCURRENCY": "4", "POD_IP": "10.0.0.7"}, ["--metrics-port", "0"]
    )
    assert (s2.concurrency, s2.pod_ip, s2.metrics_port) == (4, "10.0.0.7", 0)


@pytest.mark.parametrize(
    "change",
    [
        {"POD_NAME": None},
        {"BERTH_WORKSPACES_ROOT": "relative/path"},
        {"BERTH_WORKER_CONCURRENCY": "0"},
        {"BERTH_NAMESPACE": "Bad:Name"},
        {"BERTH_TASK_MASTER_KEY_FILE": None},  # no unauthenticated mode
        {"BERTH_TASK_MASTER_KEY_FILE": "/nonexistent/master"},
    ],
)
def test_settings_refuse_bad_env(env: dict[str, str], change: dict[str, str | None]) -> None:
    bad = {k: v for k, v in {**env, **change}.items() if v is not None}
    with pytest.raises(SystemExit):
        WorkerSettings.from_env(bad, [])


class _SwallowingRedis:
    """A client whose blocking read swallows its cancellation and returns nothing (as some
    client versions do when a read is interrupted)."""

    def __init__(self) -> None:
        self.reads = 0
        self.reading = asyncio.Event()

    async def xread(self, *_args: Any, **_kwargs: Any) -> list[Any]:
        self.reads += 1
        self.reading.set()
        try:
            await asyncio.sleep(3600)
        except asyncio.CancelledError:
            return []
        return []


async def test_a_cancelled_reply_reader_ends_even_if_the_client_swallows_the_cancel() -> None:
    from session_runtime.transport.client import RedisTaskTransport

    fake = _SwallowingRedis()
    transport = RedisTaskTransport(
        fake,  # type: ignore[arg-type]
        namespace="team-a",
        session_name="s",
        session_uid="u-1",
        epoch=1,
    )

    async def sink(_reply: Any) -> None:
        return None

    await transport.start(sink)
    await fake.reading.wait()
    # close() cancels the reader and waits for it; bounded so a regression fails, not hangs.
    await asyncio.wait_for(transport.close(), timeout=30)
    assert fake.reads == 1
