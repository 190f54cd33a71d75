"""``options.json``: the session options the operator renders and the session pod reads
(docs/architecture.md §3, §5).

The one model of this document (:class:`SessionPodOptions`). The operator's builders construct it
from an AgentSession's spec and write :meth:`SessionPodOptions.render` into the session's Secret
``<name>-berth`` (key ``options.json``, mounted alone at ``BERTH_OPTIONS_FILE``); the session
runtime and warm pods read it with :func:`load_options` / :func:`parse_options`. camelCase keys on
the wire; both casings are accepted when reading (``keepAlive`` and ``keep_alive``); unknown fields
are ignored so an operator one version ahead does not stop older session images, but a newer
``schemaVersion`` is refused. Per-placement values (epoch, run to resume, paths) are environment
variables (:mod:`berth_contract.envvars`), not options: every epoch of a session shares this file.

Shape (every block optional except ``prompt`` and ``model``)::

    {"schemaVersion": 1,
     "session": {"namespace", "name", "uid"},          # must match BERTH_SESSION/_UID if present
     "prompt": str, "model": "provider/model",
     "llm": {"baseUrl": str?, "apiKeyEnv": "OPENAI_API_KEY"},
     "identity": {"tenantId", "principal", "agentTemplateId", "correlationId"},   # str?
     "limits": {"maxToolRounds", "maxParseRetries", "toolTimeoutSeconds",
                "circuitBreakerThreshold", "autoCompact", "autoCompactThreshold" ("0.8" | "80%"),
                "continuationEnabled", "maxContinuationTurns"},
     "retention": {"maxRunsRetained", "maxEventsPerRun", "maxTraceEvents"},
     "budget": {"maxTotalTokens", "maxToolCalls", "softLimitPercent"},
     "lanes": {"query"|"execute"|"generate"|"control":
               {"mode": "internal|external|hybrid", "timeoutSeconds", "maxConcurrency",
                "laneWorker": {"name", "taskStream"?}}},  (the consumer group is always
                                                      ``berth_contract.names.GROUP``)
     "resultStream": "berth:<ns>:s:{<uid>}:results",   # berth_contract.names.reply_stream
     "keepAlive": bool,
     "passivation": {"deadlineSeconds": int (default 120)},
     "peerCalls": {"gatewayUrl": str, "maxWaitSeconds": int (default 300)}}   # spec.peers

Errors: :class:`OptionsError` with a one-paragraph message (file unreadable, not JSON, or
failing validation with the offending field paths).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from decimal import Decimal, InvalidOperation
from pathlib import Path
from typing import Any, Literal

from pydantic import (
    AliasChoices,
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
)
from pydantic.alias_generators import to_camel

from berth_contract.names import task_stream

LaneName = Literal["control", "query", "execute", "generate"]
LaneMode = Literal["internal", "external", "hybrid"]

#: Newest ``schemaVersion`` of options.json this build understands.
OPTIONS_SCHEMA_VERSION = 1

#: Default passivation deadline (docs/architecture.md §3: ``passivation.deadlineSeconds``
#: default 120).
DEFAULT_PASSIVATION_DEADLINE_SECONDS = 120


class OptionsError(ValueError):
    """The options file cannot be used; the message says why and where."""


class _Model(BaseModel):
    model_config = ConfigDict(
        alias_generator=to_camel, populate_by_name=True, extra="ignore", frozen=True
    )


class SessionRef(_Model):
    """Which AgentSession the options belong to."""

    namespace: str
    name: str
    uid: str


class LlmOptions(_Model):
    """How the runtime reaches the model; the key itself is in the env var ``api_key_env``."""

    base_url: str | None = Field(
        default=None, validation_alias=AliasChoices("baseUrl", "baseURL", "base_url")
    )
    api_key_env: str = "OPENAI_API_KEY"
    timeout_seconds: int | None = None
    max_retries: int = 0
    organization: str | None = None
    project: str | None = None
    headers: dict[str, str] | None = None
    ca_file: str | None = None

    def provider(self, base_url: str | None, model: str) -> dict[str, Any]:
        """The agent config's provider entry (``session_runtime.agent.agent.parse_providers``)."""
        entry: dict[str, Any] = {
            "base_url": base_url,
            "api_key_env": self.api_key_env,
            "models": [model],
            "max_retries": self.max_retries,
        }
        for key, value in (
            ("timeout_s", self.timeout_seconds),
            ("organization", self.organization),
            ("project", self.project),
            ("headers", self.headers),
            ("ca_file", self.ca_file),
        ):
            if value:
                entry[key] = value
        return entry


class IdentityOptions(_Model):
    """``spec.identity``: opaque labels propagated to the runtime, hooks and the store."""

    tenant_id: str | None = None
    principal: str | None = None
    agent_template_id: str | None = None
    correlation_id: str | None = None


def _same(value: Any) -> Any:
    return value


def _seconds_to_ms(value: int) -> int:
    return value * 1000


#: ``spec.limits`` (options.json ``limits``) -> ``SessionOptions``: the one mapping, with the one
#: unit conversion (seconds in the spec, milliseconds in the A3S options).
LIMITS_TO_SESSION_OPTIONS: dict[str, tuple[str, Callable[[Any], Any]]] = {
    "max_tool_rounds": ("max_tool_rounds", _same),
    "max_parse_retries": ("max_parse_retries", _same),
    "tool_timeout_seconds": ("tool_timeout_ms", _seconds_to_ms),
    "circuit_breaker_threshold": ("circuit_breaker_threshold", _same),
    "auto_compact": ("auto_compact", _same),
    "auto_compact_threshold": ("auto_compact_threshold", _same),
    "continuation_enabled": ("continuation_enabled", _same),
    "max_continuation_turns": ("max_continuation_turns", _same),
}


class LimitsOptions(_Model):
    """``spec.limits``; None = the runtime's A3S default."""

    max_tool_rounds: int | None = Field(default=None, ge=1)
    max_parse_retries: int | None = Field(default=None, ge=0)
    tool_timeout_seconds: int | None = Field(default=None, ge=1)
    circuit_breaker_threshold: int | None = Field(default=None, ge=1)
    auto_compact: bool | None = None
    auto_compact_threshold: float | None = None
    continuation_enabled: bool | None = None
    max_continuation_turns: int | None = Field(default=None, ge=0)

    def session_options(self) -> dict[str, Any]:
        """The ``SessionOptions`` keyword arguments of the limits that are set
        (:data:`LIMITS_TO_SESSION_OPTIONS`)."""
        out: dict[str, Any] = {}
        for name, (target, convert) in LIMITS_TO_SESSION_OPTIONS.items():
            value = getattr(self, name)
            if value is not None:
                out[target] = convert(value)
        return out

    @field_validator("auto_compact_threshold", mode="before")
    @classmethod
    def _fraction(cls, value: Any) -> Any:
        """``"0.8"``, ``0.8`` and ``"80%"`` all mean 0.8; must end up in (0, 1]."""
        if value is None or isinstance(value, bool):
            return value
        text = str(value).strip()
        try:
            number = Decimal(text[:-1]) / 100 if text.endswith("%") else Decimal(text)
        except InvalidOperation as exc:
            raise ValueError(f"not a decimal or percent: {value!r}") from exc
        if not 0 < number <= 1:
            raise ValueError(f"must be in (0, 1] (or 1%..100%), got {value!r}")
        return float(number)


class RetentionOptions(_Model):
    """``spec.retention``: A3S ``SessionRetentionLimits`` caps; None = unbounded."""

    max_runs_retained: int | None = Field(default=None, ge=1)
    max_events_per_run: int | None = Field(default=None, ge=1)
    max_trace_events: int | None = Field(default=None, ge=1)


class BudgetOptions(_Model):
    """``spec.budget``: hard limits plus the soft-warning threshold in percent of each limit."""

    max_total_tokens: int | None = Field(default=None, ge=1)
    max_tool_calls: int | None = Field(default=None, ge=1)
    soft_limit_percent: int | None = Field(default=None, ge=1, le=100)

    @property
    def enabled(self) -> bool:
        """Whether any hard limit is set (no limit = no guard)."""
        return self.max_total_tokens is not None or self.max_tool_calls is not None


class PeerCallOptions(_Model):
    """Peer invocation (``spec.peers``): the session gets the ``call_peer`` tool, which asks a
    peer session through the operator's front door at ``gateway_url``; ``max_wait_seconds``
    caps how long one call waits for the peer's answer."""

    gateway_url: str = Field(min_length=1, pattern=r"^https?://\S+$")
    max_wait_seconds: int = Field(default=300, ge=1, le=3600)


class LaneWorkerTarget(_Model):
    """The LaneWorker of an external or hybrid lane, as resolved by the operator."""

    name: str = Field(min_length=1)
    task_stream: str | None = None


class LaneOptions(_Model):
    """``lanes.<lane>``: handler mode, limits and (external/hybrid) the LaneWorker target."""

    mode: LaneMode = "internal"
    timeout_seconds: int | None = Field(default=None, ge=1)
    max_concurrency: int | None = Field(default=None, ge=1)
    lane_worker: LaneWorkerTarget | None = None

    def stream_for(self, namespace: str) -> str | None:
        """The Redis task stream of this lane's LaneWorker (docs/architecture.md §7), or None.

        None for an internal lane; the operator's ``taskStream`` if rendered, else the name
        :func:`berth_contract.names.task_stream` gives.
        """
        if self.mode == "internal" or self.lane_worker is None:
            return None
        return self.lane_worker.task_stream or task_stream(namespace, self.lane_worker.name)


class PassivationOptions(_Model):
    """``spec.passivation``."""

    deadline_seconds: int = Field(default=DEFAULT_PASSIVATION_DEADLINE_SECONDS, ge=1)


class SessionPodOptions(_Model):
    """The whole options object (see the module docstring)."""

    schema_version: int = Field(default=OPTIONS_SCHEMA_VERSION, ge=1, le=OPTIONS_SCHEMA_VERSION)
    session: SessionRef | None = None
    prompt: str = Field(min_length=1)
    model: str = Field(pattern=r"^[^/\s]+/\S+$")
    llm: LlmOptions = LlmOptions()
    identity: IdentityOptions = IdentityOptions()
    limits: LimitsOptions = LimitsOptions()
    retention: RetentionOptions = RetentionOptions()
    budget: BudgetOptions = BudgetOptions()
    lanes: dict[LaneName, LaneOptions] = Field(default_factory=dict)
    result_stream: str | None = None
    passivation: PassivationOptions = PassivationOptions()
    keep_alive: bool = False
    peer_calls: PeerCallOptions | None = None

    @field_validator("lanes")
    @classmethod
    def _external_needs_worker(
        cls, lanes: dict[LaneName, LaneOptions]
    ) -> dict[LaneName, LaneOptions]:
        for name, lane in lanes.items():
            if lane.mode != "internal" and lane.lane_worker is None:
                raise ValueError(f"lane {name!r} is {lane.mode} but names no laneWorker")
        return lanes

    def wire(self) -> dict[str, Any]:
        """The JSON-ready dict: camelCase keys, unset (None) fields omitted."""
        return self.model_dump(mode="json", by_alias=True, exclude_none=True)

    def render(self) -> bytes:
        """``options.json`` as the pod reads it: UTF-8 JSON, sorted keys, indented, one final
        newline (the value of key ``options.json`` in the session's ``<name>-berth`` Secret)."""
        return (json.dumps(self.wire(), indent=2, sort_keys=True) + "\n").encode()


def options_json_schema() -> dict[str, Any]:
    """JSON Schema of options.json (camelCase), for the docs and tests."""
    return SessionPodOptions.model_json_schema(by_alias=True)


def parse_options(data: Any) -> SessionPodOptions:
    """Validate already-decoded JSON. Raises :class:`OptionsError` naming the bad field paths."""
    try:
        return SessionPodOptions.model_validate(data)
    except ValidationError as exc:
        details = "; ".join(
            f"{'.'.join(str(p) for p in err['loc']) or '<root>'}: {err['msg']}"
            for err in exc.errors()
        )
        raise OptionsError(f"invalid session options: {details}") from None


def load_options(path: Path) -> SessionPodOptions:
    """Read and validate the options file. Raises :class:`OptionsError` (never OSError/JSON)."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise OptionsError(f"cannot read options file {path}: {exc.strerror or exc}") from None
    except UnicodeDecodeError:
        raise OptionsError(f"options file {path} is not UTF-8 text") from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise OptionsError(
            f"options file {path} is not valid JSON: {exc.msg} at line {exc.lineno} "
            f"column {exc.colno}"
        ) from None
    if not isinstance(data, dict):
        raise OptionsError(
            f"options file {path} must hold a JSON object, got {type(data).__name__}"
        )
    return parse_options(data)
