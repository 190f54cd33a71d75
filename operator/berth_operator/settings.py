"""Operator settings, read once from the environment at start-up (``berth-operator``).

Every field is read from ``BERTH_<FIELD_NAME_UPPERCASE>`` (e.g. ``max_placement_retries`` from
``BERTH_MAX_PLACEMENT_RETRIES``); lists are comma-separated; booleans accept true/false/1/0.
``OperatorSettings.from_env()`` raises ``SettingsError`` naming every bad variable. The Helm chart
sets these from values.yaml. Attribute docstrings give unit and default.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Mapping
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from berth_operator import __version__
from berth_operator.errors import SettingsError

ENV_PREFIX = "BERTH_"


class OperatorSettings(BaseModel):
    """Configuration of one berth-operator process."""

    model_config = ConfigDict(use_attribute_docstrings=True, frozen=True, extra="forbid")

    namespaces: list[str] = Field(default_factory=list)
    """Namespaces watched, comma-separated; empty (default) = all namespaces (cluster-wide)."""
    default_claim_name: str = "berth-shared"
    """PVC mounted by session pods when spec.store.claimName is unset. Default berth-shared."""
    shared_claim_managed: bool = True
    """Create a session's or LaneWorker's shared claim in its namespace when it does not exist
    (ReadWriteMany, from the three settings below; never deleted by the operator: stores outlive
    sessions). False: claims are the user's, and a missing one is reported (StoreReady=False,
    reason ClaimMissing). Default true."""
    shared_claim_storage_class: str = ""
    """storageClassName of claims the operator creates; empty = the cluster's default class."""
    shared_claim_size: str = "10Gi"
    """Requested size of claims the operator creates (a Kubernetes quantity). Default 10Gi."""
    session_image: str = f"ghcr.io/berth-dev/berth:{__version__}"
    """Image of session pods (and of the store-cleanup Job)."""
    image_pull_policy: str = "IfNotPresent"
    """imagePullPolicy of session pods."""
    image_pull_secrets: list[str] = Field(default_factory=list)
    """imagePullSecrets of session and worker pods, comma-separated Secret names (each in the
    pod's namespace); a session's or LaneWorker's own list replaces it. Default none."""
    redis_url: str = "redis://redis:6379/0"
    """Redis of the lane transport, for every role that has no URL of its own below."""
    redis_session_url: str = ""
    """Redis URL session pods use (the ``berth-session`` ACL user and its password); copied into
    each session's Secret, never into a pod spec. Empty = redis_url."""
    redis_worker_url: str = ""
    """Redis URL LaneWorker pods use (the ``berth-worker`` ACL user); copied into each
    namespace's ``berth-worker-redis`` Secret. Empty = redis_url."""
    redis_operator_url: str = ""
    """Redis URL of the operator's own pressure reads (the read-only ``berth-operator`` ACL
    user). Empty = redis_url."""
    session_runtime_class: str = ""
    """runtimeClassName of session pods (e.g. gvisor or kata for a sandboxed agent); empty =
    the cluster's default runtime."""
    worker_runtime_class: str = ""
    """runtimeClassName of LaneWorker pods; empty = the cluster's default runtime."""
    session_service_account: str = ""
    """ServiceAccount of session pods; empty = the namespace's default (token not mounted)."""
    run_as_user: Annotated[int, Field(ge=1)] = 10001
    """Non-root UID (and GID, fsGroup) of session pods; the image's user. Default 10001."""
    max_placement_retries: Annotated[int, Field(ge=0, le=1000)] = 5
    """Replacements after pods that died without passivating before the session is Failed
    (counted since the last pod that ran for restart_reset_seconds). Default 5."""
    backoff_base_seconds: Annotated[float, Field(ge=0)] = 2.0
    """First replacement delay; doubles per consecutive failure (seconds). Default 2."""
    backoff_cap_seconds: Annotated[float, Field(ge=0)] = 300.0
    """Upper bound of the replacement delay (seconds). Default 300."""
    restart_reset_seconds: Annotated[float, Field(ge=0)] = 600.0
    """A pod Running this long resets the consecutive-failure count (seconds). Default 600."""
    status_refresh_seconds: Annotated[float, Field(gt=0)] = 10.0
    """How often GET /v1/state of each running session pod is polled (seconds). Default 10."""
    state_timeout_seconds: Annotated[float, Field(gt=0)] = 3.0
    """HTTP timeout of calls to session pods (seconds). Default 3."""
    passivation_deadline_seconds: Annotated[int, Field(ge=1)] = 120
    """Passivation grace when spec.passivation.deadlineSeconds is unset (seconds). Default 120."""
    node_lost_grace_seconds: Annotated[float, Field(ge=0)] = 0.0
    """How long a node must be NotReady/Unknown (after the node controller's own grace) before
    its session pods are force-deleted and replaced (seconds). Default 0."""
    inflight_ttl_seconds: Annotated[float, Field(gt=0)] = 60.0
    """How long a created pod unseen by the watch cache counts as in flight (s). Default 60."""
    leader_election: bool = True
    """Run only while holding the Lease (two replicas: one active). Default true."""
    lease_name: str = "berth-operator"
    """Name of the coordination.k8s.io Lease. Default berth-operator."""
    lease_namespace: str = ""
    """Namespace of the Lease; empty = $POD_NAMESPACE, else "default"."""
    lease_duration_seconds: Annotated[float, Field(gt=0)] = 15.0
    """Lease duration (seconds). Default 15."""
    lease_renew_seconds: Annotated[float, Field(gt=0)] = 5.0
    """Renew period of the leader; must be below lease_duration_seconds (seconds). Default 5."""
    identity: str = ""
    """Holder identity in the Lease; empty = $POD_NAME or <hostname>-<pid>."""
    http_host: str = "0.0.0.0"
    """Bind address of the health and metrics server. Default 0.0.0.0."""
    http_port: Annotated[int, Field(ge=0, le=65535)] = 8081
    """Port serving /healthz, /readyz and /metrics. Default 8081."""
    kube_connection_pool: Annotated[int, Field(ge=1)] = 32
    """HTTP connections to the apiserver. Default 32."""
    # --- passivation before eviction (ARCHITECTURE.md §8) -------------------------------------
    passivation_kill_grace_seconds: Annotated[int, Field(ge=0, le=3600)] = 10
    """gracePeriodSeconds of the DELETE the operator sends when a pod has not passivated by its
    deadline: SIGTERM, then SIGKILL after this many seconds (seconds). Default 10."""
    pdb_enabled: bool = True
    """Create a PodDisruptionBudget (minAvailable 1) per session so evictions (kubectl drain,
    cluster autoscaler) wait for passivation. Default true."""
    webhook_enabled: bool = False
    """Serve the validating webhook on pods/eviction (answers 429 and starts passivation). Needs
    webhook_cert_dir. Default false (the PDB alone still makes drains wait)."""
    webhook_listen_host: str = "0.0.0.0"
    """Bind address of the webhook's HTTPS server. Default 0.0.0.0."""
    webhook_port: Annotated[int, Field(ge=1, le=65535)] = 9443
    """Port of the webhook's HTTPS server. Default 9443."""
    webhook_host: str = ""
    """Host (DNS name or IP, in the certificate's SANs) the apiserver uses in the webhook URL
    https://<host>:<port>/<handler>; empty = webhook_listen_host."""
    webhook_cert_dir: str = "/etc/berth/webhook"
    """Directory with tls.crt, tls.key (server) and ca.crt (the caBundle), e.g. made by
    hack/webhook-certs.sh with openssl; re-read when they change. Default /etc/berth/webhook."""
    webhook_configuration: str = "berth-operator"
    """Name of the ValidatingWebhookConfiguration the operator keeps up to date (kopf's managed
    mode; failurePolicy Ignore); empty = installed by someone else. Default berth-operator."""

    # --- security defaults (the Berth security contract) ------------------------------------
    llm_allowed_base_urls: list[str] = Field(default_factory=list)
    """Prefixes spec.llm.baseURL must start with, comma-separated (the default OpenAI endpoint
    https://api.openai.com/v1 stands for an unset baseURL); empty (default) = any endpoint."""
    default_cpu_limit: str = "2"
    """CPU limit of session and worker containers that set none (a Kubernetes quantity)."""
    default_memory_limit: str = "4Gi"
    """Memory limit of session and worker containers that set none. Default 4Gi."""
    default_cpu_request: str = "100m"
    """CPU request of session and worker containers that set none. Default 100m."""
    default_memory_request: str = "256Mi"
    """Memory request of session and worker containers that set none. Default 256Mi."""

    @property
    def session_redis_url(self) -> str:
        """The Redis URL of session pods: redis_session_url, else redis_url."""
        return self.redis_session_url or self.redis_url

    @property
    def worker_redis_url(self) -> str:
        """The Redis URL of worker pods: redis_worker_url, else redis_url."""
        return self.redis_worker_url or self.redis_url

    @property
    def operator_redis_url(self) -> str:
        """The Redis URL of the operator's pressure reads: redis_operator_url, else redis_url."""
        return self.redis_operator_url or self.redis_url

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> OperatorSettings:
        """Build settings from ``env`` (default ``os.environ``). Raises SettingsError."""
        env = os.environ if env is None else env
        raw: dict[str, Any] = {}
        for name in cls.model_fields:
            key = ENV_PREFIX + name.upper()
            if key not in env:
                continue
            value = env[key]
            if name in ("namespaces", "llm_allowed_base_urls", "image_pull_secrets"):
                raw[name] = [n.strip() for n in value.split(",") if n.strip()]
            else:
                raw[name] = value
        try:
            settings = cls.model_validate(raw)
        except ValidationError as exc:
            problems = "; ".join(
                f"{ENV_PREFIX}{str(e['loc'][0]).upper()}: {e['msg']}" for e in exc.errors()
            )
            raise SettingsError(f"invalid operator settings: {problems}") from exc
        if settings.lease_renew_seconds >= settings.lease_duration_seconds:
            raise SettingsError(
                "invalid operator settings: BERTH_LEASE_RENEW_SECONDS must be below "
                "BERTH_LEASE_DURATION_SECONDS"
            )
        return settings

    def resolved_identity(self) -> str:
        """Lease holder identity: the setting, $POD_NAME, or <hostname>-<pid>."""
        return (
            self.identity or os.environ.get("POD_NAME") or f"{socket.gethostname()}-{os.getpid()}"
        )

    def resolved_lease_namespace(self) -> str:
        """Lease namespace: the setting, $POD_NAMESPACE, or default."""
        return self.lease_namespace or os.environ.get("POD_NAMESPACE") or "default"

    def backoff_seconds(self, failures: int) -> float:
        """Delay before replacement number ``failures`` (1-based): base·2^(n-1), capped."""
        if failures <= 0:
            return 0.0
        return float(min(self.backoff_cap_seconds, self.backoff_base_seconds * 2 ** (failures - 1)))
