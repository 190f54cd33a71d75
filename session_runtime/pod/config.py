"""Environment of a session pod → :class:`PodConfig` (docs/architecture.md §5, "Session pod
contract").

Owned by the ``berth-session`` entrypoint; called once by ``session_runtime.server.main`` before
anything else runs. Pure: :func:`parse_env` takes a mapping (``os.environ`` in production, a dict in
tests) and either returns a config or raises :class:`PodConfigError` listing *every* problem, so a
bad pod spec is fixed in one round trip.

Variables (all set by the operator; the process node agent rewrites path prefixes, so no path here
has a built-in absolute default):

========================== ======== ===========================================================
variable                   required meaning
========================== ======== ===========================================================
``BERTH_SESSION``          yes      ``<namespace>/<name>`` of the AgentSession
``BERTH_SESSION_UID``      yes      the AgentSession's ``metadata.uid`` (reply stream key)
``BERTH_EPOCH``            yes      placement epoch, integer >= 0 (store fencing, §6)
``BERTH_RESUME_RUN_ID``    no       run id to ``resume_run``; empty/unset = start a fresh run
``BERTH_STORE_DIR``        yes      root of the session store on the shared volume
``BERTH_WORKSPACE``        yes      the workspace directory the agent works in
``BERTH_OPTIONS_FILE``     yes      JSON options rendered by the operator (ConfigMap mount)
``BERTH_TERMINATION_LOG``  no       file for the exit JSON (``terminationMessagePath``); unset =
                                    message on stderr only
``BERTH_REDIS_URL``        no       Redis for external lanes; required when options name a
                                    LaneWorker (checked by the server, not here)
``BERTH_WORKSPACE_ROOT``   no       the session's workspace root (``BERTH_WORKSPACE`` is it or a
                                    directory below); external tasks carry the workspace
                                    relative to it
``BERTH_API_TOKEN_FILE``   yes      file holding the token the HTTP API demands (``Authorization:
                                    Bearer`` or ``X-Berth-Token``) on every endpoint but
                                    /healthz, /readyz, /metrics; read once at start
``BERTH_TASK_KEY_FILE``    no       file holding the session's task HMAC key (external lanes)
``BERTH_LLM_API_KEY_FILE`` no       file holding the LLM API key (read by the LLM client itself,
                                    not part of this config; wins over ``OPENAI_API_KEY``)
``BERTH_SHARED_ROOT``      no       legacy (local runs): mount path of a whole shared volume;
                                    external tasks then carry the workspace relative to it.
                                    Session pods no longer get it (they see only their own
                                    workspace and store)
``POD_NAME``               no       downward API; reported in ``/v1/state``
``POD_IP``                 no       address to bind; default ``0.0.0.0`` (all interfaces)
``NODE_NAME``              no       downward API; reported in ``/v1/state``
``BERTH_HTTP_PORT``        no       HTTP port, default 8080
``OPENAI_API_KEY``         no       LLM key for local runs (pods use ``BERTH_LLM_API_KEY_FILE``);
                                    read by the runtime's LLM client itself, never copied into
                                    this config, logged or stored
``OPENAI_BASE_URL``        no       LLM endpoint; overridden by ``options.llm.baseURL`` if set
``BERTH_BUDGET_URL``       no       the operator's budget service (BudgetPolicies); unset = only
                                    ``spec.budget`` applies
``BERTH_BUDGET_TIMEOUT_MS`` no      how long a budget request may take, default 2000
``BERTH_BUDGET_FAILURE_POLICY`` no  ``Closed`` (default) or ``Open``: what an unreachable budget
                                    service means until it has answered once
========================== ======== ===========================================================
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from berth_contract import envvars
from berth_contract.state import HTTP_PORT

#: Default HTTP port of the session pod (docs/architecture.md §5): the contract's.
DEFAULT_HTTP_PORT = HTTP_PORT

#: Default bind address when ``POD_IP`` is not given (a real pod's own network namespace).
DEFAULT_BIND_HOST = "0.0.0.0"

# DNS-1123 label (namespace) and subdomain (object name), as Kubernetes validates them.
_NAMESPACE_RE = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")
_NAME_RE = re.compile(r"^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?$")


class PodConfigError(ValueError):
    """The pod environment is unusable. ``problems`` lists one sentence per bad variable."""

    def __init__(self, problems: list[str]) -> None:
        super().__init__("invalid session pod environment: " + "; ".join(problems))
        self.problems = problems


@dataclass(frozen=True, slots=True)
class PodConfig:
    """Everything ``berth-session`` takes from its environment; paths as given (not resolved).

    ``openai_base_url`` is kept because the options' ``llm.baseUrl`` may override it; the API key
    is deliberately absent (see the table above), and so is the API token: only the path of its
    file is kept (:func:`read_secret_file` reads it)."""

    namespace: str
    name: str
    session_uid: str
    epoch: int
    store_dir: Path
    workspace: Path
    options_file: Path
    resume_run_id: str | None = None
    termination_log: Path | None = None
    redis_url: str | None = None
    shared_root: Path | None = None
    workspace_root: Path | None = None
    api_token_file: Path | None = None
    task_key_file: Path | None = None
    pod_name: str | None = None
    pod_ip: str = DEFAULT_BIND_HOST
    node_name: str | None = None
    http_port: int = DEFAULT_HTTP_PORT
    openai_base_url: str | None = None
    budget_url: str | None = None
    budget_timeout_ms: int = 2000
    budget_failure_policy: str = "Closed"

    @property
    def session_key(self) -> str:
        """``<namespace>/<name>``, the value of ``BERTH_SESSION``."""
        return f"{self.namespace}/{self.name}"


def _opt(env: Mapping[str, str], key: str) -> str | None:
    value = env.get(key, "").strip()
    return value or None


def termination_log_from_env(env: Mapping[str, str]) -> Path | None:
    """``BERTH_TERMINATION_LOG`` alone, so even a config error can be reported to the operator."""
    value = _opt(env, envvars.TERMINATION_LOG)
    return Path(value) if value else None


def _session_name(session: str, problems: list[str]) -> tuple[str, str]:
    """(namespace, name) of ``BERTH_SESSION`` ("" when unset or malformed, with a problem)."""
    if not session:
        return "", ""
    ns, sep, nm = session.partition("/")
    if not sep or not _NAMESPACE_RE.match(ns) or not _NAME_RE.match(nm):
        problems.append(f"BERTH_SESSION must be '<namespace>/<name>', got {session!r}")
        return "", ""
    return ns, nm


def _int_var(
    key: str, raw: str | None, lo: int, hi: int | None, default: int, problems: list[str]
) -> int:
    """``raw`` as an int in ``lo..hi`` (``hi`` None: no upper bound); ``default`` when unset;
    a problem naming ``key`` when malformed."""
    if raw is None:
        return default
    try:
        value = int(raw)
    except ValueError:
        value = None
    if value is None or value < lo or (hi is not None and value > hi):
        bound = f"in {lo}..{hi}" if hi is not None else f">= {lo}"
        problems.append(f"{key} must be an integer {bound}, got {raw!r}")
        return default
    return value


def parse_env(env: Mapping[str, str]) -> PodConfig:
    """Build a :class:`PodConfig` from ``env``.

    Raises :class:`PodConfigError` with one entry per missing or malformed variable.
    """
    problems: list[str] = []

    def required(key: str) -> str:
        value = _opt(env, key)
        if value is None:
            problems.append(f"{key} is not set")
            return ""
        return value

    namespace, name = _session_name(required(envvars.SESSION), problems)
    session_uid = required(envvars.SESSION_UID)
    epoch = _int_var(envvars.EPOCH, required(envvars.EPOCH) or None, 0, None, 0, problems)
    store_dir = required(envvars.STORE_DIR)
    workspace = required(envvars.WORKSPACE)
    options_file = required(envvars.OPTIONS_FILE)
    token_file = required(envvars.API_TOKEN_FILE)
    port = _int_var(
        envvars.HTTP_PORT, _opt(env, envvars.HTTP_PORT), 0, 65535, DEFAULT_HTTP_PORT, problems
    )
    budget_timeout = _int_var(
        envvars.BUDGET_TIMEOUT_MS, _opt(env, envvars.BUDGET_TIMEOUT_MS), 50, 60000, 2000, problems
    )
    budget_failure = _opt(env, envvars.BUDGET_FAILURE_POLICY) or "Closed"
    if budget_failure not in ("Closed", "Open"):
        problems.append(
            f"BERTH_BUDGET_FAILURE_POLICY must be Closed or Open, got {budget_failure!r}"
        )
    if problems:
        raise PodConfigError(problems)
    return PodConfig(
        namespace=namespace,
        name=name,
        session_uid=session_uid,
        epoch=epoch,
        store_dir=Path(store_dir),
        workspace=Path(workspace),
        options_file=Path(options_file),
        resume_run_id=_opt(env, envvars.RESUME_RUN_ID),
        termination_log=termination_log_from_env(env),
        redis_url=_opt(env, envvars.REDIS_URL),
        shared_root=Path(root) if (root := _opt(env, "BERTH_SHARED_ROOT")) else None,
        workspace_root=Path(w) if (w := _opt(env, envvars.WORKSPACE_ROOT)) else None,
        api_token_file=Path(token_file),
        task_key_file=Path(k) if (k := _opt(env, envvars.TASK_KEY_FILE)) else None,
        pod_name=_opt(env, envvars.POD_NAME),
        pod_ip=_opt(env, envvars.POD_IP) or DEFAULT_BIND_HOST,
        node_name=_opt(env, envvars.NODE_NAME),
        http_port=port,
        openai_base_url=_opt(env, "OPENAI_BASE_URL"),
        budget_url=_opt(env, envvars.BUDGET_URL),
        budget_timeout_ms=budget_timeout,
        budget_failure_policy=budget_failure,
    )


#: Largest secret file read (a token or key is tiny; a bigger file is a mistake, not a key).
MAX_SECRET_FILE_BYTES = 4096


def read_secret_file(path: Path, what: str) -> bytes:
    """The content of a mounted secret file, surrounding whitespace stripped.

    Raises :class:`PodConfigError` when it cannot be read, is empty or larger than
    :data:`MAX_SECRET_FILE_BYTES`. The message names the file, never its content.
    """
    try:
        with path.open("rb") as fh:
            raw = fh.read(MAX_SECRET_FILE_BYTES + 1)
    except OSError as exc:
        raise PodConfigError([f"{what} file {path} cannot be read: {exc.strerror}"]) from None
    if len(raw) > MAX_SECRET_FILE_BYTES:
        raise PodConfigError([f"{what} file {path} is larger than {MAX_SECRET_FILE_BYTES} bytes"])
    value = raw.strip()
    if not value:
        raise PodConfigError([f"{what} file {path} is empty"])
    return value
