"""Operator settings, read once from the environment at start-up (``berth-operator``).

Settings come in small groups, one per concern (the style of kopf's ``OperatorSettings``:
``settings.placement.backoff_cap_seconds``, ``settings.webhook.port``). Each group is a
pydantic-settings model whose fields are read from ``BERTH_...`` variables: the group's prefix plus
the field name in upper case (``PassivationSettings.deadline_seconds`` from
``BERTH_PASSIVATION_DEADLINE_SECONDS``), or the variable a field names as its alias. Lists are
comma-separated; booleans accept true/false/1/0. The Helm chart sets these from values.yaml;
attribute docstrings give unit and default.

Constructing a group or ``OperatorSettings`` never reads the environment (tests build them from
keywords); only :meth:`OperatorSettings.from_env` does, and it raises ``SettingsError`` naming every
bad variable.
"""

from __future__ import annotations

import os
import socket
from typing import Annotated, Any, Literal

from pydantic import AliasChoices, BaseModel, ConfigDict, Field, ValidationError, field_validator
from pydantic_settings import (
    BaseSettings,
    EnvSettingsSource,
    NoDecode,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
)
from pydantic_settings import SettingsError as SourceError

from berth_operator import __version__
from berth_operator.errors import SettingsError

ENV_PREFIX = "BERTH_"

#: A comma-separated list in one variable ("a, b" → ["a", "b"]).
CommaList = Annotated[list[str], NoDecode]


def _split(value: Any) -> Any:
    if isinstance(value, str):
        return [part.strip() for part in value.split(",") if part.strip()]
    return value


def _env(name: str) -> Any:
    """A field read from the variable ``name`` (its alias); keywords still use the field name."""
    return AliasChoices(name)


class SettingsGroup(BaseSettings):
    """Base of the settings groups: frozen, documented fields, built from keywords only.

    ``settings_customise_sources`` keeps only the keywords, so building a group in a test or a
    benchmark never picks up the machine's ``BERTH_*`` variables; ``OperatorSettings.from_env``
    reads them explicitly with pydantic-settings' ``EnvSettingsSource``."""

    model_config = SettingsConfigDict(
        env_prefix=ENV_PREFIX,
        frozen=True,
        extra="forbid",
        populate_by_name=True,
        use_attribute_docstrings=True,
    )

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        """Keywords only (see the class docstring)."""
        return (init_settings,)

    @classmethod
    def env_name(cls, field: str) -> str:
        """The variable ``field`` is read from: its alias, else the group's prefix + NAME."""
        alias = cls.model_fields[field].validation_alias
        if isinstance(alias, AliasChoices):
            return str(alias.choices[0])
        return str(cls.model_config.get("env_prefix", "")) + field.upper()


class ScopeSettings(SettingsGroup):
    """What the operator watches."""

    namespaces: CommaList = Field(default_factory=list)
    """Namespaces watched, comma-separated; empty (default) = all namespaces (cluster-wide)."""

    _split_namespaces = field_validator("namespaces", mode="before")(_split)


class ImageSettings(SettingsGroup):
    """Images of the pods the operator creates."""

    model_config = SettingsConfigDict(env_prefix="BERTH_IMAGE_")

    session: str = Field(f"berth:{__version__}", validation_alias=_env("BERTH_SESSION_IMAGE"))
    """Image of session pods (and of the store-cleanup Job)."""
    pull_policy: str = "IfNotPresent"
    """imagePullPolicy of session pods."""
    pull_secrets: CommaList = Field(default_factory=list)
    """imagePullSecrets of session and worker pods, comma-separated Secret names (each in the
    pod's namespace); a session's or LaneWorker's own list replaces it. Default none."""

    _split_secrets = field_validator("pull_secrets", mode="before")(_split)


class SharedClaimSettings(SettingsGroup):
    """The shared (ReadWriteMany) claim of each namespace: workspaces and session stores."""

    model_config = SettingsConfigDict(env_prefix="BERTH_SHARED_CLAIM_")

    default_name: str = Field("berth-shared", validation_alias=_env("BERTH_DEFAULT_CLAIM_NAME"))
    """PVC mounted by session pods when spec.store.claimName is unset. Default berth-shared."""
    managed: bool = True
    """Create a session's or LaneWorker's shared claim in its namespace when it does not exist
    (ReadWriteMany, from the two settings below; never deleted by the operator: stores outlive
    sessions). False: claims are the user's, and a missing one is reported (StoreReady=False,
    reason ClaimMissing). Default true."""
    storage_class: str = ""
    """storageClassName of claims the operator creates; empty = the cluster's default class."""
    size: str = "10Gi"
    """Requested size of claims the operator creates (a Kubernetes quantity). Default 10Gi."""
    retention: str = "Keep"
    """Store retention of sessions without spec.storeRetention: Keep, Delete, Delete/<seconds>."""
    retention_namespaces: CommaList = Field(default_factory=list)
    """Per-namespace retention overriding ``retention``, comma-separated ``<ns>=<policy>``."""
    _split_retention = field_validator("retention_namespaces", mode="before")(_split)
    setup: bool = True
    """Before a claim's first session pod, run its one-shot set-up Job once
    (``builders.volume_setup``: a root pod with only CAP_CHOWN and CAP_FOWNER that makes the
    volume root writable by the pods' user when it is not, as provisioners create roots owned
    by root) and record it on the claim. False: the volume root must already be writable by
    ``run_as_user`` (an EFS access point, uid/gid mount options; docs/install.md). Default
    true."""


class NetworkPolicyTemplate(BaseModel):
    """One NetworkPolicy the operator creates in every namespace that runs sessions or
    LaneWorkers: its name, the component it selects (``session`` or ``laneworker``, the
    ``app.kubernetes.io/component`` of the pods) and its ``spec`` (networking.k8s.io/v1)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str
    component: Literal["session", "laneworker"]
    spec: dict[str, Any]


class NetworkPolicySettings(SettingsGroup):
    """NetworkPolicies provisioned with each namespace's shared claim (docs/security.md,
    "Network"). The chart renders them from its ``networkPolicy`` values."""

    model_config = SettingsConfigDict(env_prefix="BERTH_NETWORK_POLICY_")

    templates: list[NetworkPolicyTemplate] = Field(default_factory=list)
    """JSON list of ``{name, component, spec}``; created (or updated when the operator created
    them) once per namespace and operator process. Empty (default): none."""
    owner_cluster_role: str = ""
    """ClusterRole made the owner of the policies (the release's, so ``helm uninstall``
    removes them through garbage collection); empty: no owner."""


class RedisSettings(SettingsGroup):
    """Redis of the lane transport, one URL (and ACL user) per role."""

    model_config = SettingsConfigDict(env_prefix="BERTH_REDIS_")

    url: str = "redis://redis:6379/0"
    """Redis of the lane transport, for every role that has no URL of its own below."""
    session_url: str = ""
    """Redis URL session pods use (the ``berth-session`` ACL user and its password); copied into
    each session's Secret, never into a pod spec. Empty = url."""
    worker_url: str = ""
    """Redis URL LaneWorker pods use (the ``berth-worker`` ACL user); copied into each
    namespace's ``berth-worker-redis`` Secret. Empty = url."""
    operator_url: str = ""
    """Redis URL of the operator's pressure reads (read-only ``berth-operator``); empty = url."""

    @property
    def for_sessions(self) -> str:
        """The Redis URL of session pods: session_url, else url."""
        return self.session_url or self.url

    @property
    def for_workers(self) -> str:
        """The Redis URL of worker pods: worker_url, else url."""
        return self.worker_url or self.url

    @property
    def for_operator(self) -> str:
        """The Redis URL of the operator's pressure reads: operator_url, else url."""
        return self.operator_url or self.url


class PodSettings(SettingsGroup):
    """Security and resource defaults of session and worker pods (docs/architecture.md §11)."""

    session_runtime_class: str = ""
    """runtimeClassName of session pods (e.g. gvisor or kata for a sandboxed agent); empty =
    the cluster's default runtime."""
    worker_runtime_class: str = ""
    """runtimeClassName of LaneWorker pods; empty = the cluster's default runtime."""
    session_service_account: str = ""
    """ServiceAccount of session pods; empty = the namespace's default (token not mounted)."""
    run_as_user: Annotated[int, Field(ge=1)] = 10001
    """Non-root UID (and GID, fsGroup) of session pods; the image's user. Default 10001."""
    default_cpu_limit: str = "2"
    """CPU limit of session and worker containers that set none (a Kubernetes quantity)."""
    default_memory_limit: str = "4Gi"
    """Memory limit of session and worker containers that set none. Default 4Gi."""
    default_cpu_request: str = "100m"
    """CPU request of session and worker containers that set none. Default 100m."""
    default_memory_request: str = "256Mi"
    """Memory request of session and worker containers that set none. Default 256Mi."""
    default_tool_sandbox: Literal["Required", "BestEffort"] = "Required"
    """``spec.toolSandbox`` of sessions that set none, and the LaneWorkers' (docs/security.md)."""


class LlmSettings(SettingsGroup):
    """Which LLM endpoints sessions may use."""

    model_config = SettingsConfigDict(env_prefix="BERTH_LLM_")

    allowed_base_urls: CommaList = Field(default_factory=list)
    """Prefixes spec.llm.baseURL must start with, comma-separated (the default OpenAI endpoint
    https://api.openai.com/v1 stands for an unset baseURL); empty (default) = any endpoint."""

    _split_urls = field_validator("allowed_base_urls", mode="before")(_split)


class PlacementSettings(SettingsGroup):
    """Replacing session pods that died: retries, back-off, lost nodes, in-flight creates."""

    max_placement_retries: Annotated[int, Field(ge=0, le=1000)] = 5
    """Replacements after pods that died without passivating before the session is Failed
    (counted since the last pod that ran for restart_reset_seconds). Default 5."""
    backoff_base_seconds: Annotated[float, Field(ge=0)] = 2.0
    """First replacement delay; doubles per consecutive failure (seconds). Default 2."""
    backoff_cap_seconds: Annotated[float, Field(ge=0)] = 300.0
    """Upper bound of the replacement delay (seconds). Default 300."""
    restart_reset_seconds: Annotated[float, Field(ge=0)] = 600.0
    """A pod Running this long resets the consecutive-failure count (seconds). Default 600."""
    node_lost_grace_seconds: Annotated[float, Field(ge=0)] = 0.0
    """How long a node must be NotReady/Unknown (after the node controller's own grace) before
    its session pods are force-deleted and replaced (seconds). Default 0."""
    inflight_ttl_seconds: Annotated[float, Field(gt=0)] = 60.0
    """How long a created pod unseen by the watch cache counts as in flight (s). Default 60."""
    warm_refill_delay_seconds: Annotated[float, Field(ge=0, le=60)] = 2.0
    """How long after a warm pod is adopted its SessionWarmPool creates the pod that replaces
    it (seconds): the adopted session's start-up, and the rest of a burst of adoptions (a
    drain), get the nodes' CPU before the refills start. 0 refills at once. Default 2."""

    def backoff_seconds(self, failures: int) -> float:
        """Delay before replacement number ``failures`` (1-based): base·2^(n-1), capped."""
        if failures <= 0:
            return 0.0
        return float(min(self.backoff_cap_seconds, self.backoff_base_seconds * 2 ** (failures - 1)))


class SessionApiSettings(SettingsGroup):
    """Calls to the session pods' API (``GET /v1/state`` and friends)."""

    status_refresh_seconds: Annotated[float, Field(gt=0)] = 10.0
    """How often GET /v1/state of each running session pod is polled (seconds). Default 10."""
    state_timeout_seconds: Annotated[float, Field(gt=0)] = 3.0
    """HTTP timeout of calls to session pods (seconds). Default 3."""
    status_coalesce_seconds: Annotated[float, Field(ge=0)] = 10.0
    """Longest time a status change that is information only (a starting pod's uid, node, IP,
    image; messages; ``Placed`` turning True) waits after the session's previous status write,
    to go out with the next one (reconcile.coalesce). 0 writes every change at once. Default
    10."""


class PassivationSettings(SettingsGroup):
    """Passivation before eviction (docs/architecture.md §8)."""

    model_config = SettingsConfigDict(env_prefix="BERTH_PASSIVATION_")

    deadline_seconds: Annotated[int, Field(ge=1)] = 120
    """Passivation grace when spec.passivation.deadlineSeconds is unset (seconds). Default 120."""
    kill_grace_seconds: Annotated[int, Field(ge=0, le=3600)] = 10
    """gracePeriodSeconds of the DELETE the operator sends when a pod has not passivated by its
    deadline: SIGTERM, then SIGKILL after this many seconds (seconds). Default 10."""
    pdb_enabled: bool = Field(True, validation_alias=_env("BERTH_PDB_ENABLED"))
    """Create a PodDisruptionBudget (minAvailable 1) per session so evictions (kubectl drain,
    cluster autoscaler) wait for passivation. Default true."""


class MigrationSettings(SettingsGroup):
    """Moving running sessions to a changed session image (``reconcile.migration``,
    docs/upgrades.md): the operator's ``BERTH_SESSION_IMAGE`` after an upgrade, or a session's
    ``spec.image``."""

    model_config = SettingsConfigDict(env_prefix="BERTH_MIGRATION_")

    max_unavailable: Annotated[int, Field(ge=0, le=10000)] = 1
    """Most sessions migrating at once (passivation requested, not yet running again on the new
    image), across everything this operator watches; 0 turns migration off (pods keep their
    image until they end). Default 1."""


class WebhookSettings(SettingsGroup):
    """The validating webhook on pods/eviction (answers 429 and starts passivation)."""

    model_config = SettingsConfigDict(env_prefix="BERTH_WEBHOOK_")

    enabled: bool = False
    """Serve the webhook (needs cert_dir). Default false: the PDB alone makes drains wait."""
    listen_host: str = "0.0.0.0"
    """Bind address of the webhook's HTTPS server. Default 0.0.0.0."""
    port: Annotated[int, Field(ge=1, le=65535)] = 9443
    """Port of the webhook's HTTPS server. Default 9443."""
    host: str = ""
    """Host (DNS name or IP, in the certificate's SANs) the apiserver uses in the webhook URL
    https://<host>:<port>/<handler>; empty = listen_host."""
    cert_dir: str = "/etc/berth/webhook"
    """Directory with tls.crt, tls.key (server) and ca.crt (the caBundle), e.g. made by
    hack/webhook-certs.sh with openssl; re-read when they change. Default /etc/berth/webhook."""
    configuration: str = "berth-operator"
    """Name of the ValidatingWebhookConfiguration the operator keeps up to date (kopf's managed
    mode; failurePolicy Ignore); empty = installed by someone else. Default berth-operator."""


class LeaderElectionSettings(SettingsGroup):
    """Leader election over a coordination.k8s.io Lease (two replicas: one active)."""

    model_config = SettingsConfigDict(env_prefix="BERTH_LEASE_")

    enabled: bool = Field(True, validation_alias=_env("BERTH_LEADER_ELECTION"))
    """Run only while holding the Lease. Default true."""
    name: str = "berth-operator"
    """Name of the Lease. Default berth-operator."""
    namespace: str = ""
    """Namespace of the Lease; empty = $POD_NAMESPACE, else "default"."""
    duration_seconds: Annotated[float, Field(gt=0)] = 15.0
    """Lease duration (seconds). Default 15."""
    renew_seconds: Annotated[float, Field(gt=0)] = 5.0
    """Renew period of the leader; must be below duration_seconds (seconds). Default 5."""
    identity: str = Field("", validation_alias=_env("BERTH_IDENTITY"))
    """Holder identity in the Lease; empty = $POD_NAME or <hostname>-<pid>."""

    def resolved_identity(self) -> str:
        """Lease holder identity: the setting, $POD_NAME, or <hostname>-<pid>."""
        return (
            self.identity or os.environ.get("POD_NAME") or f"{socket.gethostname()}-{os.getpid()}"
        )

    def resolved_namespace(self) -> str:
        """Lease namespace: the setting, $POD_NAMESPACE, or default."""
        return self.namespace or os.environ.get("POD_NAMESPACE") or "default"


class ServerSettings(SettingsGroup):
    """The operator's own HTTP server and its connections to the apiserver."""

    http_host: str = "0.0.0.0"
    """Bind address of the health and metrics server. Default 0.0.0.0."""
    http_port: Annotated[int, Field(ge=0, le=65535)] = 8081
    """Port serving /healthz, /readyz and /metrics. Default 8081."""
    kube_connection_pool: Annotated[int, Field(ge=1)] = 32
    """HTTP connections to the apiserver for requests, kopf's and the operator's own together,
    beyond kopf's watch streams: one pool (``handlers.login``). Default 32."""
    max_concurrent_reconciles: Annotated[int, Field(ge=1)] = 32
    """Workers reconciling AgentSessions (controller-runtime's MaxConcurrentReconciles): at most
    this many reconciles run at once; queued sessions wait their turn, first come first served.
    Default 32."""
    log_level: Literal["DEBUG", "INFO", "WARNING", "ERROR"] = "INFO"
    """Level of the operator's log (Python logging level names). DEBUG adds kopf's per-object
    handler log and every apiserver request: verbose at hundreds of sessions. Default INFO."""


class BudgetSettings(SettingsGroup):
    """The budget service that enforces BudgetPolicies (berth_operator.budget)."""

    model_config = SettingsConfigDict(env_prefix="BERTH_BUDGET_")

    enabled: bool = False
    """Serve the budget service and give session pods its URL. Default false."""
    port: Annotated[int, Field(ge=1, le=65535)] = 8082
    """Port of the budget service (leader only). Default 8082."""
    url: str = ""
    """URL session pods call (the leader-only Service), e.g.
    http://berth-operator-budget.berth.svc:8082; empty = no session consults it."""
    timeout_ms: Annotated[int, Field(ge=50, le=60000)] = 2000
    """How long a session waits for the service before its failurePolicy applies. Default 2000."""
    failure_policy: Literal["Closed", "Open"] = "Closed"
    """What an unreachable service means to a session before it first got an answer (which
    then carries the failurePolicy of the policies selecting it). Default Closed."""


class GatewaySettings(SettingsGroup):
    """The session front door (berth_operator.gateway): messages for sessions by name, queued
    durably, delivered once, waking sessions at rest; peer calls between sessions."""

    model_config = SettingsConfigDict(env_prefix="BERTH_GATEWAY_")

    enabled: bool = False
    """Serve the front door on the leader. Default false."""
    port: Annotated[int, Field(ge=1, le=65535)] = 8083
    """Port of the front door (leader only). Default 8083."""
    url: str = ""
    """URL session pods use for peer calls (the leader-only Service), e.g.
    http://berth-operator-gateway.berth.svc:8083; empty = sessions get no ``call_peer`` tool."""
    max_wait_seconds: Annotated[int, Field(ge=1, le=3600)] = 300
    """Longest ``waitSeconds`` a caller (or a peer call) may ask for. Default 300."""
    message_retention_seconds: Annotated[int, Field(ge=60)] = 86400
    """How long a delivered message's record (state, reply) is kept. Default 86400 (1 day)."""
    max_peer_depth: Annotated[int, Field(ge=1, le=16)] = 3
    """Longest chain of peer calls (A → B → C is 2). Default 3."""
    poll_seconds: Annotated[float, Field(gt=0, le=10)] = 0.25
    """How often a delivery loop looks at its session's pod while a message is in flight."""


class OperatorSettings(BaseModel):
    """Configuration of one berth-operator process: one field per settings group."""

    model_config = ConfigDict(frozen=True, extra="forbid", use_attribute_docstrings=True)

    scope: ScopeSettings = Field(default_factory=ScopeSettings)
    """What the operator watches."""
    images: ImageSettings = Field(default_factory=ImageSettings)
    """Images of session and worker pods."""
    claims: SharedClaimSettings = Field(default_factory=SharedClaimSettings)
    """The shared claim of each namespace."""
    redis: RedisSettings = Field(default_factory=RedisSettings)
    """Redis URLs per role."""
    pods: PodSettings = Field(default_factory=PodSettings)
    """Security and resource defaults of pods."""
    llm: LlmSettings = Field(default_factory=LlmSettings)
    """Allowed LLM endpoints."""
    placement: PlacementSettings = Field(default_factory=PlacementSettings)
    """Replacement of dead pods."""
    session_api: SessionApiSettings = Field(default_factory=SessionApiSettings)
    """Calls to session pods."""
    passivation: PassivationSettings = Field(default_factory=PassivationSettings)
    """Passivation before eviction."""
    migration: MigrationSettings = Field(default_factory=MigrationSettings)
    """Moving running sessions to a changed image."""
    webhook: WebhookSettings = Field(default_factory=WebhookSettings)
    """The eviction webhook."""
    leader_election: LeaderElectionSettings = Field(default_factory=LeaderElectionSettings)
    """Leader election."""
    server: ServerSettings = Field(default_factory=ServerSettings)
    """HTTP server and apiserver connections."""
    budget: BudgetSettings = Field(default_factory=BudgetSettings)
    """The budget service."""
    gateway: GatewaySettings = Field(default_factory=GatewaySettings)
    """The session front door."""
    network_policy: NetworkPolicySettings = Field(default_factory=NetworkPolicySettings)
    """NetworkPolicies of session and worker namespaces."""

    @classmethod
    def group_types(cls) -> dict[str, type[SettingsGroup]]:
        """Group name → its settings class."""
        out: dict[str, type[SettingsGroup]] = {}
        for name, field in cls.model_fields.items():
            annotation = field.annotation
            assert isinstance(annotation, type) and issubclass(annotation, SettingsGroup)
            out[name] = annotation
        return out

    @classmethod
    def env_names(cls) -> set[str]:
        """Every variable the operator reads its settings from."""
        return {g.env_name(f) for g in cls.group_types().values() for f in g.model_fields}

    @classmethod
    def from_env(cls) -> OperatorSettings:
        """Read every group from ``os.environ`` (pydantic-settings' ``EnvSettingsSource``).

        Raises ``SettingsError`` naming every bad variable (all groups are checked before it
        raises) and when the lease renew period is not below its duration."""
        groups: dict[str, SettingsGroup] = {}
        problems: list[str] = []
        for name, group in cls.group_types().items():
            try:
                groups[name] = group(**EnvSettingsSource(group)())
            except ValidationError as exc:
                problems += [_problem(group, e["loc"], e["msg"]) for e in exc.errors()]
            except SourceError as exc:
                problems.append(str(exc))
        if problems:
            raise SettingsError(f"invalid operator settings: {'; '.join(problems)}")
        settings = cls.model_validate(groups)
        lease = settings.leader_election
        if lease.renew_seconds >= lease.duration_seconds:
            raise SettingsError(
                "invalid operator settings: BERTH_LEASE_RENEW_SECONDS must be below "
                "BERTH_LEASE_DURATION_SECONDS"
            )
        return settings


def _problem(group: type[SettingsGroup], loc: tuple[int | str, ...], msg: str) -> str:
    key = str(loc[0]) if loc else ""
    name = key if key.startswith(ENV_PREFIX) else group.env_name(key)
    return f"{name}: {msg}"
