"""``berth-worker`` settings: read from the environment and ``--flags``, bounded by pydantic and
checked before a worker starts (the variables and defaults are listed in
:mod:`session_runtime.worker`)."""

from __future__ import annotations

import argparse
import os
from collections.abc import Mapping, Sequence
from typing import Any

from pydantic import AliasChoices, BaseModel, ConfigDict, Field, ValidationError
from pydantic_core import PydanticUndefined

from berth_contract import envvars, names
from berth_contract.taskauth import read_key_file


def _env(name: str, default: Any = PydanticUndefined, **bounds: Any) -> Any:
    """A field read from the variable ``name``; keywords still use the field name."""
    return Field(default, validation_alias=AliasChoices(name), **bounds)


class WorkerSettings(BaseModel):
    """``berth-worker`` settings; see the module docstring for the env names and defaults.

    Parsed and bounded by pydantic from the variable each field names; built from keywords
    (field names) in tests and benches."""

    model_config = ConfigDict(frozen=True, populate_by_name=True, extra="ignore")

    redis_url: str = _env(envvars.REDIS_URL, min_length=1)
    namespace: str = _env(envvars.NAMESPACE, min_length=1)
    laneworker: str = _env(envvars.LANEWORKER, min_length=1)
    pod_name: str = _env(envvars.POD_NAME, min_length=1)
    workspaces_root: str = _env(envvars.WORKSPACES_ROOT, min_length=1)
    master_key_file: str = _env(envvars.TASK_MASTER_KEY_FILE, min_length=1)
    pod_ip: str = _env(envvars.POD_IP, "127.0.0.1")
    concurrency: int = _env(envvars.WORKER_CONCURRENCY, 1, ge=1)
    task_timeout_seconds: float = _env(envvars.TASK_TIMEOUT_SECONDS, 600.0, gt=0)
    metrics_port: int = _env(envvars.METRICS_PORT, 9090, ge=0, le=65535)
    heartbeat_seconds: float = _env("BERTH_WORKER_HEARTBEAT_SECONDS", 10.0, gt=0)
    reclaim_interval_seconds: float = _env("BERTH_RECLAIM_INTERVAL_SECONDS", 2.0, gt=0)
    reply_ttl_seconds: int = _env("BERTH_REPLY_TTL_SECONDS", 604_800, ge=1)
    block_ms: int = Field(1_000, ge=1)
    """How long one XREADGROUP blocks (ms); not configurable from the environment."""

    @property
    def task_stream(self) -> str:
        """The LaneWorker's task stream (``berth_contract.names``)."""
        return names.task_stream(self.namespace, self.laneworker)

    @property
    def dead_letter_stream(self) -> str:
        """The LaneWorker's dead-letter stream (``berth_contract.names``)."""
        return names.dead_letter_stream(self.namespace, self.laneworker)

    def alive_key(self, consumer: str) -> str:
        """The liveness key of worker ``consumer`` (``berth_contract.names``)."""
        return names.alive_key(self.namespace, self.laneworker, consumer)

    @classmethod
    def variables(cls) -> dict[str, str]:
        """Field name → the variable it is read from."""
        out: dict[str, str] = {}
        for name, field in cls.model_fields.items():
            if isinstance(field.validation_alias, AliasChoices):
                out[name] = str(field.validation_alias.choices[0])
        return out

    @classmethod
    def from_env(
        cls, env: Mapping[str, str] | None = None, argv: Sequence[str] | None = None
    ) -> WorkerSettings:
        """Read env (default ``os.environ``; empty values count as unset) and ``--flags``
        (``--concurrency 4``; flags win). Raises ``SystemExit`` with a message naming every
        missing or invalid variable."""
        env = os.environ if env is None else env
        variables = cls.variables()
        p = argparse.ArgumentParser(prog="berth-worker", description="Berth LaneWorker process")
        for name, var in variables.items():
            p.add_argument("--" + name.replace("_", "-"), dest=name, help=f"(env {var})")
        flags = vars(p.parse_args(argv))
        raw = {var: env[var] for var in variables.values() if env.get(var, "").strip()}
        raw |= {variables[name]: value for name, value in flags.items() if value is not None}
        try:
            settings = cls.model_validate(raw)
        except ValidationError as exc:
            problems = [f"{e['loc'][0] if e['loc'] else '?'}: {e['msg']}" for e in exc.errors()]
            p.error("invalid settings: " + "; ".join(problems))
        try:
            settings.check_usable()
        except ValueError as exc:
            p.error(str(exc))
        return settings

    def check_usable(self) -> None:
        """Raise ``ValueError`` if these settings cannot run a worker: a relative workspaces
        root, an unreadable or short master key, names Redis keys cannot be built from."""
        if not os.path.isabs(self.workspaces_root):
            raise ValueError("BERTH_WORKSPACES_ROOT must be an absolute path")
        read_key_file(self.master_key_file)  # a clear error now, not at the first task
        self.alive_key(self.pod_name)  # validates namespace, LaneWorker and pod names
