"""The session pod contract as data: options.json, the termination message and /v1/state.

Three JSON documents cross the operator ⇄ runtime boundary (docs/architecture.md §5):

1. ``SessionPodOptions`` — written by the operator into the session's Secret ``<name>-berth``
   under key ``options.json``, mounted (that key alone) read-only at ``/etc/berth/session``;
   the pod finds it through ``BERTH_OPTIONS_FILE`` (``<mountPath>/options.json``). camelCase
   keys, absent = unset (the runtime applies its own default). Example::

       {"schemaVersion": 1,
        "session": {"namespace": "default", "name": "demo", "uid": "6c1f..."},
        "prompt": "Create hello.py ...", "model": "openai/gpt-4o-mini",
        "llm": {"baseUrl": "http://127.0.0.1:8900/v1", "apiKeyEnv": "OPENAI_API_KEY"},
        "identity": {"tenantId": "acme", "principal": "alice"},
        "limits": {"maxToolRounds": 20, "toolTimeoutSeconds": 60},
        "retention": {"maxRunsRetained": 10},
        "budget": {"maxTotalTokens": 200000, "softLimitPercent": 80},
        "lanes": {"execute": {"mode": "external", "timeoutSeconds": 300,
                              "laneWorker": {"name": "exec", "taskStream":
                                             "berth:default:lw:exec:tasks",
                                             "consumerGroup": "workers"}}},
        "resultStream": "berth:default:s:6c1f...:results",
        "keepAlive": false,
        "passivation": {"deadlineSeconds": 120}}

   Per-placement values (epoch, run to resume, paths) are env vars, not options, because the
   ConfigMap is shared by all epochs of a session.

2. ``TerminationMessage`` — one JSON object the runtime writes to ``BERTH_TERMINATION_LOG`` on exit;
   the operator reads it from ``status.containerStatuses[].state.terminated.message``.

3. ``RuntimeState`` — the body of ``GET http://<podIP>:8080/v1/state``; parsed leniently (unknown
   keys ignored, camelCase or snake_case accepted) because the runtime may add fields.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import AliasChoices, BaseModel, ConfigDict, Field

from berth_operator.api.agentsession import (
    BudgetSpec,
    IdentitySpec,
    LaneMode,
    LimitsSpec,
    RetentionSpec,
)
from berth_operator.api.common import K8sModel

OPTIONS_SCHEMA_VERSION: Literal[1] = 1


class SessionIdentity(K8sModel):
    """Which AgentSession the pod serves."""

    namespace: str
    """Namespace of the AgentSession."""
    name: str
    """Name of the AgentSession."""
    uid: str
    """metadata.uid of the AgentSession (reply stream and store key)."""


class LLMOptions(K8sModel):
    """How the runtime reaches the model."""

    base_url: str | None = None
    """OpenAI-compatible base URL (also exported as OPENAI_BASE_URL); absent = the default."""
    api_key_env: str = "OPENAI_API_KEY"
    """Env var holding the API key (set from the Secret by secretKeyRef; never in this file)."""
    timeout_seconds: int | None = None
    """spec.llm.timeoutSeconds."""
    max_retries: int = 2
    """spec.llm.maxRetries (default 2)."""
    organization: str | None = None
    """spec.llm.organization."""
    project: str | None = None
    """spec.llm.project."""
    headers: dict[str, str] | None = None
    """spec.llm.headers."""
    ca_file: str | None = None
    """Path of the mounted spec.llm.caBundle in the session pod."""


class LaneWorkerTarget(K8sModel):
    """Resolved LaneWorker of an external or hybrid lane."""

    name: str
    """LaneWorker name."""
    task_stream: str
    """Redis stream to XADD tasks to: berth:{ns}:lw:{name}:tasks."""
    consumer_group: str = "workers"
    """Consumer group of the workers (informational)."""


class LaneOptions(K8sModel):
    """One lane of the session's queue."""

    mode: LaneMode = "internal"
    """internal, external or hybrid."""
    timeout_seconds: int | None = None
    """Per-task timeout (seconds)."""
    max_concurrency: int | None = None
    """Tasks of this lane at once."""
    lane_worker: LaneWorkerTarget | None = None
    """Set for external and hybrid lanes."""


class PassivationOptions(K8sModel):
    """Passivation settings of the session."""

    deadline_seconds: int = 120
    """Grace window after /v1/passivate (seconds): the spec value or the operator default."""


class PeerCallOptions(K8sModel):
    """``peerCalls``: the ``call_peer`` tool's front door and its longest wait (spec.peers)."""

    gateway_url: str
    """URL of the operator's front door (BERTH_GATEWAY_URL)."""
    max_wait_seconds: int = 300
    """Longest wait of one peer call, seconds."""


class SessionPodOptions(K8sModel):
    """options.json: the rendered session options (see the module docstring for an example)."""

    schema_version: Literal[1] = OPTIONS_SCHEMA_VERSION
    """Version of this document (1)."""
    session: SessionIdentity
    """The AgentSession."""
    prompt: str
    """The task (spec.prompt)."""
    model: str
    """provider/model (spec.model)."""
    llm: LLMOptions = Field(default_factory=LLMOptions)
    """Model endpoint."""
    identity: IdentitySpec | None = None
    """tenantId, principal, agentTemplateId, correlationId (spec.identity)."""
    limits: LimitsSpec | None = None
    """Agent-loop limits (spec.limits)."""
    retention: RetentionSpec | None = None
    """Retention caps (spec.retention)."""
    budget: BudgetSpec | None = None
    """Budget (spec.budget)."""
    lanes: dict[str, LaneOptions] | None = None
    """Per-lane configuration with LaneWorker streams resolved."""
    result_stream: str
    """Redis reply stream of this session: berth:{ns}:s:{uid}:results."""
    keep_alive: bool = False
    """Stay idle after the task and accept POST /v1/messages."""
    passivation: PassivationOptions = Field(default_factory=PassivationOptions)
    """Passivation settings."""
    peer_calls: PeerCallOptions | None = None
    """Peer invocation (spec.peers with the front door enabled), else absent."""


class _Lenient(BaseModel):
    model_config = ConfigDict(extra="ignore", populate_by_name=True)


class UsageView(_Lenient):
    """Token usage as reported by the runtime."""

    prompt_tokens: int = Field(0, validation_alias=AliasChoices("prompt_tokens", "promptTokens"))
    completion_tokens: int = Field(
        0, validation_alias=AliasChoices("completion_tokens", "completionTokens")
    )
    total_tokens: int = Field(0, validation_alias=AliasChoices("total_tokens", "totalTokens"))


Outcome = Literal["completed", "passivated", "failed", "fenced"]


class TerminationMessage(_Lenient):
    """What the runtime writes to BERTH_TERMINATION_LOG on exit (docs/architecture.md §5)."""

    outcome: Outcome
    """completed, passivated, failed or fenced."""
    run_id: str | None = Field(None, validation_alias=AliasChoices("runId", "run_id"))
    """Run that ended."""
    turn: int | None = None
    """Completed tool rounds of that run."""
    usage: UsageView | None = None
    """Cumulative usage."""
    reason: str | None = None
    """Why (free text; for failed, the error)."""
    code: str | None = None
    """For failed, a CamelCase cause the operator acts on: ``ToolSandboxUnavailable`` (the node
    gives the pod no Landlock and the session requires it)."""
    text: str | None = Field(None, validation_alias=AliasChoices("resultText", "text", "result"))
    """Final text of the agent (``resultText``), truncated by the runtime to fit 4096 bytes."""
    resumed_from: str | None = Field(
        None, validation_alias=AliasChoices("resumedFrom", "resumed_from")
    )
    """Run the ended run resumed (optional extension)."""


class CheckpointView(_Lenient):
    """Last checkpoint as reported by /v1/state."""

    run_id: str | None = Field(None, validation_alias=AliasChoices("runId", "run_id"))
    turn: int | None = None
    tool_calls_count: int | None = Field(
        None, validation_alias=AliasChoices("toolCallsCount", "tool_calls_count")
    )
    checkpoint_ms: int | None = Field(
        None, validation_alias=AliasChoices("checkpointMs", "checkpoint_ms", "at_ms")
    )


class PassivationView(_Lenient):
    """``passivation`` of /v1/state: the request the runtime accepted (times in epoch ms)."""

    reason: str = ""
    deadline_ms: int | None = Field(
        None, validation_alias=AliasChoices("deadlineMs", "deadline_ms")
    )
    requested_ms: int | None = Field(
        None, validation_alias=AliasChoices("requestedMs", "requested_ms")
    )


class RuntimeState(_Lenient):
    """Body of GET /v1/state (docs/architecture.md §5): state, runId, turn, usage, checkpoint,
    error."""

    state: str | None = None
    """Runtime state word (e.g. starting, running, idle, passivating, completed, failed)."""
    run_id: str | None = Field(None, validation_alias=AliasChoices("runId", "run_id"))
    resumed_from: str | None = Field(
        None, validation_alias=AliasChoices("resumedFrom", "resumed_from")
    )
    turn: int | None = None
    tool_calls_count: int | None = Field(
        None, validation_alias=AliasChoices("toolCallsCount", "tool_calls_count")
    )
    usage: UsageView | None = None
    checkpoint: CheckpointView | None = Field(
        None, validation_alias=AliasChoices("checkpoint", "lastCheckpoint", "last_checkpoint")
    )
    last_error: Annotated[str | None, Field(max_length=100000)] = Field(
        None, validation_alias=AliasChoices("lastError", "last_error", "error")
    )
    idle_since_ms: int | None = Field(
        None, validation_alias=AliasChoices("idleSinceMs", "idle_since_ms")
    )
    """When the pod became idle (no run, no message) in epoch ms; None while not idle."""
    run_started_ms: int | None = Field(
        None, validation_alias=AliasChoices("runStartedMs", "run_started_ms")
    )
    """When the pod started its latest run (a new one, or a resumed one) in epoch ms; None
    before any run (and from runtimes that do not report it)."""
    text: str | None = Field(None, validation_alias=AliasChoices("resultText", "text", "result"))
    passivation: PassivationView | None = None
    """The passivation request the runtime accepted, if any (also ``kubectl berth passivate``)."""


def options_json_schema() -> dict[str, Any]:
    """JSON Schema of options.json (for the runtime's documentation and tests)."""
    return SessionPodOptions.model_json_schema(by_alias=True)
