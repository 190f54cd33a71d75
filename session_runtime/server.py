"""``berth-session``: the process of a session pod (docs/architecture.md §5 contract, §8
passivation).

Owned by the session-pod entrypoint; started by the kubelet (or the dev cluster's process node
agent) in the pod the operator creates. It reads its environment and the options file
(:mod:`session_runtime.pod.config`, :mod:`berth_contract.options`), builds the agent session
on the shared-volume store with the pod's epoch, starts the task (``send(prompt)``) or resumes the
interrupted run (``resume_session`` + ``resume_run(BERTH_RESUME_RUN_ID)``), serves the pod API, and
when it ends writes exactly one JSON object to ``BERTH_TERMINATION_LOG``
(:mod:`berth_contract.termination`) and exits with the outcome's code.

HTTP (aiohttp, on ``POD_IP:BERTH_HTTP_PORT``, default port 8080). Every endpoint except
``/healthz``, ``/readyz`` and ``/metrics`` demands the session's API token (the file
``BERTH_API_TOKEN_FILE``, from the Secret ``<name>-berth`` the operator made) as
``Authorization: Bearer <token>`` or ``X-Berth-Token: <token>`` (the header the apiserver's pod
proxy passes through): no token → 401 ``{"error": "unauthenticated"}``, a wrong one → 403
``{"error": "forbidden"}``, compared in constant time; refusals are counted in
``berth_session_api_refused_total{reason}``. The token is never logged or stored::

    GET  /healthz          200 {"ok": true}                    the event loop answers
    GET  /readyz           200 {"ready": true, "state"} once the session is built and the
                           process is not exiting; else 503 {"ready": false, "state"}
    GET  /metrics          Prometheus text, berth_session_* (session_runtime.metrics)
    GET  /v1/state         200 berth_contract.state.state_body(...)
    POST /v1/passivate     {"reason": str, "deadlineMs": int?}  (deadline in epoch ms; default
                           now + passivation.deadlineSeconds)
                           202 {"accepted": true, "state", "passivation"}; idempotent: later calls
                           answer 202 with the first request's passivation and the current state;
                           409 {"error": "finished", "state"} once the run completed, failed or
                           was fenced; 400 for a bad body
    POST /v1/messages      {"prompt": str}  keepAlive sessions only
                           202 {"accepted": true, "state": "running"} when idle: a new run starts;
                           409 {"error": "not_keep_alive"} for a session without keepAlive;
                           409 {"error": "busy", "state"} while a run is in progress or the
                           session is starting: messages are NOT queued, the caller retries;
                           409 {"error": "passivating" | "finished", "state"} afterwards;
                           400 for a bad body
    GET  /v1/runs/{runId}/events?after=SEQ&limit=N
                           200 one run's tool calls (lane, times, outcome) and conversation,
                           masked and cut (berth_contract.runview); 404 for a run not retained;
                           400 for a malformed id or query

Passivation (§8): ``POST /v1/passivate`` and SIGTERM/SIGINT both call ``Session.passivate_async``
(reason ``sigterm`` for a signal, deadline ``now + passivation.deadlineSeconds``: the operator sets
``terminationGracePeriodSeconds`` to the deadline plus a margin, so the checkpoint and the
termination message are written before the kubelet's SIGKILL). The runtime emits
``passivation_requested`` to its hooks, starts no new LLM call, lets running tools finish until the
deadline and writes its checkpoint; the process then exits with outcome ``passivated``. If the
runtime has not finished :data:`PASSIVATION_SLACK_MS` after the deadline, the process exits
``passivated`` anyway: the last durable round in the store is what the replacement resumes from.
A run that completes while passivation is pending ends ``completed`` (keepAlive: ``passivated``).

Outcomes and exit codes: ``completed`` 0, ``passivated`` 0, ``failed`` 1 (2 for bad input: env or
options file), ``fenced`` 3 (a ``FencedError`` was seen anywhere: a newer epoch owns the session).

Start-up (:mod:`session_runtime.pod.start`): the store, not only ``BERTH_RESUME_RUN_ID``, decides
the first step: a saved session is resumed with ``resume_session``; its target run (the resume id,
else the newest run) is continued with ``resume_run`` unless it completed, in which case a keepAlive
session goes idle and any other ends ``completed`` at once; nothing saved means ``send(prompt)``.
So a replacement pod never redoes a finished task.

Store layout: ``FileSessionStore(BERTH_STORE_DIR/<namespace>, epoch=<base>+BERTH_EPOCH)`` (base: see
``session_runtime.store.incarnation``) with session id
``<name>``, i.e. ``BERTH_STORE_DIR/<ns>/<name>/`` as in docs/architecture.md §6.

Warm mode (``BERTH_WARM_POOL`` set: a SessionWarmPool's pod): :mod:`session_runtime.pod.warm`
serves ``/healthz``, ``/readyz`` and ``POST /v1/adopt`` until the operator gives it a session, then
confines the process to that session's directories and continues as above with the session's
configuration; SIGTERM before an adoption exits 0.

Tool sandbox (``BERTH_TOOL_SANDBOX``, from ``spec.toolSandbox``): before it starts or resumes a
run, the process probes Landlock (:func:`tool_sandbox_refusal`). Without it and with ``required``
(the default) it ends at once with outcome ``failed``, code ``ToolSandboxUnavailable`` and a reason
naming the node (exit 1), so the operator reports it instead of a bash call failing mid-run. A
warm pod probes it before it serves at all: it can never confine an adopted session without it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
import sys
from collections.abc import Mapping
from typing import NoReturn, TypeVar

from aiohttp import web
from pydantic import BaseModel

from berth_contract import envvars
from berth_contract import tracing as names
from berth_contract.options import OptionsError, SessionPodOptions, load_options
from berth_contract.termination import TerminationMessage, render
from berth_telemetry import logs, tracing
from session_runtime import early_signals
from session_runtime.errors import (
    SessionRuntimeError,
)
from session_runtime.metrics import SessionMetrics
from session_runtime.pod import termination, warm
from session_runtime.pod.config import (
    PodConfig,
    PodConfigError,
    parse_env,
    read_secret_file,
    termination_log_from_env,
)
from session_runtime.pod.http import make_app
from session_runtime.pod.lifecycle import SessionPod, now_ms
from session_runtime.tools import sandbox

log = logging.getLogger("berth.session")

BodyT = TypeVar("BodyT", bound=BaseModel)


async def run(
    cfg: PodConfig, opts: SessionPodOptions, token: bytes, listener: socket.socket | None = None
) -> TerminationMessage:
    """Serve the pod until the session ends; return its termination message. ``token`` guards
    the API (see the module docstring). ``listener``: the listening socket to serve on (an
    adopted warm pod's, still open: ``session_runtime.pod.warm``); else one is bound on
    ``cfg.pod_ip:cfg.http_port``."""
    metrics = SessionMetrics()
    pod = SessionPod(cfg, opts, metrics)
    outcome: asyncio.Future[str | None] = asyncio.get_running_loop().create_future()
    runner = web.AppRunner(make_app(pod, token, outcome), access_log=None)
    await runner.setup()
    try:
        try:
            site = (
                web.SockSite(runner, listener)
                if listener is not None
                else web.TCPSite(runner, cfg.pod_ip, cfg.http_port)
            )
            await site.start()
        except OSError as exc:
            return TerminationMessage(
                outcome="failed", reason=f"cannot listen on {cfg.pod_ip}:{cfg.http_port}: {exc}"
            )
        log.info("serving on %s:%d", cfg.pod_ip, cfg.http_port)
        loop = asyncio.get_running_loop()

        def on_signal(name: str) -> None:
            log.info("%s received", name)
            deadline_s = opts.passivation.deadline_seconds
            pod.request_passivation("sigterm", now_ms() + deadline_s * 1000)

        for sig in early_signals.STOP_SIGNALS:
            loop.add_signal_handler(sig, on_signal, sig.name)
        if (early := early_signals.take()) is not None:  # came while the pod started
            on_signal(early.name)
        try:
            try:
                pod.build()
            except (SessionRuntimeError, ValueError, OSError) as exc:
                message = pod.build_failed(exc)
            else:
                pod.start()
                message = await pod.wait()
        finally:
            await pod.close()
        if pod.settled():
            # Done with the session: nothing touches its store any more. ``GET /v1/outcome``
            # answers now; the runner's cleanup lets those answers go out before it closes.
            outcome.set_result(render(message))
        else:  # the operator waits for the kubelet's report of the container's end instead
            log.warning("a run outlived its cancellation: the end is not reported early")
        return message
    finally:
        if not outcome.done():  # waiting requests answer 204 at once: the cleanup awaits them
            outcome.set_result(None)
        with contextlib.suppress(Exception):
            await runner.cleanup()


def load(env: Mapping[str, str]) -> tuple[PodConfig, SessionPodOptions, bytes]:
    """Parse the environment, read the API token file and the options file: (config, options,
    token). Raises PodConfigError or OptionsError (never showing the token)."""
    cfg = parse_env(env)
    assert cfg.api_token_file is not None  # required by parse_env
    token = read_secret_file(cfg.api_token_file, "BERTH_API_TOKEN_FILE")
    opts = load_options(cfg.options_file)
    ref = opts.session
    if ref is not None and (
        (ref.namespace, ref.name) != (cfg.namespace, cfg.name) or ref.uid != cfg.session_uid
    ):
        raise OptionsError(
            f"options file {cfg.options_file} is for {ref.namespace}/{ref.name} (uid {ref.uid}), "
            f"not {cfg.session_key} (uid {cfg.session_uid})"
        )
    return cfg, opts, token


def tool_sandbox_refusal(cfg: PodConfig, opts: SessionPodOptions) -> str | None:
    """The start-up probe of Landlock (:func:`session_runtime.tools.sandbox.startup_refusal`):
    why this pod must not start its session, or None. Bash runs in this pod unless the execute
    lane is all external (then the LaneWorker's own probe covers it). Raises SandboxError for a
    bad ``BERTH_TOOL_SANDBOX``."""
    lane = opts.lanes.get("execute")
    runs_tools = lane is None or lane.mode != "external"
    return sandbox.startup_refusal(
        sandbox.sandbox_mode(), sandbox.landlock_abi(), cfg.node_name, runs_tools=runs_tools
    )


def main() -> None:
    """Run the session pod (``berth-session``, via ``session_runtime.launch``). Exits with the
    outcome's code (module docstring)."""
    logs.configure(os.environ.get(envvars.LOG_LEVEL, "INFO"))
    env = os.environ
    listener = None
    try:
        if env.get(envvars.WARM_POOL):
            try:
                adopted = warm.wait_for_adoption(env)  # a warm pod: wait to be given one
            except warm.WarmStopped:
                log.info("warm pod stopped before it was adopted")
                exit_now(0)
            cfg, opts, token, listener = adopted.cfg, adopted.opts, adopted.token, adopted.listener
        else:
            cfg, opts, token = load(env)
        telemetry(cfg)
        refusal = tool_sandbox_refusal(cfg, opts)
    except (PodConfigError, OptionsError, warm.WarmError, sandbox.SandboxError) as exc:
        log.error("%s", exc)
        code = sandbox.TOOL_SANDBOX_UNAVAILABLE if isinstance(exc, warm.WarmUnconfinable) else None
        message = TerminationMessage(
            outcome="failed", reason=str(exc), bad_input=code is None, code=code
        )
        termination.write(termination_log_from_env(env), message)
        sys.exit(message.exit_code)
    if refusal is not None:
        log.error("%s", refusal)
        message = TerminationMessage(
            outcome="failed", reason=refusal, code=sandbox.TOOL_SANDBOX_UNAVAILABLE
        )
        termination.write(cfg.termination_log, message)
        exit_now(message.exit_code)
    try:
        with tracing.remote_parent({"traceparent": env.get(envvars.TRACEPARENT, "")}):
            message = asyncio.run(run(cfg, opts, token, listener))  # the placement's child
    except Exception as exc:  # a bug: still leave a termination message behind
        log.exception("berth-session crashed")
        message = TerminationMessage(
            outcome="failed", reason=f"internal error: {type(exc).__name__}: {exc}"
        )
    termination.write(cfg.termination_log, message)
    exit_now(message.exit_code)


def telemetry(cfg: PodConfig) -> None:
    """Labels on every log record (session, epoch) and, when an OTLP endpoint is set, the
    tracer provider of service ``berth-session`` (:mod:`berth_telemetry`)."""
    logs.bind(session=cfg.session_key, epoch=cfg.epoch)
    tracing.configure(
        "berth-session",
        {
            names.SESSION: cfg.session_key,
            names.SESSION_UID: cfg.session_uid,
            names.EPOCH: cfg.epoch,
            "k8s.namespace.name": cfg.namespace,
            "k8s.pod.name": cfg.pod_name,
            names.NODE: cfg.node_name,
        },
    )


def exit_now(code: int) -> NoReturn:
    """End the process with ``code`` once its work is done: flush the log and the standard
    streams, then ``os._exit``. The interpreter's own finalization (tearing down every module
    and object the session imported and made) costs 250-400 ms of CPU here, after the
    termination message is written and before the kubelet sees the container end, on the path
    of every passivation; nothing the session needs happens in it (its store writes are
    fsynced, its tools have ended)."""
    tracing.flush()
    logging.shutdown()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    os._exit(code)


if __name__ == "__main__":
    main()
