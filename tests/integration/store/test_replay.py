"""Deterministic replay (docs/architecture.md §10, "Deterministic ids and time"): the same inputs,
with the sequential id generator and the fixed clock, run in two separate processes with different
working directories and different store roots, give byte-identical store files (snapshots,
journals, lease) and identical run records. The workspace is mounted at the same path, as on two
nodes; it is recreated between the two runs."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from session_runtime.store import FileSessionStore

from .harness import bash_turn, scripted_server, zygote

pytestmark = pytest.mark.timeout(300)

SID = "replay-1"
SCRIPT: dict[str, Any] = {
    "turns": [
        bash_turn("call-0"),
        {"tool_calls": [{"id": "ls-1", "name": "ls", "arguments": {"path": "."}}]},
        {
            "tool_calls": [
                {"id": "w-2", "name": "write", "arguments": {"file_path": "a.txt", "content": "x"}},
                {"id": "r-2", "name": "read", "arguments": {"file_path": "side.txt"}},
            ]
        },
        bash_turn("call-3"),
        {"text": "replayed"},
    ],
    "on_exhausted": "error",
}


def store_files(root: Path) -> dict[str, bytes]:
    """The store's data files; lease files hold the id of the writer process, so their names are
    compared but not their content."""
    return {
        str(p.relative_to(root)): b"" if p.parent.name == "lease" else p.read_bytes()
        for p in sorted(root.rglob("*"))
        if p.is_file()
    }


def test_two_processes_write_byte_identical_files(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    outputs = []
    with zygote() as z:
        for name in ("node-a", "node-b"):
            if ws.exists():
                shutil.rmtree(ws)
            ws.mkdir()
            cwd = tmp_path / f"cwd-{name}"
            cwd.mkdir()
            with scripted_server(SCRIPT) as srv:
                status = z.run(
                    {
                        "store": str(tmp_path / f"store-{name}"),
                        "workspace": str(ws),
                        "cwd": str(cwd),
                        "session_id": SID,
                        "epoch": 1,
                        "base_url": srv.base_url,
                        "api_key": "sk-replay-secret",
                        "prompt": "replay me",
                        "tenant_id": "tenant-a",
                        "replay": True,
                        "snapshot_min_bytes": 1024,  # compaction inside the run, too
                        "result": str(tmp_path / f"{name}.json"),
                        "log": str(tmp_path / f"{name}.log"),
                    }
                )
            assert status == 0, (tmp_path / f"{name}.log").read_text()
            outputs.append(json.loads((tmp_path / f"{name}.json").read_text()))

    assert outputs[0] == outputs[1] and outputs[0]["text"] == "replayed"
    assert outputs[0]["run_id"].startswith("run-r-")
    a, b = store_files(tmp_path / "store-node-a"), store_files(tmp_path / "store-node-b")
    assert sorted(a) == sorted(b)
    assert any(name.startswith(f"{SID}/journal-") for name in a)
    for name in a:
        assert a[name] == b[name], f"{name} differs between the two processes"
        assert b"sk-replay-secret" not in a[name]
        assert str(tmp_path).encode() not in a[name] or str(ws).encode() in a[name]

    runs = [
        FileSessionStore(tmp_path / f"store-{n}", epoch=1).load_session(SID)
        for n in ("node-a", "node-b")
    ]
    assert runs[0] is not None and runs[1] is not None
    assert runs[0]["runs"] == runs[1]["runs"] and runs[0]["runs"][0]["status"] == "completed"
    cps = [
        FileSessionStore(tmp_path / f"store-{n}", epoch=1).load_checkpoint(
            SID, outputs[0]["run_id"]
        )
        for n in ("node-a", "node-b")
    ]
    assert cps[0] is not None and cps[0] == cps[1] and cps[0].turn == 4
