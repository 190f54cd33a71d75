"""Shared pydantic building blocks for the CRD models (camelCase aliases, int32/int64, quantities).

Conventions (Kubernetes API conventions, "Primitive types"): integers are int32 unless marked
int64 (``Int64``), durations are ``...Seconds`` integers, optional fields are omitted rather than
null. Attribute docstrings become the OpenAPI ``description`` that ``kubectl explain`` shows.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, WithJsonSchema
from pydantic.alias_generators import to_camel

Int64 = Annotated[int, Field(json_schema_extra={"format": "int64"})]
"""An integer stored as int64 in the CRD schema (token counts, sizes)."""

QUANTITY_PATTERN = (
    r"^(\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))(([KMGTPE]i)|[numkMGTPE]|([eE](\+|-)?"
    r"(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))))?$"
)
Quantity = Annotated[
    int | str,
    WithJsonSchema(
        {
            "anyOf": [{"type": "integer"}, {"type": "string"}],
            "x-kubernetes-int-or-string": True,
            "pattern": QUANTITY_PATTERN,
        }
    ),
]
"""A resource.Quantity ("500m", "1Gi", 2)."""

PreservedObject = Annotated[
    dict[str, Any],
    WithJsonSchema({"type": "object", "x-kubernetes-preserve-unknown-fields": True}),
]
"""An object passed through unchanged to the pod spec (validated by the apiserver there)."""

PreservedList = Annotated[
    list[dict[str, Any]],
    WithJsonSchema(
        {
            "type": "array",
            "items": {"type": "object", "x-kubernetes-preserve-unknown-fields": True},
        }
    ),
]

DNS1123_SUBDOMAIN = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"
LABEL_VALUE = r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$"
LABEL_KEY_CEL = (  # no backslashes: it is embedded in a CEL string literal
    r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?([.][a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?"
    r"[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$"
)


class K8sModel(BaseModel):
    """Base of every CRD and contract model: camelCase on the wire, docstrings as descriptions."""

    model_config = ConfigDict(
        alias_generator=to_camel,
        populate_by_name=True,
        use_attribute_docstrings=True,
        extra="ignore",
        serialize_by_alias=True,
    )

    def wire(self) -> dict[str, Any]:
        """The JSON-ready dict (camelCase, None fields omitted)."""
        return self.model_dump(mode="json", by_alias=True, exclude_none=True)


class LocalObjectReference(K8sModel):
    """A reference to an object in the same namespace."""

    name: Annotated[str, Field(min_length=1, max_length=253, pattern=DNS1123_SUBDOMAIN)]
    """Name of the referenced object (DNS-1123 subdomain)."""


IMAGE_REF_PATTERN = (
    r"^(?:[a-zA-Z0-9](?:[a-zA-Z0-9-]*[a-zA-Z0-9])?(?:\.[a-zA-Z0-9](?:[a-zA-Z0-9-]*[a-zA-Z0-9])?)*"
    r"(?::[0-9]+)?/)?[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*(?:/[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*)*"
    r"(?::[A-Za-z0-9_][A-Za-z0-9_.-]{0,127})?(?:@sha256:[a-f0-9]{64})?$"
)
"""A container image reference (the distribution reference grammar: [registry[:port]/]path
[:tag][@sha256:digest])."""
ImageRef = Annotated[str, Field(min_length=1, max_length=1024, pattern=IMAGE_REF_PATTERN)]
"""An image of a session or worker pod (validated at ``kubectl apply``)."""
PullSecrets = Annotated[list[LocalObjectReference], Field(max_length=16)]
"""``imagePullSecrets`` of a pod: Secrets (type kubernetes.io/dockerconfigjson) of its namespace."""


class ConfigMapKeySelector(K8sModel):
    """A key of a ConfigMap in the object's namespace."""

    name: Annotated[str, Field(min_length=1, max_length=253, pattern=DNS1123_SUBDOMAIN)]
    """Name of the ConfigMap."""
    key: Annotated[str, Field(min_length=1, max_length=253, pattern=r"^[-._a-zA-Z0-9]+$")]
    """Key inside the ConfigMap."""


class SecretKeySelector(K8sModel):
    """A key of a Secret in the session's namespace."""

    name: Annotated[str, Field(min_length=1, max_length=253, pattern=DNS1123_SUBDOMAIN)]
    """Name of the Secret."""
    key: Annotated[str, Field(min_length=1, max_length=253, pattern=r"^[-._a-zA-Z0-9]+$")]
    """Key inside the Secret whose value is used."""


ConditionStatus = Literal["True", "False", "Unknown"]


class Condition(K8sModel):
    """One condition, in the shape of metav1.Condition."""

    type: Annotated[str, Field(min_length=1, max_length=316)]
    """Condition type in CamelCase (Ready, Placed, Running, Passivated, Completed, ...)."""
    status: ConditionStatus
    """True, False or Unknown."""
    reason: Annotated[
        str,
        Field(min_length=1, max_length=1024, pattern=r"^[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?$"),
    ]
    """Machine-readable CamelCase reason for the last transition."""
    message: Annotated[str, Field(max_length=32768)] = ""
    """Human-readable details."""
    last_transition_time: datetime
    """When status last changed (RFC 3339); unchanged when only reason or message change."""
    observed_generation: Int64 | None = Field(default=None, ge=0)
    """metadata.generation the condition was computed from."""


class ResourceRequirements(K8sModel):
    """Compute resources of the container (as core/v1 ResourceRequirements)."""

    requests: dict[str, Quantity] | None = None
    """Minimum resources, e.g. {cpu: 500m, memory: 1Gi}."""
    limits: dict[str, Quantity] | None = None
    """Maximum resources, e.g. {memory: 2Gi}."""


class Toleration(K8sModel):
    """A pod toleration (as core/v1 Toleration)."""

    key: Annotated[str, Field(max_length=316)] | None = None
    """Taint key the toleration applies to; empty with operator Exists matches all keys."""
    operator: Literal["Exists", "Equal"] | None = None
    """Exists or Equal (default Equal)."""
    value: Annotated[str, Field(max_length=63)] | None = None
    """Taint value to match when operator is Equal."""
    effect: Literal["NoSchedule", "PreferNoSchedule", "NoExecute"] | None = None
    """Taint effect to match; empty matches all effects."""
    toleration_seconds: Int64 | None = None
    """For NoExecute: how long the pod stays bound after the taint appears (seconds)."""


@dataclass(frozen=True, slots=True)
class SessionRef:
    """Identity of one AgentSession object."""

    namespace: str
    name: str
    uid: str
    generation: int = 0

    @property
    def key(self) -> str:
        """``<namespace>/<name>`` (BERTH_SESSION)."""
        return f"{self.namespace}/{self.name}"
