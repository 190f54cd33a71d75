"""kill -9 at random moments: the store always loads, resume_run finishes the run, no torn file
is read, and no execute-lane tool whose result was recorded ever runs again (docs/architecture.md
§6).

Each session is a 40-round run of the real Session API against the scripted model; every round's
bash call appends its own tool-call id to ``side.txt`` (the side effect). A child process
(forked from a warm zygote) runs or resumes the session and is SIGKILLed after a random delay;
after each kill the test reads the store from disk and checks the invariants, then the next
child resumes (``resume_run`` of the newest run with a checkpoint), with the epoch bumped (a new
placement) or kept (a container restarted in place) at random. A session ends when a child
finishes; then the next session starts, until ``BERTH_KILL9_KILLS`` kills (default 200) are done.

Invariants after every kill:
- ``FileSessionStore.read_state`` succeeds; every snapshot file is whole; journals parse;
- every tool-call id occurs at most once in ``side.txt`` (nothing ran twice);
- every result the store recorded as really run (not "interrupted") has its id exactly once.
At the end of each session: the final run completed, its checkpoint's ``tool_calls_count`` equals
the tool messages it holds (counts carried forward), and the original runs are still loadable.
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import signal
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from session_runtime.store import FileSessionStore

from .harness import bash_turn, check_store_files, scripted_server, zygote

ROUNDS = 40
INTERRUPTED = "Error: this tool call was interrupted"

pytestmark = pytest.mark.timeout(600)


def script_for(tag: str) -> dict[str, Any]:
    turns: list[dict[str, Any]] = []
    for i in range(ROUNDS):
        turn = bash_turn(f"call-{tag}-{i}", linger_s=0.04)
        if i % 7 == 3:  # a read-only call in the same round: re-run on resume if unrecorded
            turn["tool_calls"].append(
                {"id": f"read-{tag}-{i}", "name": "ls", "arguments": {"path": "."}}
            )
        turns.append(turn)
    turns.append({"text": f"all {ROUNDS} rounds done"})
    return {"turns": turns, "on_exhausted": "repeat_last"}


def recorded_results(store: FileSessionStore, sid: str) -> dict[str, str]:
    """tool_call_id -> output of every result the store holds (checkpoints and pending rounds)."""
    loaded = store.read_state(sid)
    out: dict[str, str] = {}
    if loaded is None:
        return out
    for run in loaded.state.runs.values():
        cp = run.checkpoint or {}
        for m in cp.get("messages", []):
            if m.get("role") == "tool":
                out[m["tool_call_id"]] = str(m.get("content"))
        if run.pending is not None:
            for cid, res in run.pending.results.items():
                out[cid] = str(res.get("output"))
    return out


def check_invariants(store_dir: Path, ws: Path, sid: str, epoch: int) -> dict[str, int]:
    sdir = store_dir / sid
    counts = check_store_files(sdir) if sdir.exists() else {"torn": 0}
    reader = FileSessionStore(store_dir, epoch=epoch)  # reads, never claims
    results = recorded_results(reader, sid)
    side = ws / "side.txt"
    ran = Counter(side.read_text().split()) if side.exists() else Counter()
    twice = {cid: n for cid, n in ran.items() if n > 1}
    assert not twice, f"tools ran more than once: {twice}"
    for cid, output in results.items():
        if cid.startswith("call-") and not output.startswith(INTERRUPTED):
            assert ran[cid] == 1, f"{cid} has a recorded result but ran {ran[cid]} times"
    return {
        "torn": counts["torn"],
        "interrupted": sum(o.startswith(INTERRUPTED) for o in results.values()),
    }


def test_kill9_resume(tmp_path: Path) -> None:
    kills_wanted = int(os.environ.get("BERTH_KILL9_KILLS", "200"))
    rng = random.Random(int(os.environ.get("BERTH_KILL9_SEED", "4242")))
    store_dir = tmp_path / "store"
    stats: Counter[str] = Counter()
    t0 = time.monotonic()
    with zygote() as z:
        session_no = 0
        while stats["kills"] < kills_wanted:
            session_no += 1
            tag = f"s{session_no}"
            sid = f"kill9-{tag}"
            ws = tmp_path / f"ws-{tag}"
            ws.mkdir()
            epoch = 1
            with scripted_server(script_for(tag)) as srv:
                done: dict[str, Any] | None = None
                attempt = 0
                while done is None:
                    attempt += 1
                    result = tmp_path / f"result-{tag}-{attempt}.json"
                    job = {
                        "store": str(store_dir),
                        "workspace": str(ws),
                        "session_id": sid,
                        "epoch": epoch,
                        "base_url": srv.base_url,
                        "api_key": "sk-kill9-secret",
                        "prompt": f"session {tag}: run the rounds",
                        "snapshot_min_bytes": 2048,
                        "result": str(result),
                        "log": str(tmp_path / f"log-{tag}.txt"),
                    }
                    # Up to 40 kills per session, then let it finish: every session completes.
                    if stats["kills"] < kills_wanted and attempt <= 40:
                        pid = z.spawn(job)
                        time.sleep(rng.uniform(0.0, 0.4))
                        with contextlib.suppress(ProcessLookupError):
                            os.kill(pid, signal.SIGKILL)
                        status = z.wait(pid)
                        if status == -signal.SIGKILL:
                            stats["kills"] += 1
                    else:
                        status = z.run(job)
                    assert status in (0, -signal.SIGKILL), (
                        f"child exited with {status}; log:\n"
                        + (tmp_path / f"log-{tag}.txt").read_text()[-4000:]
                    )
                    inv = check_invariants(store_dir, ws, sid, epoch + 1)
                    stats["torn_tails_seen"] += inv["torn"]
                    if status == 0:
                        done = json.loads(result.read_text())
                    if rng.random() < 0.5:
                        epoch += 1  # a new placement; else the container restarted in place
            stats["sessions"] += 1
            stats["interrupted_results"] += inv["interrupted"]
            check_finished_session(store_dir, ws, sid, epoch, done)
    elapsed = time.monotonic() - t0
    print(f"\nkill9: {dict(stats)} in {elapsed:.1f}s")
    assert stats["kills"] >= kills_wanted


def check_finished_session(
    store_dir: Path, ws: Path, sid: str, epoch: int, done: dict[str, Any]
) -> None:
    store = FileSessionStore(store_dir, epoch=epoch)
    data = store.load_session(sid)
    assert data is not None
    runs = data["runs"]
    assert runs[-1]["status"] == "completed", runs[-1]
    assert runs[-1]["id"] == done["run_id"]
    assert done["text"] == f"all {ROUNDS} rounds done"
    final = store.load_checkpoint(sid, done["run_id"])
    assert final is not None
    tool_msgs = [m for m in final.messages if m.get("role") == "tool"]
    assert final.tool_calls_count == len(tool_msgs)
    for run in runs:  # every earlier run that reached a checkpoint is still there, intact
        cp = store.load_checkpoint(sid, run["id"])
        if cp is not None:
            assert cp.run_id == run["id"] and cp.session_id == sid
    # the side effects the final history says ran are exactly the ones that did
    ran = Counter((ws / "side.txt").read_text().split())
    for m in tool_msgs:
        cid = m["tool_call_id"]
        if cid.startswith("call-") and not str(m["content"]).startswith(INTERRUPTED):
            assert ran[cid] == 1
    for path in (store_dir / sid).rglob("*"):
        if path.is_file():
            assert b"sk-kill9-secret" not in path.read_bytes()
