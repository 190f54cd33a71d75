"""AgentSession v1alpha1: spec and status models (docs/architecture.md §3).

The CRD schema in ``crds/`` is generated from these classes by ``berth_operator.api.crdgen``;
validation therefore lives here: field bounds and patterns (OpenAPI) and CEL rules
(``x-kubernetes-validations``) for cross-field and immutability checks, so the apiserver rejects a
bad manifest with a message naming the field. The operator parses objects it reads with
``AgentSessionSpec.model_validate(body["spec"])``.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Annotated, Any, Final, Literal

from pydantic import Field

from berth_operator.api.common import (
    DNS1123_SUBDOMAIN,
    LABEL_KEY_CEL,
    LABEL_VALUE,
    Condition,
    ConfigMapKeySelector,
    ImageRef,
    Int64,
    K8sModel,
    LocalObjectReference,
    PreservedList,
    PreservedObject,
    PullSecrets,
    ResourceRequirements,
    SecretKeySelector,
    Toleration,
)
from berth_operator.api.constants import LANES, MAX_SESSION_NAME_LENGTH
from berth_operator.api.retention import StoreRetentionSpec

LaneName = Literal["query", "execute", "generate", "control"]
LaneMode = Literal["internal", "external", "hybrid"]
Phase = Literal[
    "Pending", "Running", "Passivating", "Passivated", "Resuming", "Succeeded", "Failed"
]
RunOutcome = Literal["running", "completed", "passivated", "failed", "fenced", "crashed", "lost"]
PassivationTrigger = Literal[
    "node_drain", "eviction", "manual", "suspend", "idle_reaper", "migration"
]
"""Why a session was asked to passivate (docs/architecture.md §8): the node is being drained (cordon
or a disruption taint), an eviction request for its pod, a manual request (``kubectl berth
passivate``), ``spec.suspend``, a keepAlive session idle for ``spec.idle.afterSeconds``
(``idle_reaper``, the A3S ``PassivationRequested`` reason), or its pod runs another image than the
session's current one (``migration``: the operator's session image or ``spec.image`` changed;
docs/upgrades.md). Also the ``reason`` sent in ``POST /v1/passivate`` and a metric label."""
PassivationOutcome = Literal["passivating", "passivated", "deadline", "completed", "failed"]
ImageUpdatePolicy = Literal["Migrate", "Keep"]
"""What a running session does when its image changes (``spec.imageUpdatePolicy``): ``Migrate``
passivates it and resumes it on the new image, ``Keep`` leaves the running pod on its image."""

NODE_DRAIN: Final = "node_drain"
EVICTION: Final = "eviction"
MANUAL: Final = "manual"
SUSPEND: Final = "suspend"
IDLE_REAPER: Final = "idle_reaper"
MIGRATION: Final = "migration"
"""The pod runs an image other than the session's current one (``reconcile.migration``): it is
passivated at a safe point and its run resumes on a pod of the current image."""
TRIGGERS: Final[tuple[PassivationTrigger, ...]] = (
    NODE_DRAIN,
    EVICTION,
    MANUAL,
    SUSPEND,
    IDLE_REAPER,
    MIGRATION,
)
"""All passivation reasons (metric label values)."""
OUTCOMES: Final[tuple[PassivationOutcome, ...]] = ("passivated", "deadline", "completed", "failed")
"""Final outcomes of a passivation (metric label values)."""

MODEL_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._-]*/[A-Za-z0-9][A-Za-z0-9._:/@+-]*$"
THRESHOLD_PATTERN = r"^((0(\.[0-9]+)?|1(\.0+)?)|(100|[1-9]?[0-9])(\.[0-9]+)?%)$"
IMMUTABLE = "self == oldSelf"


def _immutable(field: str) -> dict[str, Any]:
    return {"x-kubernetes-validations": [{"rule": IMMUTABLE, "message": f"{field} is immutable"}]}


class LLMSpec(K8sModel):
    """How the session reaches its OpenAI-compatible model endpoint."""

    base_url: str | None = Field(
        default=None, alias="baseURL", max_length=2048, pattern=r"^https?://\S+$"
    )
    """Base URL of the OpenAI-compatible API (http or https); passed as OPENAI_BASE_URL. The
    operator may restrict it to allowed prefixes (BERTH_LLM_ALLOWED_BASE_URLS)."""
    api_key_secret_ref: SecretKeySelector | None = None
    """Secret key holding the API key, mounted into the session pod as a file (never an
    environment variable). The Secret must carry the label berth.dev/llm-credentials: "true";
    otherwise no pod is placed (condition Placed=False, reason SecretNotAllowed)."""
    api_key: str | None = Field(default=None, alias="apiKey")
    """Forbidden. A literal API key is never accepted in a spec; use apiKeySecretRef."""
    timeout_seconds: Annotated[int, Field(ge=1, le=3600)] | None = None
    """Timeout of one model request (seconds; default 600)."""
    max_retries: Annotated[int, Field(ge=0, le=10)] | None = None
    """Retries of a failed request by the openai client (connection errors, 408, 409, 429,
    5xx, with backoff honouring Retry-After); default 2. What still fails is counted by the
    session's circuit breaker."""
    organization: Annotated[str, Field(min_length=1, max_length=256)] | None = None
    """OpenAI organization (``OpenAI-Organization`` header)."""
    project: Annotated[str, Field(min_length=1, max_length=256)] | None = None
    """OpenAI project (``OpenAI-Project`` header)."""
    headers: (
        Annotated[
            dict[str, Annotated[str, Field(max_length=4096)]],
            Field(
                max_length=16,
                json_schema_extra={
                    "x-kubernetes-validations": [
                        {
                            "rule": "self.all(k, k.matches('^[A-Za-z0-9-]{1,128}$') && "
                            "!(k.lowerAscii() in ['authorization', 'proxy-authorization', "
                            "'api-key', 'x-api-key', 'cookie']))",
                            "message": "header names are letters, digits and '-', and credentials "
                            "(Authorization, api-key, x-api-key, Cookie) never go in a spec: "
                            "use apiKeySecretRef",
                        }
                    ]
                },
            ),
        ]
        | None
    ) = None
    """Extra request headers (a gateway's routing or tenant headers); never credentials."""
    ca_bundle: ConfigMapKeySelector | None = None
    """A ConfigMap key holding the PEM CAs to trust for baseURL (a private endpoint or a TLS
    proxy), mounted read-only into the session pod."""

    model_config = K8sModel.model_config | {
        "json_schema_extra": {
            "x-kubernetes-validations": [
                {
                    "rule": "!has(self.apiKey)",
                    "message": "a literal API key is not allowed: remove spec.llm.apiKey and "
                    "reference a Secret with spec.llm.apiKeySecretRef",
                    "fieldPath": ".apiKey",
                }
            ]
        }
    }


class IdentitySpec(K8sModel):
    """Opaque identity labels propagated to the runtime, hooks, the store and pod labels."""

    tenant_id: Annotated[str, Field(max_length=256)] | None = None
    """Tenant the session belongs to (label berth.dev/tenant when a valid label value)."""
    principal: Annotated[str, Field(max_length=256)] | None = None
    """User or service acting (label berth.dev/principal when a valid label value)."""
    agent_template_id: Annotated[str, Field(max_length=256)] | None = None
    """Template the agent was built from (label berth.dev/agent-template when valid)."""
    correlation_id: Annotated[str, Field(max_length=256)] | None = None
    """Correlation id for tracing across systems (label berth.dev/correlation-id when valid)."""


class SeedFrom(K8sModel):
    """Where the workspace content comes from before the first run (one of the two)."""

    config_map_ref: LocalObjectReference | None = None
    """ConfigMap whose keys are written as files into the workspace."""
    path: Annotated[str, Field(min_length=1, max_length=1024, pattern=r"^[^/].*$")] | None = None
    """Directory inside the shared volume to copy in (relative to the volume root)."""

    model_config = K8sModel.model_config | {
        "json_schema_extra": {
            "x-kubernetes-validations": [
                {
                    "rule": "has(self.configMapRef) != has(self.path)",
                    "message": "exactly one of seedFrom.configMapRef and seedFrom.path must be set",
                }
            ]
        }
    }


class WorkspaceSpec(K8sModel):
    """The code the agent works on: the session's own directory ``workspaces/<ns>/<name>`` of the
    shared volume (always; nothing else of the volume is visible to the session)."""

    sub_path: (
        Annotated[
            str,
            Field(
                min_length=1,
                max_length=1024,
                pattern=r"^[A-Za-z0-9._-][A-Za-z0-9._/-]*$",
                json_schema_extra={
                    "x-kubernetes-validations": [
                        {
                            "rule": "!self.split('/').exists(p, p == '..')",
                            "message": "subPath must not contain '..': it names a directory "
                            "inside the session's own workspace",
                        },
                        {
                            "rule": "!self.startsWith('/')",
                            "message": "subPath must be relative to the session's workspace "
                            "(no leading '/')",
                        },
                        {
                            "rule": "!(self.endsWith('/') ? self.substring(0, self.size() - 1)"
                            " : self).split('/').exists(p, p == '' || p == '.')",
                            "message": "subPath must not contain empty or '.' segments",
                        },
                    ]
                },
            ),
        ]
        | None
    ) = None
    """Directory inside the session's own workspace root workspaces/<namespace>/<name> where the
    agent works (created if missing); unset = the root itself. Relative, without '..', '.' or
    empty segments; it can never name the store or another session's files."""
    seed_from: SeedFrom | None = None
    """Optional content to copy in before the first run."""


class StoreSpec(K8sModel):
    """The shared ReadWriteMany volume holding the store and the workspace."""

    claim_name: (
        Annotated[str, Field(min_length=1, max_length=253, pattern=DNS1123_SUBDOMAIN)] | None
    ) = None
    """PersistentVolumeClaim name (default: the operator's BERTH_DEFAULT_CLAIM_NAME)."""


class LimitsSpec(K8sModel):
    """Agent-loop limits (docs/architecture.md §10 "Limits and retention"); unset = default."""

    max_tool_rounds: Annotated[int, Field(ge=1, le=10000)] | None = None
    """Maximum tool rounds per run (runtime default 50)."""
    max_parse_retries: Annotated[int, Field(ge=0, le=100)] | None = None
    """Retries when the model's tool call cannot be parsed (default 2)."""
    tool_timeout_seconds: Annotated[int, Field(ge=1, le=86400)] | None = None
    """Timeout of one tool call in seconds (default none)."""
    circuit_breaker_threshold: Annotated[int, Field(ge=1, le=1000)] | None = None
    """Consecutive LLM failures that open the circuit breaker (default 3)."""
    auto_compact: bool | None = None
    """Compact the history when the context fills (default false)."""
    auto_compact_threshold: Annotated[str, Field(pattern=THRESHOLD_PATTERN)] | None = None
    """Fill ratio that triggers compaction: a decimal in [0,1] ("0.8") or a percent ("80%")."""
    continuation_enabled: bool | None = None
    """Let the model continue after a truncated answer (default true)."""
    max_continuation_turns: Annotated[int, Field(ge=0, le=100)] | None = None
    """Maximum continuation turns (default 3)."""

    model_config = K8sModel.model_config | {
        "json_schema_extra": {
            "x-kubernetes-validations": [
                {
                    "rule": "!has(self.autoCompactThreshold) || "
                    "!has(self.autoCompact) || self.autoCompact",
                    "message": "autoCompactThreshold requires autoCompact to be true",
                    "fieldPath": ".autoCompactThreshold",
                }
            ]
        }
    }


class RetentionSpec(K8sModel):
    """Caps on what the session keeps (FIFO on insert, never an error); unset = unbounded.

    The A3S ``SessionRetentionLimits`` caps, less ``max_terminal_subagent_tasks``: Berth runs no
    subagents, so that cap would have nothing to act on."""

    max_runs_retained: Annotated[int, Field(ge=1, le=100000)] | None = None
    """Run records kept."""
    max_events_per_run: Annotated[int, Field(ge=1, le=10000000)] | None = None
    """Events kept per run."""
    max_trace_events: Annotated[int, Field(ge=1, le=10000000)] | None = None
    """Trace events kept."""


class BudgetSpec(K8sModel):
    """Hard and soft budget of the session, enforced by the runtime's budget guard."""

    max_total_tokens: Annotated[Int64, Field(ge=1)] | None = None
    """Total tokens (prompt + completion) the session may use across all runs."""
    max_tool_calls: Annotated[int, Field(ge=1, le=10000000)] | None = None
    """Tool calls the session may make across all runs."""
    soft_limit_percent: Annotated[int, Field(ge=1, le=100)] | None = None
    """Percent of a limit at which BudgetThresholdHit (soft) is emitted and work proceeds."""

    model_config = K8sModel.model_config | {
        "json_schema_extra": {
            "x-kubernetes-validations": [
                {
                    "rule": "!has(self.softLimitPercent) || has(self.maxTotalTokens) || "
                    "has(self.maxToolCalls)",
                    "message": "softLimitPercent needs maxTotalTokens or maxToolCalls",
                    "fieldPath": ".softLimitPercent",
                }
            ]
        }
    }


class LaneSpec(K8sModel):
    """Handler mode and limits of one lane of the session's command queue."""

    mode: LaneMode = "internal"
    """internal (run in the session pod), external (sent to a LaneWorker pool) or hybrid."""
    lane_worker_ref: LocalObjectReference | None = None
    """LaneWorker whose Redis task stream receives this lane's tasks (external/hybrid)."""
    timeout_seconds: Annotated[int, Field(ge=1, le=86400)] | None = None
    """Timeout of one task of this lane in seconds."""
    max_concurrency: Annotated[int, Field(ge=1, le=1024)] | None = None
    """Tasks of this lane running at once in the session."""

    model_config = K8sModel.model_config | {
        "json_schema_extra": {
            "x-kubernetes-validations": [
                {
                    "rule": "self.mode == 'internal' || has(self.laneWorkerRef)",
                    "message": "laneWorkerRef is required when mode is external or hybrid",
                    "fieldPath": ".laneWorkerRef",
                }
            ]
        }
    }


class PassivationSpec(K8sModel):
    """How the session is passivated before its pod goes away (docs/architecture.md §8)."""

    deadline_seconds: Annotated[int, Field(ge=1, le=86400)] | None = None
    """Grace window before forced eviction (s); default BERTH_PASSIVATION_DEADLINE_SECONDS, 120."""


class PeerSelector(K8sModel):
    """A label selector over AgentSessions of the same namespace (``matchLabels`` only: every
    pair must be on the peer)."""

    match_labels: Annotated[dict[str, str], Field(min_length=1, max_length=32)]
    """Labels a peer must carry."""


class PeersSpec(K8sModel):
    """Which sessions this one may call with the ``call_peer`` tool through the operator's front
    door (same namespace; a peer at rest is woken). Loops (A → B → A) are refused and chains
    are bounded by the operator's ``BERTH_GATEWAY_MAX_PEER_DEPTH``."""

    names: Annotated[
        list[Annotated[str, Field(min_length=1, max_length=253, pattern=DNS1123_SUBDOMAIN)]],
        Field(max_length=64),
    ] = Field(default_factory=list)
    """AgentSession names this session may call."""
    selector: PeerSelector | None = None
    """AgentSessions (by label) this session may call."""
    max_wait_seconds: Annotated[int, Field(ge=1, le=3600)] | None = None
    """Longest wait of one call for the peer's answer (capped by the operator's
    ``BERTH_GATEWAY_MAX_WAIT_SECONDS``)."""

    model_config = K8sModel.model_config | {
        "json_schema_extra": {
            "x-kubernetes-validations": [
                {
                    "rule": "size(self.names) > 0 || has(self.selector)",
                    "message": "peers needs names or a selector",
                },
            ]
        }
    }

    def allows(self, name: str, labels: Mapping[str, str]) -> bool:
        """Whether a session called ``name`` with ``labels`` (same namespace) may be called."""
        if name in self.names:
            return True
        wanted = self.selector.match_labels if self.selector is not None else None
        return bool(wanted) and all(labels.get(k) == v for k, v in (wanted or {}).items())


class IdleSpec(K8sModel):
    """Idle passivation of a keepAlive session (docs/architecture.md §8, "At rest")."""

    after_seconds: Annotated[int, Field(ge=1, le=31536000)]
    """Seconds without a run and without a message after which the session is passivated (reason
    ``idle_reaper``) and its pod removed; it stays at rest until woken (``kubectl berth wake`` or
    a message through ``kubectl berth send``)."""


_NODE_SELECTOR_SCHEMA: dict[str, Any] = {
    "type": "object",
    "maxProperties": 64,
    "additionalProperties": {"type": "string", "maxLength": 63, "pattern": LABEL_VALUE},
    "x-kubernetes-validations": [
        {
            "rule": f"self.all(k, k.matches('{LABEL_KEY_CEL}'))",
            "message": "nodeSelector keys must be valid label keys",
        }
    ],
}


class PlacementSpec(K8sModel):
    """Where and how big the session pod is (copied into the Pod spec)."""

    node_selector: Annotated[
        dict[str, str] | None, Field(json_schema_extra=_NODE_SELECTOR_SCHEMA)
    ] = None
    """Node labels the pod requires; values must be valid label values."""
    affinity: PreservedObject | None = None
    """core/v1 Affinity, passed through."""
    tolerations: list[Toleration] | None = Field(default=None, max_length=64)
    """Tolerations of the pod."""
    priority_class_name: (
        Annotated[str, Field(min_length=1, max_length=253, pattern=DNS1123_SUBDOMAIN)] | None
    ) = None
    """PriorityClass of the pod."""
    resources: ResourceRequirements | None = None
    """Requests and limits of the session container."""
    topology_spread_constraints: PreservedList | None = None
    """core/v1 TopologySpreadConstraints, passed through."""


class AgentSessionSpec(K8sModel):
    """Desired state of an agent session: the task, the model and how it runs."""

    prompt: Annotated[
        str, Field(min_length=1, max_length=262144, json_schema_extra=_immutable("prompt"))
    ]
    """The task given to the agent. Immutable (keepAlive sessions take more prompts over HTTP)."""
    model: Annotated[str, Field(min_length=3, max_length=256, pattern=MODEL_PATTERN)]
    """Model as provider/model, e.g. openai/gpt-4o-mini. Used from the next placement on."""
    llm: LLMSpec | None = None
    """Endpoint and credentials of the model."""
    image: ImageRef | None = None
    """Session image, for an agent that needs its own toolchain (default: the operator's
    session image; it must run ``berth-session``). Used from the next placement on."""
    image_pull_secrets: PullSecrets | None = None
    """Secrets to pull the image with; replaces the operator's default list."""
    image_update_policy: ImageUpdatePolicy | None = None
    """When the session's image changes (the operator's session image after an upgrade, or
    spec.image) while a pod runs: Migrate (default) passivates the pod at a safe point and resumes
    its run on the new image, at most BERTH_MIGRATION_MAX_UNAVAILABLE sessions at once; Keep
    leaves the pod on its image until it ends on its own (the next pod uses the new image)."""
    identity: Annotated[IdentitySpec | None, Field(json_schema_extra=_immutable("identity"))] = None
    """Identity labels. Immutable."""
    workspace: Annotated[WorkspaceSpec | None, Field(json_schema_extra=_immutable("workspace"))] = (
        None
    )
    """Workspace inside the shared volume. Immutable."""
    store: Annotated[StoreSpec | None, Field(json_schema_extra=_immutable("store"))] = None
    """Shared volume claim. Immutable."""
    limits: LimitsSpec | None = None
    """Agent-loop limits."""
    retention: RetentionSpec | None = None
    """Retention caps."""
    budget: BudgetSpec | None = None
    """Token and tool-call budget."""
    lanes: Annotated[
        dict[LaneName, LaneSpec] | None,
        Field(
            json_schema_extra={
                "maxProperties": 4,
                "x-kubernetes-validations": [
                    {
                        "rule": "self.all(k, k in " + repr(list(LANES)).replace(" ", "") + ")",
                        "message": "unknown lane: lane names are query, execute, generate, control",
                    }
                ],
            }
        ),
    ] = None
    """Per-lane handler configuration, keyed by lane: query, execute, generate, control."""
    passivation: PassivationSpec | None = None
    """Passivation settings."""
    store_retention: StoreRetentionSpec | None = None
    """When the store and workspace go once the session finished or was deleted."""
    suspend: bool | None = None
    """true passivates the session and keeps it passivated; false resumes it."""
    keep_alive: bool | None = None
    """After the task, stay idle and accept more prompts instead of completing."""
    idle: IdleSpec | None = None
    """Passivate a keepAlive session that stayed idle this long (needs keepAlive: true)."""
    placement: PlacementSpec | None = None
    """Scheduling and resources of the session pod."""
    peers: PeersSpec | None = None
    """Other sessions this one may ask questions (the ``call_peer`` tool)."""
    tool_sandbox: Literal["Required", "BestEffort"] | None = None
    """Required: the pod refuses to start on a node without Landlock (reason
    ToolSandboxUnavailable); BestEffort: tools run unconfined there. Default: the operator's."""
    warm_pool_ref: LocalObjectReference | None = None
    """A SessionWarmPool of this namespace: the session's pods (first and after passivation) are
    adopted from it when it has a Ready warm pod of the same template (image, pull secrets, llm,
    placement), else created as usual."""

    model_config = K8sModel.model_config | {
        "json_schema_extra": {
            "x-kubernetes-validations": [
                {
                    "rule": "has(self.identity) == has(oldSelf.identity)",
                    "message": "identity is immutable (it cannot be added or removed)",
                    "fieldPath": ".identity",
                },
                {
                    "rule": "has(self.workspace) == has(oldSelf.workspace)",
                    "message": "workspace is immutable (it cannot be added or removed)",
                    "fieldPath": ".workspace",
                },
                {
                    "rule": "!has(self.idle) || (has(self.keepAlive) && self.keepAlive)",
                    "message": "idle needs keepAlive: true (only a keepAlive session goes idle)",
                    "fieldPath": ".idle",
                },
                {
                    "rule": "has(self.store) == has(oldSelf.store)",
                    "message": "store is immutable (it cannot be added or removed)",
                    "fieldPath": ".store",
                },
            ]
        }
    }

    def passivation_deadline_seconds(self, default: int) -> int:
        """``passivation.deadlineSeconds``, else ``default`` (the operator's
        ``BERTH_PASSIVATION_DEADLINE_SECONDS``); seconds."""
        if self.passivation is not None and self.passivation.deadline_seconds is not None:
            return self.passivation.deadline_seconds
        return default


class RunRecord(K8sModel):
    """One run of the session's lineage (a resume starts a new run)."""

    run_id: str
    """Run id (run-<id>)."""
    resumed_from: str | None = None
    """Run id this run resumed, if any."""
    pod_name: str | None = None
    """Pod that executed the run."""
    node_name: str | None = None
    """Node of that pod."""
    epoch: Int64 | None = None
    """Placement epoch of that pod."""
    started_at: datetime | None = None
    """When the operator first saw the run."""
    ended_at: datetime | None = None
    """When the run ended (absent while running)."""
    outcome: RunOutcome = "running"
    """running, completed, passivated, failed, fenced, crashed or lost."""
    reason: Annotated[str, Field(max_length=1024)] | None = None
    """Why it ended (from the termination message or the operator's observation)."""


class Checkpoint(K8sModel):
    """The last durable loop checkpoint the runtime reported. A run's first is written at once;
    its progress after that may show up to the operator's status coalescing window late."""

    run_id: str | None = None
    """Run the checkpoint belongs to."""
    turn: int | None = None
    """Completed tool rounds."""
    tool_calls_count: int | None = None
    """Tool calls made so far in the run lineage."""
    at: datetime | None = None
    """When it was written."""


class Usage(K8sModel):
    """Token usage of the session (cumulative across resumed runs)."""

    prompt_tokens: Int64 = 0
    """Prompt tokens."""
    completion_tokens: Int64 = 0
    """Completion tokens."""
    total_tokens: Int64 = 0
    """Prompt plus completion tokens."""


class Result(K8sModel):
    """Final answer of the session."""

    text: Annotated[str, Field(max_length=8192)] = ""
    """Final text of the agent (truncated to 4096 characters)."""
    truncated: bool | None = None
    """true when text was truncated."""
    finished_at: datetime | None = None
    """When the session finished."""


class PassivationStatus(K8sModel):
    """The current or last passivation of the session (docs/architecture.md §8), written by the
    operator.

    Recorded when the passivation is requested, so the deadline survives operator restarts; the
    times are RFC 3339 with milliseconds. ``outcome`` moves passivating → passivated (the runtime
    exited with outcome passivated) or deadline (the operator deleted the pod at the deadline; the
    run resumes from the last durable round); completed/failed when the run ended otherwise.
    """

    reason: PassivationTrigger
    """node_drain, eviction, manual, suspend, idle_reaper or migration."""
    message: Annotated[str, Field(max_length=1024)] = ""
    """What triggered it, e.g. "node proc-a is cordoned (spec.unschedulable)"."""
    pod_name: str
    """Pod asked to passivate."""
    epoch: Int64
    """Epoch of that pod."""
    node_name: str | None = None
    """Node the pod ran on; the replacement is placed away from it (node_drain, eviction)."""
    requested_at: datetime
    """When the operator (or, for manual, the runtime) accepted the request."""
    deadline: datetime
    """requestedAt + spec.passivation.deadlineSeconds: the pod is deleted by then at the latest."""
    outcome: PassivationOutcome = "passivating"
    """passivating, passivated, deadline, completed or failed."""
    passivated_at: datetime | None = None
    """When the operator saw the pod end (or deleted it at the deadline)."""
    resumed_at: datetime | None = None
    """When the resumed run started on the replacement pod, as its runtime reports it (kept
    between the pod's end and the moment the operator saw the run; that moment when the runtime
    reports no start)."""
    resumed_run_id: str | None = None
    """Run id of the resumed run."""


class AgentSessionStatus(K8sModel):
    """Observed state, written only by the operator through the status subresource."""

    conditions: Annotated[
        list[Condition] | None,
        Field(
            json_schema_extra={
                "x-kubernetes-list-type": "map",
                "x-kubernetes-list-map-keys": ["type"],
            }
        ),
    ] = None
    """Conditions: Ready (summary), Placed, Running, Passivated, Completed, BudgetExhausted,
    Degraded, Failed."""
    phase: Phase | None = None
    """One-word summary for printer columns only; use conditions for logic."""
    observed_generation: Int64 | None = None
    """metadata.generation last acted on."""
    epoch: Int64 | None = None
    """Current placement epoch; bumped before every pod create (fencing token)."""
    pod_name: str | None = None
    """Pod of the current epoch."""
    pod_uid: str | None = None
    """UID of that pod once it was seen."""
    pod_ip: str | None = Field(default=None, alias="podIP")
    """IP of that pod, spelled podIP as in the Pod API (the operator calls http://<podIP>:8080)."""
    node_name: str | None = None
    """Node of that pod."""
    image: str | None = None
    """Image of that pod's session container as its spec names it (after a migration, the new
    image once the replacement pod is seen)."""
    run_id: str | None = None
    """Current (or last) run id."""
    runs: list[RunRecord] | None = Field(default=None, max_length=64)
    """Lineage of runs, newest last, bounded to the last 20."""
    checkpoint: Checkpoint | None = None
    """Last durable checkpoint (a run's progress may show a status coalescing window late)."""
    usage: Usage | None = None
    """Token usage."""
    passivations: Int64 | None = None
    """How many times the session was passivated."""
    passivation: PassivationStatus | None = None
    """The current or last passivation (trigger, deadline, outcome, resume)."""
    at_rest_since: datetime | None = None
    """When the session came to rest (no pod: idle passivation, suspend); unset with a pod."""
    restarts: int | None = None
    """Consecutive placements after a pod died without passivating (reset on success)."""
    placement_reason: str | None = None
    """Why the current (or next) pod is placed: Initial, PodCrashed, NodeLost, PodEvicted,
    PodDeleted, RunFailed, Passivated, PlacementInterrupted."""
    next_attempt_at: datetime | None = None
    """When the next replacement may be created (exponential backoff)."""
    result: Result | None = None
    """Final answer once Completed."""
    last_error: Annotated[str, Field(max_length=4096)] | None = None
    """Last error reported by the runtime or the operator."""


ROOT_VALIDATIONS: list[dict[str, str]] = [
    {
        "rule": f"self.metadata.name.size() <= {MAX_SESSION_NAME_LENGTH}",
        "message": f"metadata.name must be at most {MAX_SESSION_NAME_LENGTH} characters "
        "(pod names <name>-e<epoch> must stay valid label values)",
    }
]
