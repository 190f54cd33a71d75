"""LaneWorker v1alpha1: spec and status models (docs/architecture.md §4).

A LaneWorker is a pool of ``berth-worker`` pods consuming the Redis task stream
``berth:<ns>:lw:{<name>}:tasks`` (:func:`berth_contract.names.task_stream`), scaled through its
``/scale`` subresource on the stream's pressure.
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Literal

from pydantic import Field, WithJsonSchema

from berth_operator.api.common import (
    Condition,
    ImageRef,
    Int64,
    K8sModel,
    PullSecrets,
    ResourceRequirements,
    Toleration,
)


class PrometheusSource(K8sModel):
    """Prometheus query giving the pool's pressure (backlog plus in-flight tasks)."""

    url: Annotated[str, Field(min_length=1, max_length=2048, pattern=r"^https?://\S+$")]
    """Prometheus base URL."""
    query: Annotated[str, Field(min_length=1, max_length=4096)]
    """PromQL returning one number: tasks waiting plus tasks running."""


class ScalingSpec(K8sModel):
    """Queue-pressure autoscaling. Absent: the operator does not scale (use /scale, HPA, KEDA)."""

    target_tasks_per_replica: Annotated[int, Field(ge=1, le=10000)] = 1
    """Desired pressure (backlog + in-flight) per replica."""
    polling_interval_seconds: Annotated[int, Field(ge=1, le=3600)] = 5
    """How often pressure is read, in seconds. With source ``broker`` the pool is also scaled up
    as soon as tasks land that call for more replicas, without waiting for the next reading."""
    scale_up_stabilization_seconds: Annotated[int, Field(ge=0, le=3600)] = 0
    """Window over which the lowest recommendation is used when scaling up (as the HPA does: a
    brief spike does not scale up), in seconds."""
    scale_down_stabilization_seconds: Annotated[int, Field(ge=0, le=86400)] = 300
    """Window over which the highest recommendation is used when scaling down, in seconds."""
    source: Literal["broker", "prometheus"] = "broker"
    """Where pressure comes from: the Redis consumer group (broker) or a Prometheus query."""
    prometheus: PrometheusSource | None = None
    """Required when source is prometheus."""

    model_config = K8sModel.model_config | {
        "json_schema_extra": {
            "x-kubernetes-validations": [
                {
                    "rule": "self.source != 'prometheus' || has(self.prometheus)",
                    "message": "scaling.prometheus is required when scaling.source is prometheus",
                    "fieldPath": ".prometheus",
                }
            ]
        }
    }


SECURITY_CONTEXT_RULES = [
    {
        "rule": "!has(self.privileged) || self.privileged == false",
        "message": "privileged worker containers are not allowed",
    },
    {
        "rule": "!has(self.allowPrivilegeEscalation) || self.allowPrivilegeEscalation == false",
        "message": "allowPrivilegeEscalation must be false (or unset) for worker containers",
    },
    {
        "rule": "!has(self.capabilities) || !has(self.capabilities.add) || "
        "size(self.capabilities.add) == 0",
        "message": "worker containers cannot add capabilities (all are dropped)",
    },
    {
        "rule": "!has(self.seccompProfile) || !has(self.seccompProfile.type) || "
        "self.seccompProfile.type != 'Unconfined'",
        "message": "seccompProfile Unconfined is not allowed (RuntimeDefault is used)",
    },
    {
        "rule": "!has(self.runAsUser) || self.runAsUser != 0",
        "message": "worker containers cannot run as root (runAsUser 0)",
    },
    {
        "rule": "!has(self.runAsNonRoot) || self.runAsNonRoot == true",
        "message": "runAsNonRoot cannot be false for worker containers",
    },
]
"""CEL rules on LaneWorker spec.template.securityContext (docs/architecture.md §11)."""

_STRINGS = {"type": "array", "maxItems": 64, "items": {"type": "string"}}
SecurityContextObject = Annotated[
    dict[str, Any],
    WithJsonSchema(
        {
            "type": "object",
            "x-kubernetes-preserve-unknown-fields": True,
            # CEL can only see declared fields, so the ones the rules check are declared.
            "properties": {
                "privileged": {"type": "boolean"},
                "allowPrivilegeEscalation": {"type": "boolean"},
                "readOnlyRootFilesystem": {"type": "boolean"},
                "runAsNonRoot": {"type": "boolean"},
                "runAsUser": {"type": "integer", "format": "int64"},
                "runAsGroup": {"type": "integer", "format": "int64"},
                "capabilities": {
                    "type": "object",
                    "properties": {"add": _STRINGS, "drop": _STRINGS},
                },
                "seccompProfile": {
                    "type": "object",
                    "x-kubernetes-preserve-unknown-fields": True,
                    "properties": {"type": {"type": "string"}},
                },
            },
            "x-kubernetes-validations": SECURITY_CONTEXT_RULES,
        }
    ),
]
"""A core/v1 SecurityContext: other fields are kept; the checked ones are declared."""


class WorkerTemplate(K8sModel):
    """Overrides applied to the worker pods."""

    resources: ResourceRequirements | None = None
    """Requests and limits of the worker container."""
    node_selector: dict[str, str] | None = None
    """Node labels the worker pods require."""
    tolerations: list[Toleration] | None = Field(default=None, max_length=64)
    """Tolerations of the worker pods."""
    security_context: SecurityContextObject | None = None
    """core/v1 SecurityContext of the worker container. The operator always drops all
    capabilities, forbids privilege escalation, uses RuntimeDefault seccomp, a read-only root and
    a non-root user; only runAsUser/runAsGroup (non-zero), seLinuxOptions and appArmorProfile
    are taken from here. Privileged, allowPrivilegeEscalation, added capabilities, Unconfined
    seccomp and runAsUser 0 are refused."""


class WorkerStore(K8sModel):
    """Shared volume the workers mount (the sessions' workspaces live there)."""

    claim_name: Annotated[str, Field(min_length=1, max_length=253)] | None = None
    """PersistentVolumeClaim name (default: the operator's default claim)."""


class LaneWorkerSpec(K8sModel):
    """Desired state of a pool of lane workers."""

    lane: Literal["query", "execute", "generate", "control"] = "execute"
    """Lane whose tasks this pool runs."""
    image: ImageRef | None = None
    """Worker image (default: the operator's session image)."""
    image_pull_secrets: PullSecrets | None = None
    """Secrets to pull the image with; replaces the operator's default list."""
    concurrency: Annotated[int, Field(ge=1, le=256)] = 1
    """Tasks one worker pod runs at once."""
    replicas: Annotated[int, Field(ge=0, le=10000)] | None = None
    """Replica count when scaling is absent (the /scale subresource writes this field)."""
    min_replicas: Annotated[int, Field(ge=0, le=10000)] = 0
    """Lower bound of autoscaling (may be 0)."""
    max_replicas: Annotated[int, Field(ge=1, le=10000)] = 10
    """Upper bound of autoscaling."""
    scaling: ScalingSpec | None = None
    """Queue-pressure autoscaling; absent means replicas is driven externally."""
    store: WorkerStore | None = None
    """Shared volume."""
    task_timeout_seconds: Annotated[int, Field(ge=1, le=86400)] = 600
    """Longest a task may run; also the drain time a worker gets on SIGTERM (seconds)."""
    template: WorkerTemplate | None = None
    """Pod overrides."""

    model_config = K8sModel.model_config | {
        "json_schema_extra": {
            "x-kubernetes-validations": [
                {
                    "rule": "self.minReplicas <= self.maxReplicas",
                    "message": "minReplicas must not exceed maxReplicas",
                    "fieldPath": ".minReplicas",
                },
                {
                    # With scaling, Berth owns the replica count and would silently ignore
                    # spec.replicas (and every `kubectl scale` or HPA write to /scale).
                    "rule": "!has(self.replicas) || !has(self.scaling)",
                    "message": "set either replicas (driven by kubectl scale or an HPA) or "
                    "scaling (Berth scales on queue pressure), not both",
                    "fieldPath": ".replicas",
                },
            ]
        }
    }


class Pressure(K8sModel):
    """Queue pressure of the pool."""

    backlog: Int64 = 0
    """Tasks not yet delivered to a worker (consumer group lag)."""
    in_flight: Int64 = 0
    """Tasks delivered and not yet acknowledged (pending entries)."""


class LaneWorkerStatus(K8sModel):
    """Observed state of the pool, written by the operator."""

    replicas: int | None = None
    """Pods of the pool (for /scale)."""
    ready_replicas: int | None = None
    """Ready pods."""
    desired_replicas: int | None = None
    """Replicas the autoscaler last asked for."""
    selector: str | None = None
    """Label selector of the pool's pods (for /scale and HPA)."""
    task_stream: str | None = None
    """Redis stream the pool consumes."""
    pressure: Pressure | None = None
    """Last pressure reading."""
    last_scale_time: datetime | None = None
    """When the pool was last resized."""
    conditions: Annotated[
        list[Condition] | None,
        Field(
            json_schema_extra={
                "x-kubernetes-list-type": "map",
                "x-kubernetes-list-map-keys": ["type"],
            }
        ),
    ] = None
    """Conditions (Ready summary)."""
    observed_generation: Int64 | None = None
    """metadata.generation last acted on."""
