"""Test-side helpers for the store integration tests: the zygote client, the scripted model
server, and readers that check every file of a store directory."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from session_runtime.llm.scripted import ScriptedServer
from session_runtime.store import journal, layout

REPO = Path(__file__).resolve().parents[3]


class Zygote:
    """Client of ``tests.integration.store.child`` (see its docstring for the protocol)."""

    def __init__(self) -> None:
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join([str(REPO), env.get("PYTHONPATH", "")])
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "tests.integration.store.child"],
            cwd=REPO,
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )

    def _ask(self, msg: dict[str, Any]) -> dict[str, Any]:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write(json.dumps(msg) + "\n")
        self.proc.stdin.flush()
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError("zygote exited")
        reply: dict[str, Any] = json.loads(line)
        return reply

    def spawn(self, job: dict[str, Any]) -> int:
        return int(self._ask({"op": "spawn", "job": job})["pid"])

    def wait(self, pid: int) -> int:
        return int(self._ask({"op": "wait", "pid": pid})["status"])

    def run(self, job: dict[str, Any]) -> int:
        return int(self._ask({"op": "run", "job": job})["status"])

    def close(self) -> None:
        if self.proc.stdin is not None:
            self.proc.stdin.close()
        self.proc.wait(timeout=30)
        if self.proc.stdout is not None:
            self.proc.stdout.close()


@contextmanager
def zygote() -> Iterator[Zygote]:
    z = Zygote()
    try:
        yield z
    finally:
        z.close()


@contextmanager
def scripted_server(script: Any) -> Iterator[ScriptedServer]:
    srv = ScriptedServer(script, host="127.0.0.1", port=0)
    srv.start_in_thread()
    try:
        yield srv
    finally:
        srv.stop_thread()


def child_job(
    tmp_path: Path,
    session_id: str,
    base_url: str,
    epoch: int,
    name: str,
    prompt: str,
    **extra: Any,
) -> dict[str, Any]:
    """A job for ``child.py``: one session process with store ``tmp_path/store`` and workspace
    ``tmp_path/ws``, claiming ``epoch``; its result and log go to ``tmp_path/<name>.json|.log``."""
    return {
        "store": str(tmp_path / "store"),
        "workspace": str(tmp_path / "ws"),
        "session_id": session_id,
        "epoch": epoch,
        "base_url": base_url,
        "api_key": f"sk-{session_id}",
        "prompt": prompt,
        "acquire": True,
        "result": str(tmp_path / f"{name}.json"),
        "log": str(tmp_path / f"{name}.log"),
        **extra,
    }


def bash_turn(call_id: str, side_file: str = "side.txt", linger_s: float = 0.0) -> dict[str, Any]:
    """A model turn asking for one bash call that appends its own id to ``side_file`` (then
    lingers ``linger_s`` seconds, so a kill can land between the side effect and its result)."""
    command = f"echo {call_id} >> {side_file}"
    if linger_s:
        command += f" && sleep {linger_s}"
    return {"tool_calls": [{"id": call_id, "name": "bash", "arguments": {"command": command}}]}


def summarize(store: Any, sid: str) -> dict[str, Any]:
    """What a store shows of a session: per run, the checkpoint (turn, message count, tool-call
    count) and the pending round (turn, recorded result ids). JSON-able, for comparisons."""
    out: dict[str, Any] = {}
    for run_id in store.run_ids(sid):
        cp = store.load_checkpoint(sid, run_id)
        pending = store.load_pending_round(sid, run_id)
        out[run_id] = {
            "checkpoint": None
            if cp is None
            else {"turn": cp.turn, "messages": len(cp.messages), "calls": cp.tool_calls_count},
            "pending": None
            if pending is None
            else {"turn": pending.turn, "results": sorted(pending.results)},
        }
    return out


def check_store_files(session_dir: Path) -> dict[str, int]:
    """Read every snapshot and journal of a session directory the way the loader does.

    Asserts that every snapshot is whole (one valid record, nothing torn: atomic writes), and
    that journals parse (a torn tail is allowed). Returns counts: snapshots, journals, torn tails.
    """
    listing = layout.scan(session_dir)
    torn = 0
    for e, s in listing.snapshots:
        res = journal.read_file(session_dir / layout.snapshot_name(e, s))
        assert len(res.payloads) == 1 and res.torn_bytes == 0, f"torn snapshot {e}-{s}"
        json.loads(res.payloads[0])
    for e, s in listing.journals:
        res = journal.read_file(session_dir / layout.journal_name(e, s))
        for p in res.payloads:
            json.loads(p)
        torn += res.torn_bytes > 0
    return {"snapshots": len(listing.snapshots), "journals": len(listing.journals), "torn": torn}
