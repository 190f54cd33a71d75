"""Warm mode of ``berth-session``: a pre-started pod of a SessionWarmPool waits to be given a
session, then confines itself to that session's directories and runs it like a created pod.

Owned by the ``berth-session`` entrypoint (``session_runtime.server.main`` calls
:func:`wait_for_adoption` when ``BERTH_WARM_POOL`` is set). A warm pod has done its imports and
has its namespace's part of the shared volume mounted (``workspaces/<ns>`` at
``BERTH_WORKSPACES_DIR``, ``store/<ns>`` at ``BERTH_STORE_DIR/<ns>``): a pod's volumes are fixed
at creation, so it cannot mount only the subPaths of a session it does not know yet. Before it
touches anything of the session it is given, the process confines itself with Landlock
(:func:`confine`) to that session's workspace and store directories (plus the system, its
``/tmp`` and the LLM key), so it, and every tool it starts, can reach no other session's files —
the isolation a created pod gets from its subPath mounts (docs/security.md, "Warm pools").

Environment (set by the operator's warm-pod builder): ``BERTH_WARM_POOL`` (pool name),
``BERTH_WARM_TOKEN_FILE`` (the pool's adoption token), ``BERTH_STORE_DIR``,
``BERTH_WORKSPACES_DIR``, ``POD_NAMESPACE``, and as for a created pod ``POD_NAME``, ``POD_IP``,
``NODE_NAME``, ``BERTH_HTTP_PORT``, ``BERTH_TERMINATION_LOG``, ``OPENAI_BASE_URL``,
``BERTH_LLM_API_KEY_FILE``.

HTTP while warm (same port as the session API)::

    GET  /healthz     200 {"ok": true}
    GET  /readyz      200 {"ready": true, "state": "warm"}
    GET  /metrics     200, empty (the session PodMonitor selects warm pods too)
    POST /v1/adopt    the pool token as ``Authorization: Bearer`` or ``X-Berth-Token`` (401/403
                      as the session API); body :class:`AdoptRequest`.
                      202 {"adopted": true, "session": "<ns>/<name>", "epoch"} — idempotent: the
                      same session uid and epoch again answers 202 again; any other → 409
                      {"error": "adopted"}; 400 for a body that does not validate (wrong
                      namespace, unsafe workspace path, bad options).

After the 202 the warm server closes, the process confines itself and serves the session API on
the same port with the session's own token (``session_runtime.server.run``). The listening socket
itself is handed over, never closed: a request that arrives in between (the operator asking
``GET /v1/state`` once the adopted pod's watch event comes, a readiness probe) waits in the
socket's accept queue and is answered by the session API, instead of being refused and retried on
the operator's next pass a second later. The 202 says ``Connection: close``, so the client does not
send its next request on a connection of the closing warm server.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import hmac
import json
import logging
import os
import re
import socket
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from aiohttp import web
from pydantic import BaseModel, ConfigDict, Field, ValidationError
from pydantic.alias_generators import to_camel

from berth_contract import envvars
from berth_contract.options import OptionsError, SessionPodOptions, parse_options
from session_runtime import early_signals, listen
from session_runtime.pod.config import (
    DEFAULT_HTTP_PORT,
    PodConfig,
    PodConfigError,
    read_secret_file,
    termination_log_from_env,
)
from session_runtime.pod.http import presented_token
from session_runtime.tools import sandbox

log = logging.getLogger("berth.session.warm")

#: Where the adopted session's secrets and options are written (0700, inside the pod's /tmp,
#: which no tool process can read: tools get only their workspace and a private TMPDIR).
ADOPTED_DIR = "berth-adopted"
#: Read-only for the adopted session: the LLM key and CA bundle mounts (missing ones skipped).
LLM_DIRS = ("/var/run/berth/llm", "/var/run/berth/llm-ca")
_NAME_RE = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")


class WarmError(RuntimeError):
    """The warm pod cannot run (no Landlock, threads alive at confinement, bad environment)."""


class WarmUnconfinable(WarmError):
    """The node gives the warm pod no Landlock: it could never confine an adopted session. The
    message starts with ``ToolSandboxUnavailable`` and names the node."""


class WarmStopped(Exception):
    """SIGTERM or SIGINT arrived before any adoption: the warm pod exits 0."""


@dataclass(frozen=True, slots=True)
class WarmConfig:
    """The warm pod's environment (module docstring)."""

    pool: str
    namespace: str
    token_file: Path
    store_dir: Path
    workspaces_dir: Path
    tmp_dir: Path
    pod_name: str | None
    pod_ip: str
    node_name: str | None
    http_port: int
    termination_log: Path | None
    openai_base_url: str | None


def parse_warm_env(env: Mapping[str, str]) -> WarmConfig:
    """The :class:`WarmConfig` of ``env``; raises PodConfigError listing every problem."""
    problems: list[str] = []

    def need(key: str) -> str:
        value = env.get(key, "").strip()
        if not value:
            problems.append(f"{key} is not set")
        return value

    pool = need(envvars.WARM_POOL)
    namespace = need(envvars.POD_NAMESPACE)
    token = need(envvars.WARM_TOKEN_FILE)
    store = need(envvars.STORE_DIR)
    workspaces = need(envvars.WORKSPACES_DIR)
    if namespace and not _NAME_RE.match(namespace):
        problems.append(f"POD_NAMESPACE is not a namespace name: {namespace!r}")
    try:
        port = int(env.get(envvars.HTTP_PORT, "") or DEFAULT_HTTP_PORT)
    except ValueError:
        problems.append("BERTH_HTTP_PORT must be an integer")
        port = DEFAULT_HTTP_PORT
    if problems:
        raise PodConfigError(problems)
    return WarmConfig(
        pool=pool,
        namespace=namespace,
        token_file=Path(token),
        store_dir=Path(store),
        workspaces_dir=Path(workspaces),
        tmp_dir=Path(env.get("TMPDIR", "") or "/tmp"),
        pod_name=env.get(envvars.POD_NAME) or None,
        pod_ip=env.get(envvars.POD_IP) or "0.0.0.0",
        node_name=env.get(envvars.NODE_NAME) or None,
        http_port=port,
        termination_log=termination_log_from_env(env),
        openai_base_url=env.get("OPENAI_BASE_URL") or None,
    )


class _Model(BaseModel):
    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="forbid")


class AdoptSession(_Model):
    """The AgentSession being given to the pod."""

    namespace: str = Field(pattern=_NAME_RE.pattern)
    name: str = Field(pattern=_NAME_RE.pattern)
    uid: str = Field(min_length=1, max_length=64, pattern=r"^[-0-9a-zA-Z]+$")


class AdoptRequest(_Model):
    """Body of ``POST /v1/adopt`` (the operator's ``builders.warm_pod.adopt_body``)."""

    session: AdoptSession
    epoch: int = Field(ge=1)
    """Placement epoch of this pod (store fencing), as ``BERTH_EPOCH`` of a created pod."""
    resume_run_id: str | None = Field(default=None, max_length=128)
    workspace_sub_path: str = Field(default="", max_length=1024)
    """spec.workspace.subPath (relative to the session's workspace root)."""
    options: dict[str, Any]
    """options.json of the session, as its ConfigMap would hold it."""
    api_token: str = Field(min_length=16, max_length=4096)
    task_key: str | None = Field(default=None, max_length=4096)
    """The session's task HMAC key, base64."""
    redis_url: str | None = Field(default=None, max_length=4096)


def _subpath_problem(sub: str) -> str:
    if not sub:
        return ""
    if "\x00" in sub or sub.startswith("/"):
        return "workspaceSubPath must be relative"
    parts = sub.rstrip("/").split("/")
    if any(p in ("", ".", "..") for p in parts):
        return "workspaceSubPath must not contain '..', '.' or empty segments"
    return ""


def _write_private(path: Path, data: bytes) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
    with os.fdopen(fd, "wb") as fh:
        fh.write(data)


def adopted_config(wc: WarmConfig, req: AdoptRequest) -> tuple[PodConfig, SessionPodOptions, bytes]:
    """The created-pod configuration of the session ``req`` gives: paths of its own directories
    below the namespace mounts (created here), its secrets written 0600 below ``/tmp``.

    Raises PodConfigError (another namespace, unsafe path) or OptionsError (bad options)."""
    ref = req.session
    if ref.namespace != wc.namespace:
        raise PodConfigError([f"session namespace {ref.namespace!r} is not the pod's"])
    problem = _subpath_problem(req.workspace_sub_path)
    if problem:
        raise PodConfigError([problem])
    opts = parse_options(req.options)
    if opts.session is not None and (
        opts.session.namespace,
        opts.session.name,
        opts.session.uid,
    ) != (ref.namespace, ref.name, ref.uid):
        raise OptionsError("options are for another session")
    secrets = wc.tmp_dir / ADOPTED_DIR
    secrets.mkdir(mode=0o700, exist_ok=True)
    try:
        task_key = base64.b64decode(req.task_key, validate=True) if req.task_key else b""
    except ValueError:
        raise PodConfigError(["taskKey is not base64"]) from None
    _write_private(secrets / "api-token", req.api_token.encode())
    task_key_file = None
    if task_key:
        task_key_file = secrets / "task-key"
        _write_private(task_key_file, task_key)
    options_file = secrets / "options.json"
    _write_private(options_file, json.dumps(req.options).encode())
    root = wc.workspaces_dir / ref.name
    workspace = root / req.workspace_sub_path.rstrip("/") if req.workspace_sub_path else root
    workspace.mkdir(parents=True, exist_ok=True)
    (wc.store_dir / ref.namespace / ref.name).mkdir(parents=True, exist_ok=True)
    cfg = PodConfig(
        namespace=ref.namespace,
        name=ref.name,
        session_uid=ref.uid,
        epoch=req.epoch,
        store_dir=wc.store_dir,
        workspace=workspace,
        options_file=options_file,
        resume_run_id=req.resume_run_id or None,
        termination_log=wc.termination_log,
        redis_url=req.redis_url or None,
        workspace_root=root,
        api_token_file=secrets / "api-token",
        task_key_file=task_key_file,
        pod_name=wc.pod_name,
        pod_ip=wc.pod_ip,
        node_name=wc.node_name,
        http_port=wc.http_port,
        openai_base_url=wc.openai_base_url,
    )
    return cfg, opts, req.api_token.encode()


class WarmServer:
    """The warm pod's HTTP server (module docstring); :attr:`adopted` is set once adopted."""

    def __init__(self, wc: WarmConfig, token: bytes) -> None:
        self.wc = wc
        self.token = token
        self.result: tuple[PodConfig, SessionPodOptions, bytes] | None = None
        self.key: tuple[str, int] | None = None
        self.adopted = asyncio.Event()
        self.site: web.BaseSite | None = None
        """The site serving the warm API, stopped at the adoption (None: not served by a site)."""

    async def healthz(self, _: web.Request) -> web.Response:
        """``GET /healthz``: always 200 ``{"ok": true}`` (liveness)."""
        return web.json_response({"ok": True})

    async def metrics(self, _: web.Request) -> web.Response:
        """An empty exposition: warm pods are scraped like session pods (same labels)."""
        return web.Response(text="", content_type="text/plain")

    async def readyz(self, _: web.Request) -> web.Response:
        """``GET /readyz``: 200 ``{"ready": true, "state": "warm"}`` while adoptable; 503
        ``{"ready": false, "state": "adopted"}`` once adopted (no longer a warm pod to offer)."""
        if self.result is not None:
            return web.json_response({"ready": False, "state": "adopted"}, status=503)
        return web.json_response({"ready": True, "state": "warm"})

    async def adopt(self, request: web.Request) -> web.Response:
        """``POST /v1/adopt`` (module docstring): 401/403 on the pool token, 400 for a body or
        config that does not validate, 409 once adopted by another session uid or epoch, else 202.
        The first acceptance stops the warm site and sets :attr:`adopted`; a repeat is idempotent.
        """
        given = presented_token(request)
        if given is None:
            return web.json_response({"error": "unauthenticated"}, status=401)
        if not hmac.compare_digest(given, self.token):
            return web.json_response({"error": "forbidden"}, status=403)
        try:
            req = AdoptRequest.model_validate(await request.json())
        except (ValidationError, ValueError) as exc:
            return web.json_response({"error": "bad_request", "detail": str(exc)[:500]}, status=400)
        key = (req.session.uid, req.epoch)
        if self.key is not None:
            if key != self.key:
                return web.json_response({"error": "adopted"}, status=409)
            return self._accepted(req)
        try:
            result = adopted_config(self.wc, req)
        except (PodConfigError, OptionsError, OSError) as exc:
            return web.json_response({"error": "bad_request", "detail": str(exc)[:500]}, status=400)
        self.key, self.result = key, result
        log.info("adopted by %s/%s epoch %d", req.session.namespace, req.session.name, req.epoch)
        if self.site is not None:
            # Accept no more: what comes next waits in the listening socket for the session API
            # (this connection stays open for the answer).
            await self.site.stop()
        asyncio.get_running_loop().call_soon(self.adopted.set)
        return self._accepted(req)

    @staticmethod
    def _accepted(req: AdoptRequest) -> web.Response:
        who = f"{req.session.namespace}/{req.session.name}"
        resp = web.json_response({"adopted": True, "session": who, "epoch": req.epoch}, status=202)
        resp.force_close()  # the warm server closes next: no keep-alive on its connections
        return resp

    def app(self) -> web.Application:
        """The aiohttp application of the warm API: ``/healthz``, ``/readyz``, ``/metrics``,
        ``/v1/adopt``."""
        app = web.Application()
        app.router.add_get("/healthz", self.healthz)
        app.router.add_get("/readyz", self.readyz)
        app.router.add_get("/metrics", self.metrics)
        app.router.add_post("/v1/adopt", self.adopt)
        return app


def _listen(host: str, port: int) -> socket.socket:
    """A bound listening socket made here, not by ``getaddrinfo`` in an executor thread: the
    process must stay single-threaded until :func:`confine` (Landlock binds one thread)."""
    sock = listen.listen(host, port)
    sock.setblocking(False)
    return sock


@dataclass(frozen=True)
class Adopted:
    """What a warm pod was given: the session's config, options and API token, and the listening
    socket of the pod's HTTP port, still open (the session API serves on it: module docstring)."""

    cfg: PodConfig
    opts: SessionPodOptions
    token: bytes
    listener: socket.socket


async def serve_until_adopted(wc: WarmConfig, token: bytes) -> Adopted:
    """Serve the warm API until a valid adoption; close the server (not its listening socket);
    return what the pod was given. Raises WarmStopped on SIGTERM/SIGINT before an adoption
    (the socket is closed then)."""
    server = WarmServer(wc, token)
    listener = _listen(wc.pod_ip, wc.http_port)
    runner = web.AppRunner(server.app(), access_log=None, shutdown_timeout=1.0)
    await runner.setup()
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in early_signals.STOP_SIGNALS:  # PID 1 has no default action: stop on both
        loop.add_signal_handler(sig, stop.set)
    if early_signals.take() is not None:  # deleted while it started
        stop.set()
    try:
        # The site gets a duplicate: stopping it leaves ``listener`` listening (same socket).
        server.site = web.SockSite(runner, listener.dup())
        await server.site.start()
        log.info("warm pod of pool %s ready on %s:%d", wc.pool, wc.pod_ip, wc.http_port)
        adopted = asyncio.ensure_future(server.adopted.wait())
        stopped = asyncio.ensure_future(stop.wait())
        await asyncio.wait((adopted, stopped), return_when=asyncio.FIRST_COMPLETED)
        for task in (adopted, stopped):
            task.cancel()
        await asyncio.sleep(0)  # let the 202 leave
    finally:
        for sig in early_signals.STOP_SIGNALS:
            loop.remove_signal_handler(sig)
        early_signals.catch()  # until the session's loop takes over
        with contextlib.suppress(Exception):
            await runner.cleanup()
    if server.result is None:
        listener.close()
        raise WarmStopped("stopped while warm")
    cfg, opts, session_token = server.result
    return Adopted(cfg, opts, session_token, listener)


def warm_imports() -> None:
    """Import what the session will need (the LLM client, the agent, the cluster budget guard
    a session under a BudgetPolicy uses) and warm the LLM client's HTTP stack
    (:func:`session_runtime.llm.client.warm_up`), so adoption does not pay for it."""
    # (a created pod imports the budget guard only when it has a budget service)
    import session_runtime.budget.guard
    import session_runtime.pod.lifecycle  # noqa: F401
    from session_runtime.llm import client

    client.warm_up()


def confine(cfg: PodConfig, llm_dirs: tuple[str, ...] = (), tmp_dir: str = "/tmp") -> int:
    """Confine this process with Landlock to the adopted session: read-write on its workspace
    root, its store directory, ``tmp_dir`` (the pod's emptyDir) and the termination log;
    read-only on the system, the interpreter, ``/proc`` and ``llm_dirs``; nothing else (no other
    session's directories).
    Returns the Landlock ABI. Raises WarmError when other threads run (Landlock would leave them
    unconfined) or Landlock is unavailable."""
    if threading.active_count() != 1:
        raise WarmError(f"{threading.active_count()} threads alive: cannot confine every thread")
    assert cfg.workspace_root is not None
    rw = [
        str(cfg.workspace_root),
        str(cfg.store_dir / cfg.namespace / cfg.name),
        tmp_dir,
        *sandbox.DEVICES_RW,
    ]
    if cfg.termination_log is not None:
        rw.append(str(cfg.termination_log))
    ro = [*sandbox.SYSTEM_RO, *sandbox.python_dirs(), "/proc", *llm_dirs]
    try:
        return sandbox.restrict(rw, ro)
    except sandbox.SandboxError as exc:
        raise WarmError(str(exc)) from None


def wait_for_adoption(env: Mapping[str, str]) -> Adopted:
    """Run the warm pod until adopted and confined; return what ``server.run`` needs.

    Raises PodConfigError (bad environment), WarmError (no Landlock, cannot confine), WarmStopped
    (signalled before an adoption)."""
    wc = parse_warm_env(env)
    if sandbox.landlock_abi() < 1:
        where = f"node {env['NODE_NAME']}" if env.get(envvars.NODE_NAME) else "this node"
        raise WarmUnconfinable(
            f"{sandbox.TOOL_SANDBOX_UNAVAILABLE}: {where} gives pods no Landlock: a warm pod "
            "needs it to confine the adopted session (whatever its toolSandbox)"
        )
    token = read_secret_file(wc.token_file, envvars.WARM_TOKEN_FILE)
    warm_imports()
    adopted = asyncio.run(serve_until_adopted(wc, token))
    key_file = env.get(envvars.LLM_API_KEY_FILE)
    llm = (*LLM_DIRS, str(Path(key_file).parent)) if key_file else LLM_DIRS
    confine(adopted.cfg, llm, str(wc.tmp_dir))
    return adopted


__all__ = [
    "AdoptRequest",
    "Adopted",
    "WarmConfig",
    "WarmError",
    "WarmUnconfinable",
    "adopted_config",
    "confine",
    "parse_warm_env",
    "wait_for_adoption",
]
