"""A zygote that forks session processes for the store's crash, fencing and replay tests.

Run as ``python -m tests.integration.store.child`` (cwd = repo root). It imports the runtime once,
then serves JSON-line commands on stdin, answering one JSON line each on stdout:

``{"op": "spawn", "job": {...}}`` -> ``{"pid": N}``: fork a child that runs :func:`run_job`
    (the child writes ``job["result"]`` when done and its output to ``job["log"]``);
``{"op": "wait", "pid": N}`` -> ``{"status": <exit code, or -signal>}``: reap a child;
``{"op": "run", "job": {...}}`` -> ``{"status": ...}``: spawn and wait.

Forking a warm process keeps a ``kill -9`` cycle in the tens of milliseconds, so a test can do
hundreds of them on a small machine. The zygote has no threads when it forks.

A job may first ``acquire`` the session (claim its epoch and write the takeover snapshot, as a
new session pod should before loading anything), report what it loaded in ``takeover_file`` and
wait for ``go_file`` to exist. Then it drives the real Session API (``Agent.create`` /
``agent.session`` / ``send`` / ``agent.resume_session`` / ``resume_run``) against a
``FileSessionStore`` with the job's epoch:

- no stored session: ``session.send(prompt)``;
- otherwise: if the newest run is completed, nothing to do; else ``resume_run`` of the newest run
  that has a loop checkpoint (a run without one never did any work: the loop commits a turn-0
  checkpoint before its first LLM call), or ``send(prompt)`` if none has.
"""

from __future__ import annotations

import json
import os
import sys
import threading
import time
import traceback
from typing import Any

from session_runtime import Agent, ResumeError, RunPassivatedError, SessionOptions
from session_runtime.errors import FencedError
from session_runtime.hostenv import HostEnv
from session_runtime.store import FileSessionStore

#: Exit code of a child that found itself fenced (the pod reports outcome "fenced").
EXIT_FENCED = 3
EXIT_ERROR = 4


def _options(job: dict[str, Any], store: FileSessionStore) -> SessionOptions:
    kw: dict[str, Any] = {
        "model": "openai/scripted",
        "session_id": job["session_id"],
        "session_store": store,
        "max_tool_rounds": 500,
        "llm_backoff_ms": 1,
        "tenant_id": job.get("tenant_id"),
    }
    if job.get("replay"):
        kw["host_env"] = HostEnv.replay(prefix="r", start_ms=1_700_000_000_000)
    return SessionOptions(**kw)


def run_job(job: dict[str, Any]) -> dict[str, Any]:
    """Run or resume the job's session to completion; returns what happened."""
    if job.get("cwd"):
        os.chdir(job["cwd"])
    store = FileSessionStore(
        job["store"],
        epoch=job["epoch"],
        snapshot_min_bytes=job.get("snapshot_min_bytes", 64 * 1024),
    )
    agent = Agent.create(
        {"providers": {"openai": {"base_url": job["base_url"], "api_key": job["api_key"]}}}
    )
    sid = job["session_id"]
    if job.get("acquire"):  # what berth-session should do first: fence older epochs at once
        store.acquire(sid)
        if job.get("takeover_file"):
            from tests.integration.store.harness import summarize

            with open(job["takeover_file"] + ".tmp", "w") as f:
                json.dump(summarize(store, sid), f)
            os.replace(job["takeover_file"] + ".tmp", job["takeover_file"])
        deadline = time.monotonic() + 120
        while job.get("go_file") and not os.path.exists(job["go_file"]):
            if time.monotonic() > deadline:
                raise TimeoutError("no go signal")
            time.sleep(0.01)
    try:
        if store.load_session(sid) is None:
            session = agent.session(job["workspace"], _options(job, store))
            if job.get("passivate_after"):
                return _send_then_passivate(session, store, job)
            result = session.send(job["prompt"])
            return {"action": "send", "run_id": result.run_id, "text": result.text}
        session = agent.resume_session(sid, _options(job, store))
        runs = session.runs()
        if runs and runs[-1]["status"] == "completed":
            return {"action": "none", "run_id": runs[-1]["id"], "text": runs[-1]["result_text"]}
        for run in reversed(runs):
            try:
                result = session.resume_run(run["id"])
            except ResumeError as exc:
                if "no loop checkpoint found" not in str(exc):
                    raise
                continue
            return {
                "action": "resume",
                "from": run["id"],
                "run_id": result.run_id,
                "text": result.text,
                "tool_calls_count": result.tool_calls_count,
                "total_tokens": result.total_tokens,
            }
        result = session.send(job["prompt"])
        return {"action": "send", "run_id": result.run_id, "text": result.text}
    finally:
        agent.close()


def _send_then_passivate(
    session: Any, store: FileSessionStore, job: dict[str, Any]
) -> dict[str, Any]:
    """``send`` in this thread; from another thread, once ``passivate_after`` rounds are durable,
    ``session.passivate("node_drain", now + 10 s)`` as the session pod's HTTP handler would."""
    box: dict[str, Any] = {}

    def drain() -> None:
        while True:
            runs = store.run_ids(job["session_id"])
            cp = store.load_checkpoint(job["session_id"], runs[-1]) if runs else None
            if cp is not None and cp.turn >= job["passivate_after"]:
                break
            time.sleep(0.005)
        box["passivation"] = session.passivate(
            "node_drain", deadline_ms=int(time.time() * 1000) + 10_000
        )

    t = threading.Thread(target=drain)
    t.start()
    try:
        session.send(job["prompt"])
        box["error"] = None
    except RunPassivatedError as exc:
        box["error"] = str(exc)
    t.join()
    return {"action": "passivated", **box}


def _child(job: dict[str, Any]) -> None:
    code = 0
    try:
        fd = os.open(job["log"], os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        os.dup2(fd, 1)
        os.dup2(fd, 2)
        os.close(fd)
        out = run_job(job)
        tmp = job["result"] + ".tmp"
        with open(tmp, "w") as f:
            json.dump(out, f)
        os.replace(tmp, job["result"])
    except FencedError as exc:
        print(f"fenced: {exc}", flush=True)
        code = EXIT_FENCED
    except BaseException:
        traceback.print_exc()
        code = EXIT_ERROR
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)


def warm_up() -> None:
    """Pay the one-time costs before forking: lazy imports of the HTTP stack and the first
    request (one round trip to an in-loop scripted server), and the TLS context every new HTTP
    client builds (memoised: the tests talk plain HTTP to loopback). No thread survives this."""
    import asyncio

    import httpcore2

    from session_runtime.llm.client import OpenAIChatClient
    from session_runtime.llm.scripted import ScriptedServer

    ctx = httpcore2.default_ssl_context()
    httpcore2.default_ssl_context = lambda *a, **k: ctx

    async def once() -> None:
        srv = ScriptedServer({"turns": [{"text": "warm"}], "on_exhausted": "repeat_last"})
        await srv.start()
        try:
            client = OpenAIChatClient("warm", base_url=srv.base_url, api_key="k")
            await client.complete([{"role": "user", "content": "hi"}], None)
            await client.aclose()
        finally:
            await srv.stop()

    asyncio.run(once())


def _status(raw: int) -> int:
    return os.waitstatus_to_exitcode(raw)


def main() -> None:
    warm_up()
    out = sys.stdout
    for line in sys.stdin:
        msg = json.loads(line)
        op = msg["op"]
        if op in ("spawn", "run"):
            pid = os.fork()
            if pid == 0:
                _child(msg["job"])
            if op == "spawn":
                reply: dict[str, Any] = {"pid": pid}
            else:
                reply = {"pid": pid, "status": _status(os.waitpid(pid, 0)[1])}
        elif op == "wait":
            reply = {"status": _status(os.waitpid(msg["pid"], 0)[1])}
        else:
            reply = {"error": f"unknown op {op!r}"}
        out.write(json.dumps(reply) + "\n")
        out.flush()


if __name__ == "__main__":
    main()
