"""Builders of a SessionWarmPool's warm pods, of their adoption, and of the pool's Secret.

A warm pod is a session pod without a session (``berth-session`` in warm mode, see
``session_runtime.pod.warm``): the template's image, resources, placement and LLM key; the
namespace's ``workspaces/<ns>`` and ``store/<ns>`` of the shared claim (not one session's: a pod's
volumes are fixed at creation); the pool's adoption token; the same hardening as a created pod.

Adoption turns it into the session's pod of an epoch, exactly as ``build_session_pod`` labels,
annotates and owns a created pod: :func:`adoption_patch` is one merge patch carrying the pod's
``uid`` (a precondition: it never lands on another pod of that name), and :func:`adopt_body` is
what the pod is told over its authenticated ``POST /v1/adopt`` (the pod accepts one session only,
so of two adopters racing for one pod, one gets 409).
"""

from __future__ import annotations

import base64
import secrets
from typing import Any

from berth_contract import envvars
from berth_contract.options import SessionPodOptions
from berth_contract.state import HTTP_PORT
from berth_operator.api.agentsession import AgentSessionSpec
from berth_operator.api.common import SessionRef
from berth_operator.api.constants import (
    ANNOTATION_REPLACED_REASON,
    ANNOTATION_RESUME_RUN_ID,
    API_VERSION,
    COMPONENT_SESSION,
    LABEL_COMPONENT,
    LABEL_EPOCH,
    LABEL_MANAGED_BY,
    LABEL_NAME,
    LLM_KEY_FILE,
    LLM_KEY_MOUNT_PATH,
    MANAGED_BY,
    SECRET_API_TOKEN_KEY,
    SECRET_REDIS_URL_KEY,
    SECRET_TASK_KEY_KEY,
    STORE_MOUNT_PATH,
    STORE_SUBDIR,
    TERMINATION_MESSAGE_PATH,
    WORKSPACES_MOUNT_PATH,
    WORKSPACES_SUBDIR,
)
from berth_operator.api.sessionwarmpool import (
    ANNOTATION_ADOPTED_FROM,
    LABEL_WARM_POOL,
    LABEL_WARM_TEMPLATE,
    WARM_SECRET_SUFFIX,
    WARM_TOKEN_KEY,
    WARM_TOKEN_MOUNT_PATH,
    WARMPOOL_KIND,
    WarmPodTemplate,
)
from berth_operator.builders.names import owner_reference, relative_workspace, session_labels
from berth_operator.builders.session_pod import (
    SECRET_FILE_MODE,
    runtime_container,
    runtime_pod_spec,
    session_volumes,
    tool_sandbox_env,
)
from berth_operator.builders.telemetry import telemetry_env
from berth_operator.settings import OperatorSettings


def warm_secret_name(pool: str) -> str:
    """The pool's Secret holding the adoption token: ``<pool>-warm``."""
    return f"{pool}{WARM_SECRET_SUFFIX}"


def warm_selector(pool: str) -> dict[str, str]:
    """Labels selecting the waiting pods of ``pool``."""
    return {LABEL_WARM_POOL: pool}


def warm_pod_name(pool: str) -> str:
    """``<pool>-w-<10 random hex>`` (pool names are cut so the name fits 63 characters)."""
    return f"{pool[:48]}-w-{secrets.token_hex(5)}"


def _pool_owner(namespace: str, pool: str, uid: str) -> dict[str, Any]:
    return {
        "apiVersion": API_VERSION,
        "kind": WARMPOOL_KIND,
        "name": pool,
        "uid": uid,
        "controller": True,
        "blockOwnerDeletion": True,
    }


def build_warm_secret(namespace: str, pool: str, uid: str) -> dict[str, Any]:
    """The Secret ``<pool>-warm`` with a fresh 32-byte adoption token (owned by the pool)."""
    token = secrets.token_urlsafe(32)
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "type": "Opaque",
        "metadata": {
            "name": warm_secret_name(pool),
            "namespace": namespace,
            "labels": {LABEL_NAME: "berth", LABEL_MANAGED_BY: MANAGED_BY, LABEL_WARM_POOL: pool},
            "ownerReferences": [_pool_owner(namespace, pool, uid)],
        },
        "data": {WARM_TOKEN_KEY: base64.b64encode(token.encode()).decode()},
    }


def _as_spec(template: WarmPodTemplate) -> AgentSessionSpec:
    """The template as the AgentSessionSpec fields the session-pod builders read (no prompt)."""
    return AgentSessionSpec.model_construct(
        prompt="",
        model="",
        image=template.image,
        image_pull_secrets=template.image_pull_secrets,
        llm=template.llm,
        placement=template.placement,
        store=template.store,
    )


def _field_env(name: str, path: str) -> dict[str, Any]:
    return {"name": name, "valueFrom": {"fieldRef": {"fieldPath": path}}}


def build_warm_pod(
    namespace: str,
    pool: str,
    pool_uid: str,
    template: WarmPodTemplate,
    template_hash: str,
    settings: OperatorSettings,
) -> dict[str, Any]:
    """One warm pod of ``pool`` (module docstring), owned by the pool; labels
    ``berth.dev/warm-pool`` and ``berth.dev/warm-template`` (= ``template_hash``)."""
    spec = _as_spec(template)
    claim = (template.store.claim_name if template.store else None) or settings.claims.default_name
    env: list[dict[str, Any]] = [
        {"name": envvars.WARM_POOL, "value": pool},
        {"name": envvars.WARM_TOKEN_FILE, "value": f"{WARM_TOKEN_MOUNT_PATH}/{WARM_TOKEN_KEY}"},
        {"name": envvars.STORE_DIR, "value": STORE_MOUNT_PATH},
        {"name": envvars.WORKSPACES_DIR, "value": WORKSPACES_MOUNT_PATH},
        {"name": envvars.TERMINATION_LOG, "value": TERMINATION_MESSAGE_PATH},
        {"name": envvars.HTTP_PORT, "value": str(HTTP_PORT)},
        _field_env(envvars.POD_NAME, "metadata.name"),
        _field_env(envvars.POD_NAMESPACE, "metadata.namespace"),
        _field_env(envvars.POD_IP, "status.podIP"),
        _field_env(envvars.NODE_NAME, "spec.nodeName"),
        tool_sandbox_env(settings.pods.default_tool_sandbox),
        *telemetry_env(),
    ]
    llm = template.llm
    if llm is not None and llm.api_key_secret_ref is not None:
        env.append(
            {"name": envvars.LLM_API_KEY_FILE, "value": f"{LLM_KEY_MOUNT_PATH}/{LLM_KEY_FILE}"}
        )
    if llm is not None and llm.base_url:
        env.append({"name": "OPENAI_BASE_URL", "value": llm.base_url})
    mounts: list[dict[str, Any]] = [
        {
            "name": "shared",
            "mountPath": WORKSPACES_MOUNT_PATH,
            "subPath": f"{WORKSPACES_SUBDIR}/{namespace}",
        },
        {
            "name": "shared",
            "mountPath": f"{STORE_MOUNT_PATH}/{namespace}",
            "subPath": f"{STORE_SUBDIR}/{namespace}",
        },
        {"name": "warm-token", "mountPath": WARM_TOKEN_MOUNT_PATH, "readOnly": True},
        {"name": "tmp", "mountPath": "/tmp"},
    ]
    # The LLM key and CA volumes are the session builder's (same names, same files).
    volumes = [
        v
        for v in session_volumes(SessionRef(namespace, "-", "-"), spec, claim)
        if v["name"] in ("shared", "tmp", "llm-key", "llm-ca")
    ]
    volumes.append(
        {
            "name": "warm-token",
            "secret": {"secretName": warm_secret_name(pool), "defaultMode": SECRET_FILE_MODE},
        }
    )
    names = {v["name"] for v in volumes}
    if "llm-key" in names:
        mounts.append({"name": "llm-key", "mountPath": LLM_KEY_MOUNT_PATH, "readOnly": True})
    if "llm-ca" in names:
        mounts.append({"name": "llm-ca", "mountPath": "/var/run/berth/llm-ca", "readOnly": True})
    container = runtime_container(spec, settings, env, mounts)
    pod_spec = runtime_pod_spec(spec, settings, container, volumes)
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": warm_pod_name(pool),
            "namespace": namespace,
            "labels": {
                LABEL_NAME: "berth",
                # "session", as created pods: the chart's session NetworkPolicy applies to warm
                # pods too; no session index sees them (they have no session-uid label).
                LABEL_COMPONENT: COMPONENT_SESSION,
                LABEL_MANAGED_BY: MANAGED_BY,
                LABEL_WARM_POOL: pool,
                LABEL_WARM_TEMPLATE: template_hash,
            },
            "annotations": {
                "prometheus.io/scrape": "true",
                "prometheus.io/port": str(HTTP_PORT),
            },
            "ownerReferences": [_pool_owner(namespace, pool, pool_uid)],
        },
        "spec": pod_spec,
    }


def adoption_patch(
    ref: SessionRef,
    spec: AgentSessionSpec,
    pool: str,
    pod_uid: str,
    *,
    epoch: int,
    reason: str,
    resume_run_id: str | None,
) -> dict[str, Any]:
    """Merge patch making a warm pod the session's pod of ``epoch``: the labels, annotations and
    owner reference ``build_session_pod`` gives a created pod, the pool label removed (the pool
    stops counting it), with the pod's ``uid`` as precondition (Conflict for another pod)."""
    labels: dict[str, str | None] = {
        **session_labels(ref, spec),
        LABEL_EPOCH: str(epoch),
        LABEL_COMPONENT: COMPONENT_SESSION,
        LABEL_WARM_POOL: None,
    }
    return {
        "metadata": {
            "uid": pod_uid,
            "labels": labels,
            "annotations": {
                ANNOTATION_REPLACED_REASON: reason,
                ANNOTATION_RESUME_RUN_ID: resume_run_id or "",
                ANNOTATION_ADOPTED_FROM: pool,
            },
            "ownerReferences": [owner_reference(ref)],
        }
    }


def adopt_body(
    ref: SessionRef,
    spec: AgentSessionSpec,
    options: SessionPodOptions,
    secret_data: dict[str, bytes],
    *,
    epoch: int,
    resume_run_id: str | None,
) -> dict[str, Any]:
    """Body of ``POST /v1/adopt`` (``session_runtime.pod.warm.AdoptRequest``): the session, the
    epoch, the resume target, the workspace subPath, options.json and the values of the
    session's ``<name>-berth`` Secret (``secret_data``: decoded, as ``session_data`` builds it).
    Raises SpecError for an unsafe spec.workspace.subPath."""
    task_key = secret_data.get(SECRET_TASK_KEY_KEY)
    redis_url = secret_data.get(SECRET_REDIS_URL_KEY)
    return {
        "session": {"namespace": ref.namespace, "name": ref.name, "uid": ref.uid},
        "epoch": epoch,
        "resumeRunId": resume_run_id,
        "workspaceSubPath": relative_workspace(spec),
        "options": options.wire(),
        "apiToken": secret_data[SECRET_API_TOKEN_KEY].decode(),
        "taskKey": base64.b64encode(task_key).decode() if task_key else None,
        "redisUrl": redis_url.decode() if redis_url else None,
    }
