"""The campaign's zygote: forks session processes and ``berth-worker`` processes from one warm
interpreter, so a scenario costs tens of milliseconds of process start-up instead of seconds.

Run as ``python -m tests.chaos.child`` (cwd = repo root). It imports the runtime once, then serves
JSON-line commands on stdin, one JSON line answered on stdout for each:

``{"op": "session", "job": {...}}`` -> ``{"pid": N}``: fork a session process (:func:`run_session`);
``{"op": "worker", "job": {...}}`` -> ``{"pid": N}``: fork a LaneWorker process: the job's ``env``
    is added to the environment and ``session_runtime.worker.main`` runs, exactly what the
    ``berth-worker`` console script runs;
``{"op": "exec", "argv": [...]}`` -> ``{"pid": N}``: fork and exec a program (the campaign's
    ``redis-server``, so that it goes when the zygote goes);
``{"op": "poll", "pid": N}`` -> ``{"status": <exit code, -signal, or null while running>}``;
``{"op": "wait", "pid": N}`` -> ``{"status": ...}``.

When stdin closes, every child still running is killed (a stopped campaign leaves nothing behind).

A session process does what a session pod does at start (``session_runtime.pod``): claim the
lease of its epoch (``FileSessionStore.acquire``), build the session (``Agent.resume_session`` if
the store holds it, else ``Agent.session``) with the lane queue and Redis transport when the
execute lane is external, decide with the pod's own :func:`session_runtime.pod.start.plan_start`,
then ``send`` the prompt or ``resume_run`` the run it names. It writes ``{"outcome": ...}`` to the
job's ``result`` file and exits 0 (completed, passivated), 3 (fenced) or 4 (failed).

Faults applied inside the process (the job's ``faults``), installed once the session is about to
start so they hit the runtime and not the harness:

- ``store_op_kill``: SIGKILL itself at the Nth ``os.fsync``/``os.fdatasync``/``os.replace``/
  ``os.rename``/``os.link`` (the store's durability points, so the kill lands inside store writes:
  the lease claim, the takeover snapshot, a journal append, a compaction);
- ``fsync_delay_ms``: every fsync/fdatasync sleeps first (a slow shared volume);
- ``enospc_after``: writes to files under the store directory fail with ``ENOSPC`` once that many
  bytes were written (a short write first, as a full filesystem does);
- ``clock_skew_ms``: ``time.time``/``time.time_ns`` shifted (wall clock only; monotonic time is
  untouched, as on a real host whose clock is off);
- ``passivate_at_ms`` or ``passivate_after_call``, with ``passivate_deadline_ms``:
  ``Session.passivate_async("node_drain", now + deadline)`` from the process's own loop after that
  delay, or as that tool call ends, as the pod's ``POST /v1/passivate``.

A worker job may carry ``clock_skew_ms`` too.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import json
import os
import signal
import sys
import time
import traceback
from typing import Any

from session_runtime import Agent, SessionOptions
from session_runtime.errors import FencedError, ResumeError, RunPassivatedError
from session_runtime.pod.start import plan_start
from session_runtime.store import FileSessionStore
from session_runtime.store.health import store_failure_code

EXIT_FENCED = 3
EXIT_FAILED = 4


# ---- in-process faults --------------------------------------------------------------------------


def skew_clock(skew_ms: int) -> None:
    """Shift the wall clock of this process by ``skew_ms``."""
    real_time, real_ns = time.time, time.time_ns
    time.time = lambda: real_time() + skew_ms / 1000
    time.time_ns = lambda: real_ns() + skew_ms * 1_000_000


def install_store_faults(faults: dict[str, Any], store_dir: str) -> None:
    """Install the store-level faults of the module docstring (kill at the Nth durability
    point, slow fsync, ENOSPC after N bytes)."""
    kill_at = int(faults.get("store_op_kill") or 0)
    delay = float(faults.get("fsync_delay_ms") or 0) / 1000
    count = [0]

    def point() -> None:
        count[0] += 1
        if kill_at and count[0] >= kill_at:
            os.kill(os.getpid(), signal.SIGKILL)

    def wrap_sync(real: Any) -> Any:
        def synced(fd: int) -> None:
            if delay:
                time.sleep(delay)
            point()
            real(fd)

        return synced

    def wrap_rename(real: Any) -> Any:
        def renamed(*args: Any, **kwargs: Any) -> Any:
            point()
            return real(*args, **kwargs)

        return renamed

    if kill_at or delay:
        os.fsync = wrap_sync(os.fsync)
        os.fdatasync = wrap_sync(os.fdatasync)
    if kill_at:
        os.replace = wrap_rename(os.replace)
        os.rename = wrap_rename(os.rename)
        os.link = wrap_rename(os.link)
    budget = faults.get("enospc_after")
    if budget is not None:
        _install_enospc(int(budget), os.path.realpath(store_dir))


def _install_enospc(budget: int, root: str) -> None:
    real_write = os.write
    left = [budget]

    def write(fd: int, data: Any) -> int:
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            target = ""
        if not target.startswith(root + os.sep):
            return real_write(fd, data)
        if left[0] <= 0:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        view = memoryview(data)[: left[0]]
        n = real_write(fd, view)
        left[0] -= n
        return n

    os.write = write


# ---- the session process ----------------------------------------------------------------------


def _executor(job: dict[str, Any]) -> Any:
    lanes = job.get("lanes")
    if not lanes:
        return None
    from berth_contract.taskauth import derive_session_key, read_key_file
    from session_runtime.lanes import LaneQueue, SessionQueueConfig
    from session_runtime.tools import DirectExecutor
    from session_runtime.transport import RedisTaskTransport

    config = SessionQueueConfig()
    config.set_lane_handler("execute", "external", int(lanes["timeout_ms"]))
    transport = RedisTaskTransport.from_url(
        lanes["redis_url"],
        namespace=lanes["namespace"],
        session_name=job["session_id"],
        session_uid=job["session_uid"],
        epoch=job["epoch"],
        lane_workers={"execute": lanes["laneworker"]},
        shared_root=job["workspace"],
        task_key=derive_session_key(
            read_key_file(lanes["master_key_file"]), lanes["namespace"], job["session_id"]
        ),
        reply_grace_ms=int(lanes["grace_ms"]),
        block_ms=200,
    )
    return LaneQueue(config, runner=DirectExecutor(), transport=transport)


async def run_session(job: dict[str, Any]) -> dict[str, Any]:
    """Start or resume the job's session as a session pod would; returns its outcome
    (``{"outcome": "completed"|"passivated"|"done", "run_id", ...}``). Raises what the runtime
    raises (``FencedError``, ``StoreError``, ``SessionRuntimeError``)."""
    faults = job.get("faults") or {}
    if faults.get("clock_skew_ms"):
        skew_clock(int(faults["clock_skew_ms"]))
    install_store_faults(faults, job["store"])
    sid = job["session_id"]
    store = FileSessionStore(job["store"], epoch=job["epoch"], snapshot_min_bytes=4096)
    store.acquire(sid)
    options = SessionOptions(
        model="openai/scripted",
        session_id=sid,
        session_store=store,
        auto_save=True,
        max_tool_rounds=100,
        llm_backoff_ms=1,
        circuit_breaker_threshold=4,
    )
    agent = Agent.create({"providers": {"openai": {"base_url": job["base_url"], "api_key": "k"}}})
    try:
        saved = store.load_session(sid) is not None
        executor = _executor(job)
        if saved:
            session = agent.resume_session(
                sid, options, workspace=job["workspace"], executor=executor
            )
        else:
            session = agent.session(job["workspace"], options, executor=executor)
        plan = plan_start(
            None,
            saved,
            session.runs(),
            False,
            has_checkpoint=lambda run_id: store.load_checkpoint(sid, run_id) is not None,
        )
        if plan.action in ("done", "idle"):
            return {"outcome": "done", "run_id": plan.run_id}
        if plan.action == "resume" and plan.run_id:
            run_id = plan.run_id

            async def start() -> Any:
                try:
                    return await session.resume_run_async(run_id)
                except ResumeError:  # no checkpoint of that run: nothing ran, start afresh
                    return await session.send_async(job["prompt"])

            work = start()
        else:
            work = session.send_async(job["prompt"])
        run = asyncio.ensure_future(work)
        passivation = _passivation_trigger(session, run, faults)
        try:
            result = await run
        except RunPassivatedError:
            answer = await passivation[0] if passivation else {}
            return {"outcome": "passivated", **dict(answer)}
        for task in passivation:  # requested while the run was finishing: it must still answer
            await task
        return {"outcome": "completed", "run_id": result.run_id, "text": result.text}
    finally:
        await agent.close_async()


def _passivation_trigger(
    session: Any, run: asyncio.Future[Any], faults: dict[str, Any]
) -> list[asyncio.Future[Any]]:
    """Schedule ``Session.passivate_async("node_drain", now + deadline)`` as the pod's
    ``POST /v1/passivate`` handler would: after ``passivate_at_ms``, or from the ``tool_end`` hook
    of the call ``passivate_after_call`` (the task's last one, so the request races the final
    commit, the final model call and the run's end). Returns a list that holds the
    passivation's task once it was requested (it is not, when the run ended first)."""
    deadline_ms = int(faults.get("passivate_deadline_ms") or 0)
    started: list[asyncio.Future[Any]] = []

    def request() -> None:
        if started or run.done():
            return
        deadline = int(time.time() * 1000) + deadline_ms
        started.append(asyncio.ensure_future(session.passivate_async("node_drain", deadline)))

    if faults.get("passivate_at_ms") is not None:
        asyncio.get_running_loop().call_later(int(faults["passivate_at_ms"]) / 1000, request)
    elif faults.get("passivate_after_call") is not None:
        last = str(faults["passivate_after_call"])

        def on_tool_end(event: Any) -> None:
            if event.get("id") == last:
                request()

        session.register_hook("chaos-passivate", "tool_end", on_tool_end)
    return started


def _session_child(job: dict[str, Any]) -> None:
    code = 0
    try:
        _redirect(job["log"])
        out = asyncio.run(run_session(job))
        _write_json(job["result"], out)
    except FencedError as exc:
        print(f"fenced: {exc}", flush=True)
        code = EXIT_FENCED
    except RunPassivatedError as exc:
        _write_json(job["result"], {"outcome": "passivated", "detail": str(exc)})
    except BaseException as exc:
        traceback.print_exc()
        code = EXIT_FAILED
        # What a session pod puts in its termination message: the store failure's code.
        failure = {"outcome": "failed", "code": store_failure_code(exc), "detail": str(exc)}
        with contextlib.suppress(OSError):
            _write_json(job["result"], failure)
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)


def _worker_child(job: dict[str, Any]) -> None:
    code = 1
    try:
        _redirect(job["log"])
        os.environ.update(job["env"])
        if job.get("clock_skew_ms"):
            skew_clock(int(job["clock_skew_ms"]))
        from session_runtime import worker

        code = worker.main([])
    except BaseException:
        traceback.print_exc()
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)


def _exec_child(argv: list[str]) -> None:
    try:
        fd = os.open(os.devnull, os.O_RDWR)
        for target in (0, 1, 2):
            os.dup2(fd, target)
        os.execv(argv[0], argv)
    finally:
        os._exit(127)


def _redirect(log: str) -> None:
    fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def _write_json(path: str, data: Any) -> None:
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(data, f)
    os.replace(tmp, path)


def warm_up() -> None:
    """Pay one-time costs before forking (imports, the first HTTP request, the TLS context);
    no thread survives this. Same as the store tests' zygote."""
    from tests.integration.store.child import warm_up as store_warm_up

    store_warm_up()
    import redis.asyncio  # noqa: F401

    import session_runtime.lanes
    import session_runtime.transport
    import session_runtime.worker  # noqa: F401


def _status(raw: int) -> int:
    return os.waitstatus_to_exitcode(raw)


def main() -> None:
    """Serve the zygote protocol (module docstring) until stdin closes."""
    warm_up()
    out = sys.stdout
    children: set[int] = set()
    for line in sys.stdin:
        msg = json.loads(line)
        op = msg["op"]
        reply: dict[str, Any]
        if op in ("session", "worker"):
            pid = os.fork()
            if pid == 0:
                (_session_child if op == "session" else _worker_child)(msg["job"])
            children.add(pid)
            reply = {"pid": pid}
        elif op == "exec":
            pid = os.fork()
            if pid == 0:
                _exec_child(msg["argv"])
            children.add(pid)
            reply = {"pid": pid}
        elif op == "poll":
            try:
                done, raw = os.waitpid(msg["pid"], os.WNOHANG)
            except ChildProcessError:
                reply = {"status": None, "error": "no such child"}
            else:
                reply = {"status": _status(raw) if done else None}
                if done:
                    children.discard(msg["pid"])
        elif op == "wait":
            reply = {"status": _status(os.waitpid(msg["pid"], 0)[1])}
            children.discard(msg["pid"])
        else:
            reply = {"error": f"unknown op {op!r}"}
        out.write(json.dumps(reply) + "\n")
        out.flush()
    for pid in children:  # the campaign went away: leave no process of it behind
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
        with contextlib.suppress(ChildProcessError):
            os.waitpid(pid, 0)


if __name__ == "__main__":
    main()
