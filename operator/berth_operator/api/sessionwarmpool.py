"""SessionWarmPool v1alpha1: spec and status models, and the warm-pod vocabulary.

A SessionWarmPool keeps ``spec.replicas`` pre-started session pods per template (image, pull
secrets, placement and resources, LLM endpoint and key reference): each has imported the runtime,
mounted its namespace's part of the shared volume and waits to be given a session. An AgentSession
whose ``spec.warmPoolRef`` names the pool, and whose pod-shaping fields equal the pool's template
(:func:`template_mismatch`), is adopted by a Ready warm pod instead of a created one; the pool then
refills. The design follows kubernetes-sigs/agent-sandbox's ``SandboxWarmPool`` (a pool of
pre-started pods, claimed by adoption), with ``/scale`` as for a ReplicaSet.
"""

from __future__ import annotations

import hashlib
import json
from datetime import datetime
from typing import Annotated, Final

from pydantic import Field

from berth_operator.api.agentsession import AgentSessionSpec, LLMSpec, PlacementSpec, StoreSpec
from berth_operator.api.common import Condition, ImageRef, K8sModel, PullSecrets

WARMPOOL_KIND: Final = "SessionWarmPool"
WARMPOOL_PLURAL: Final = "sessionwarmpools"
WARMPOOL_SINGULAR: Final = "sessionwarmpool"
WARMPOOL_SHORT_NAMES: Final = ("swp",)

LABEL_WARM_POOL: Final = "berth.dev/warm-pool"
"""Label of a warm pod: the name of its pool (removed when the pod is adopted)."""
LABEL_WARM_TEMPLATE: Final = "berth.dev/warm-template"
"""Label of a warm pod: :func:`template_hash` of the template it was made from."""
ANNOTATION_ADOPTED_FROM: Final = "berth.dev/adopted-from-pool"
"""Annotation of an adopted pod: the pool it came from."""
WARM_SECRET_SUFFIX: Final = "-warm"
"""The pool's Secret ``<pool>-warm`` holds the adoption token (key ``adopt-token``)."""
WARM_TOKEN_KEY: Final = "adopt-token"
WARM_TOKEN_MOUNT_PATH: Final = "/var/run/berth/warm"
MAX_REPLICAS: Final = 200


class WarmPodTemplate(K8sModel):
    """What makes two session pods interchangeable: the fields of an AgentSession that shape its
    pod. A session is adopted only by a pod whose template equals its own fields."""

    image: ImageRef | None = None
    """Session image (default: the operator's session image)."""
    image_pull_secrets: PullSecrets | None = None
    """Secrets to pull the image with; replaces the operator's default list."""
    llm: LLMSpec | None = None
    """LLM endpoint and key reference (the key is mounted into every warm pod)."""
    placement: PlacementSpec | None = None
    """Scheduling and resources of the warm pods."""
    store: StoreSpec | None = None
    """The shared volume claim (default: the operator's default claim)."""


class SessionWarmPoolSpec(K8sModel):
    """Desired state: how many warm pods of which template."""

    replicas: Annotated[int, Field(ge=0, le=MAX_REPLICAS)] = 1
    """Warm pods to keep ready (the ``/scale`` subresource's spec.replicas)."""
    template: WarmPodTemplate = Field(default_factory=WarmPodTemplate)
    """The pods' template. Changing it replaces the waiting pods; adopted ones are untouched."""


class SessionWarmPoolStatus(K8sModel):
    """Observed state of the pool."""

    observed_generation: int | None = None
    """metadata.generation this status describes."""
    replicas: int | None = None
    """Warm pods of the current template that exist or are being created."""
    ready_replicas: int | None = None
    """Warm pods that are Ready and may be adopted."""
    adopting_replicas: int | None = None
    """Pods being given a session right now by this operator."""
    adopted_total: int | None = None
    """Pods this pool gave to sessions (kept across operator restarts)."""
    template_hash: str | None = None
    """:func:`template_hash` of spec.template (label berth.dev/warm-template of its pods)."""
    selector: str | None = None
    """Label selector of the pool's warm pods (the ``/scale`` subresource's selector)."""
    last_adoption_at: datetime | None = None
    """When a pod of this pool was last adopted."""
    conditions: list[Condition] | None = None
    """Ready: the pool holds spec.replicas Ready warm pods."""


def template_hash(template: WarmPodTemplate, default_image: str) -> str:
    """10 hex characters of SHA-256 over the template as worn by a pod (the default image filled
    in, so a change of the operator's image also replaces waiting pods). Pure."""
    wire = template.wire()
    wire["image"] = template.image or default_image
    raw = json.dumps(wire, sort_keys=True, separators=(",", ":")).encode()
    return hashlib.sha256(raw).hexdigest()[:10]


def session_template(spec: AgentSessionSpec) -> WarmPodTemplate:
    """The pod-shaping fields of an AgentSession as a template."""
    return WarmPodTemplate(
        image=spec.image,
        image_pull_secrets=spec.image_pull_secrets,
        llm=spec.llm,
        placement=spec.placement,
        store=spec.store,
    )


def template_mismatch(
    spec: AgentSessionSpec, pool: WarmPodTemplate, default_image: str, default_deadline: int
) -> str:
    """Why a pod of ``pool`` cannot serve the session ``spec`` ("" when it can): the first field
    whose value differs (image with the default filled in), or a passivation deadline other than
    the operator's ``default_deadline`` (a warm pod's terminationGracePeriodSeconds is fixed at
    creation). Pure."""
    if spec.passivation_deadline_seconds(default_deadline) != default_deadline:
        return "spec.passivation.deadlineSeconds differs from the operator's default"
    mine = session_template(spec)
    if (mine.image or default_image) != (pool.image or default_image):
        return "spec.image differs"
    for field in ("image_pull_secrets", "llm", "placement", "store"):
        a, b = getattr(mine, field), getattr(pool, field)
        wa = a.wire() if hasattr(a, "wire") else [x.wire() for x in a] if a else None
        wb = b.wire() if hasattr(b, "wire") else [x.wire() for x in b] if b else None
        if (wa or None) != (wb or None):
            return f"spec.{field} differs"
    return ""
