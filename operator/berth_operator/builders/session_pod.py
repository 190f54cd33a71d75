"""Builders of the session Pod and its options.json (docs/architecture.md §5; the Berth security
contract).

Contract given to ``berth-session`` (read by session_runtime.pod.config / .options):

- env: BERTH_SESSION (<ns>/<name>), BERTH_SESSION_UID, BERTH_EPOCH, BERTH_RESUME_RUN_ID (when
  resuming), BERTH_STORE_DIR (/var/lib/berth/store; only ``<ns>/<name>`` below it is mounted),
  BERTH_WORKSPACE (/var/lib/berth/workspace[/<spec.workspace.subPath>]), BERTH_WORKSPACE_ROOT
  (/var/lib/berth/workspace: external tasks' workspaces are relative to it), BERTH_REDIS_URL,
  BERTH_OPTIONS_FILE (/etc/berth/session/options.json), BERTH_TERMINATION_LOG
  (= terminationMessagePath), BERTH_API_TOKEN_FILE (/var/run/berth/session/api-token),
  BERTH_TASK_KEY_FILE (/var/run/berth/session/task-key), BERTH_LLM_API_KEY_FILE
  (/var/run/berth/llm/api-key, when spec.llm.apiKeySecretRef is set), OPENAI_BASE_URL
  (spec.llm.baseURL, when set), POD_NAME, POD_NAMESPACE, POD_IP, NODE_NAME (downward API). No
  credential is ever an environment variable (tools inherit the environment).
- volumes: the shared PVC mounted twice with subPaths — ``workspaces/<ns>/<name>`` at
  /var/lib/berth/workspace and ``store/<ns>/<name>`` at /var/lib/berth/store/<ns>/<name> — so
  the pod sees no other session's files; the Secret ``<name>-berth`` read-only at
  /var/run/berth/session (mode 0440, group = fsGroup); the LLM key (only the referenced key, as
  file ``api-key``) at /var/run/berth/llm; options.json (key ``options.json`` of the same
  ``<name>-berth`` Secret: one object per session, one apiserver write less than a ConfigMap of
  its own) read-only at /etc/berth/session; an emptyDir at /tmp (the root filesystem is read-only);
  the CA file the session role's Redis URL names, at its path (builders/redis_ca.py).
- hardening: non-root uid/gid/fsGroup ``run_as_user``, RuntimeDefault seccomp, all
  capabilities dropped, no privilege escalation, read-only root, no ServiceAccount token,
  default resource limits when spec.placement.resources sets none.
- restartPolicy Never: the operator, not the kubelet, replaces a dead session pod, with a new
  epoch, so a restart is always a fenced resume.
"""

from __future__ import annotations

import copy
from typing import Any

from pydantic import ValidationError

from berth_contract import envvars, names
from berth_contract.options import (
    LaneOptions,
    LaneWorkerTarget,
    LlmOptions,
    PassivationOptions,
    PeerCallOptions,
    SessionPodOptions,
)
from berth_contract.options import SessionRef as SessionRefOptions
from berth_contract.state import HTTP_PORT
from berth_operator.api.agentsession import AgentSessionSpec
from berth_operator.api.common import SessionRef
from berth_operator.api.constants import (
    ANNOTATION_REPLACED_REASON,
    ANNOTATION_RESUME_RUN_ID,
    LABEL_EPOCH,
    LLM_CA_MOUNT_PATH,
    LLM_KEY_FILE,
    LLM_KEY_MOUNT_PATH,
    OPTIONS_KEY,
    OPTIONS_MOUNT_PATH,
    SECRET_API_TOKEN_KEY,
    SECRET_OPTIONS_KEY,
    SECRET_REDIS_URL_KEY,
    SECRET_TASK_KEY_KEY,
    SESSION_COMMAND,
    SESSION_CONTAINER,
    SESSION_SECRET_MOUNT_PATH,
    STORE_MOUNT_PATH,
    TERMINATION_MESSAGE_PATH,
    TOOL_SANDBOX_VALUES,
    WORKSPACE_MOUNT_PATH,
)
from berth_operator.builders.claim import claim_name
from berth_operator.builders.names import (
    owner_reference,
    pod_name,
    relative_workspace,
    session_labels,
    session_secret_name,
    store_subpath,
    workspace_root_subpath,
)
from berth_operator.builders.redis_ca import add_redis_ca
from berth_operator.builders.security import (
    SHARE_PROCESS_NAMESPACE,
    hardened_container_security,
    pod_security_context,
    pull_secrets,
    with_default_resources,
)
from berth_operator.builders.telemetry import telemetry_env
from berth_operator.errors import SpecError
from berth_operator.settings import OperatorSettings

SHUTDOWN_MARGIN_SECONDS = 15
"""terminationGracePeriodSeconds = passivation deadline + this margin (seconds)."""


def build_options(
    ref: SessionRef, spec: AgentSessionSpec, settings: OperatorSettings
) -> SessionPodOptions:
    """Render options.json (:class:`berth_contract.options.SessionPodOptions`) from the spec;
    external lanes get their LaneWorker's task stream. Raises SpecError when the spec holds a
    value the runtime would refuse (the contract's validation), naming the field."""
    lanes: dict[str, Any] = {}
    for lane, cfg in (spec.lanes or {}).items():
        target = None
        if cfg.lane_worker_ref is not None:
            name = cfg.lane_worker_ref.name
            target = LaneWorkerTarget(name=name, task_stream=names.task_stream(ref.namespace, name))
        lanes[lane] = LaneOptions(
            mode=cfg.mode,
            timeout_seconds=cfg.timeout_seconds,
            max_concurrency=cfg.max_concurrency,
            lane_worker=target,
        )
    deadline = spec.passivation_deadline_seconds(settings.passivation.deadline_seconds)
    document = {
        "session": SessionRefOptions(namespace=ref.namespace, name=ref.name, uid=ref.uid),
        "prompt": spec.prompt,
        "model": spec.model,
        "llm": llm_options(spec),
        "identity": spec.identity.wire() if spec.identity else {},
        "limits": spec.limits.wire() if spec.limits else {},
        "retention": spec.retention.wire() if spec.retention else {},
        "budget": spec.budget.wire() if spec.budget else {},
        "lanes": lanes,
        "result_stream": names.reply_stream(ref.namespace, ref.uid),
        "keep_alive": bool(spec.keep_alive),
        "passivation": PassivationOptions(deadline_seconds=deadline),
        "peer_calls": peer_call_options(spec, settings),
    }
    try:
        return SessionPodOptions.model_validate(document)
    except ValidationError as exc:
        raise SpecError(f"spec cannot be rendered into options.json: {exc}") from None


def peer_call_options(spec: AgentSessionSpec, settings: OperatorSettings) -> PeerCallOptions | None:
    """The ``call_peer`` tool's options when ``spec.peers`` is set and the front door runs with
    a URL sessions can reach; the wait is the spec's, capped by the operator's maximum."""
    gateway = settings.gateway
    if spec.peers is None or not gateway.enabled or not gateway.url:
        return None
    wait = min(spec.peers.max_wait_seconds or gateway.max_wait_seconds, gateway.max_wait_seconds)
    return PeerCallOptions(gateway_url=gateway.url, max_wait_seconds=wait)


def _field_env(name: str, path: str) -> dict[str, Any]:
    return {"name": name, "valueFrom": {"fieldRef": {"fieldPath": path}}}


def session_env(
    ref: SessionRef,
    spec: AgentSessionSpec,
    settings: OperatorSettings,
    *,
    epoch: int,
    resume_run_id: str | None,
) -> list[dict[str, Any]]:
    """Environment of the session container (see the module docstring)."""
    env: list[dict[str, Any]] = [
        {"name": envvars.SESSION, "value": ref.key},
        {"name": envvars.SESSION_UID, "value": ref.uid},
        {"name": envvars.EPOCH, "value": str(epoch)},
    ]
    if resume_run_id:
        env.append({"name": envvars.RESUME_RUN_ID, "value": resume_run_id})
    rel = relative_workspace(spec)
    env += [
        {"name": envvars.STORE_DIR, "value": STORE_MOUNT_PATH},
        {
            "name": envvars.WORKSPACE,
            "value": f"{WORKSPACE_MOUNT_PATH}/{rel}" if rel else WORKSPACE_MOUNT_PATH,
        },
        {"name": envvars.WORKSPACE_ROOT, "value": WORKSPACE_MOUNT_PATH},
        {
            "name": envvars.REDIS_URL,
            "valueFrom": {
                "secretKeyRef": {"name": session_secret_name(ref.name), "key": SECRET_REDIS_URL_KEY}
            },
        },
        {"name": envvars.OPTIONS_FILE, "value": f"{OPTIONS_MOUNT_PATH}/{OPTIONS_KEY}"},
        {"name": envvars.TERMINATION_LOG, "value": TERMINATION_MESSAGE_PATH},
        {"name": envvars.HTTP_PORT, "value": str(HTTP_PORT)},
        {
            "name": envvars.API_TOKEN_FILE,
            "value": f"{SESSION_SECRET_MOUNT_PATH}/{SECRET_API_TOKEN_KEY}",
        },
        {
            "name": envvars.TASK_KEY_FILE,
            "value": f"{SESSION_SECRET_MOUNT_PATH}/{SECRET_TASK_KEY_KEY}",
        },
        _field_env(envvars.POD_NAME, "metadata.name"),
        _field_env(envvars.POD_NAMESPACE, "metadata.namespace"),
        _field_env(envvars.POD_IP, "status.podIP"),
        _field_env(envvars.NODE_NAME, "spec.nodeName"),
        tool_sandbox_env(spec.tool_sandbox or settings.pods.default_tool_sandbox),
    ]
    if spec.llm is not None and spec.llm.api_key_secret_ref is not None:
        env.append(
            {"name": envvars.LLM_API_KEY_FILE, "value": f"{LLM_KEY_MOUNT_PATH}/{LLM_KEY_FILE}"}
        )
    if spec.llm is not None and spec.llm.base_url:
        env.append({"name": "OPENAI_BASE_URL", "value": spec.llm.base_url})
    return env + budget_env(settings) + telemetry_env()


def tool_sandbox_env(mode: str) -> dict[str, Any]:
    """``BERTH_TOOL_SANDBOX`` for ``mode`` (``Required`` | ``BestEffort``, as ``spec.toolSandbox``
    spells it): what the pod's tool processes do without Landlock (docs/security.md)."""
    return {"name": envvars.TOOL_SANDBOX, "value": TOOL_SANDBOX_VALUES[mode]}


def budget_env(settings: OperatorSettings) -> list[dict[str, Any]]:
    """Where the session's guard finds the budget service (BudgetPolicies); none when off."""
    budget = settings.budget
    if not budget.enabled or not budget.url:
        return []
    return [
        {"name": envvars.BUDGET_URL, "value": budget.url},
        {"name": envvars.BUDGET_TIMEOUT_MS, "value": str(budget.timeout_ms)},
        {"name": envvars.BUDGET_FAILURE_POLICY, "value": budget.failure_policy},
    ]


LLM_MAX_RETRIES = 2
"""spec.llm.maxRetries when unset: the openai client's own default."""

SECRET_FILE_MODE = 0o440
"""defaultMode of the Secret volumes: owner and group (fsGroup) read, nobody else."""


def llm_options(spec: AgentSessionSpec) -> LlmOptions:
    """options.json ``llm`` from ``spec.llm`` (the key itself never: it is a mounted file)."""
    llm = spec.llm
    if llm is None:
        return LlmOptions(max_retries=LLM_MAX_RETRIES)
    return LlmOptions(
        base_url=llm.base_url,
        timeout_seconds=llm.timeout_seconds,
        max_retries=LLM_MAX_RETRIES if llm.max_retries is None else llm.max_retries,
        organization=llm.organization,
        project=llm.project,
        headers=dict(llm.headers) if llm.headers else None,
        ca_file=f"{LLM_CA_MOUNT_PATH}/ca.crt" if llm.ca_bundle is not None else None,
    )


def session_mounts(ref: SessionRef, spec: AgentSessionSpec) -> list[dict[str, Any]]:
    """volumeMounts of the session container (see the module docstring)."""
    mounts: list[dict[str, Any]] = [
        {
            "name": "shared",
            "mountPath": WORKSPACE_MOUNT_PATH,
            "subPath": workspace_root_subpath(ref),
        },
        {
            "name": "shared",
            "mountPath": f"{STORE_MOUNT_PATH}/{ref.namespace}/{ref.name}",
            "subPath": store_subpath(ref),
        },
        {"name": "session-secret", "mountPath": SESSION_SECRET_MOUNT_PATH, "readOnly": True},
        {"name": "options", "mountPath": OPTIONS_MOUNT_PATH, "readOnly": True},
        {"name": "tmp", "mountPath": "/tmp"},
    ]
    if spec.llm is not None and spec.llm.api_key_secret_ref is not None:
        mounts.append({"name": "llm-key", "mountPath": LLM_KEY_MOUNT_PATH, "readOnly": True})
    if spec.llm is not None and spec.llm.ca_bundle is not None:
        mounts.append({"name": "llm-ca", "mountPath": LLM_CA_MOUNT_PATH, "readOnly": True})
    return mounts


def session_volumes(ref: SessionRef, spec: AgentSessionSpec, claim: str) -> list[dict[str, Any]]:
    """volumes of the session pod (see the module docstring)."""
    volumes: list[dict[str, Any]] = [
        {"name": "shared", "persistentVolumeClaim": {"claimName": claim}},
        {
            "name": "session-secret",
            "secret": {
                "secretName": session_secret_name(ref.name),
                "defaultMode": SECRET_FILE_MODE,
            },
        },
        {
            "name": "options",
            "secret": {
                "secretName": session_secret_name(ref.name),
                "items": [{"key": SECRET_OPTIONS_KEY, "path": OPTIONS_KEY}],
                "defaultMode": SECRET_FILE_MODE,
            },
        },
        {"name": "tmp", "emptyDir": {"sizeLimit": "1Gi"}},
    ]
    key_ref = spec.llm.api_key_secret_ref if spec.llm is not None else None
    if key_ref is not None:
        volumes.append(
            {
                "name": "llm-key",
                "secret": {
                    "secretName": key_ref.name,
                    "items": [{"key": key_ref.key, "path": LLM_KEY_FILE}],
                    "defaultMode": SECRET_FILE_MODE,
                },
            }
        )
    ca = spec.llm.ca_bundle if spec.llm is not None else None
    if ca is not None:
        volumes.append(
            {
                "name": "llm-ca",
                "configMap": {"name": ca.name, "items": [{"key": ca.key, "path": "ca.crt"}]},
            }
        )
    return volumes


def session_container(
    ref: SessionRef,
    spec: AgentSessionSpec,
    settings: OperatorSettings,
    epoch: int,
    resume_run_id: str | None,
) -> dict[str, Any]:
    """The ``session`` container of a session pod: :func:`runtime_container` with the session's
    env and mounts."""
    env = session_env(ref, spec, settings, epoch=epoch, resume_run_id=resume_run_id)
    return runtime_container(spec, settings, env, session_mounts(ref, spec))


def runtime_container(
    spec: AgentSessionSpec,
    settings: OperatorSettings,
    env: list[dict[str, Any]],
    mounts: list[dict[str, Any]],
) -> dict[str, Any]:
    """The ``session`` container of session and warm pods alike: ``berth-session`` with ``env``
    and ``mounts``, its port, probes, termination message, hardened securityContext and
    resources (the spec's, else the operator's defaults). A warm pod's differs only in the two
    lists, so the two kinds of pod cannot drift apart."""
    placement = spec.placement
    user_resources = (
        placement.resources.wire() if placement is not None and placement.resources else None
    )
    return {
        "name": SESSION_CONTAINER,
        "image": spec.image or settings.images.session,
        "imagePullPolicy": settings.images.pull_policy,
        "command": [SESSION_COMMAND],
        "env": env,
        "ports": [{"name": "http", "containerPort": HTTP_PORT, "protocol": "TCP"}],
        # 1 s: the first probe usually comes before the process serves, and the next one
        # decides when the pod counts as Ready (a warm pod, a Service endpoint).
        "readinessProbe": {
            "httpGet": {"path": "/readyz", "port": "http"},
            "periodSeconds": 1,
            "failureThreshold": 3,
        },
        "livenessProbe": {
            "httpGet": {"path": "/healthz", "port": "http"},
            "periodSeconds": 10,
            "failureThreshold": 6,
        },
        "volumeMounts": mounts,
        "terminationMessagePath": TERMINATION_MESSAGE_PATH,
        "terminationMessagePolicy": "File",
        "securityContext": hardened_container_security(),
        "resources": with_default_resources(user_resources, settings),
    }


def runtime_pod_spec(
    spec: AgentSessionSpec,
    settings: OperatorSettings,
    container: dict[str, Any],
    volumes: list[dict[str, Any]],
) -> dict[str, Any]:
    """The pod spec around ``container`` for session and warm pods alike: never restarted, no
    service account token or service links, the grace period the passivation deadline needs,
    the pod securityContext, the Redis CA, pull secrets, service account, runtime class and
    ``spec.placement``."""
    grace = spec.passivation_deadline_seconds(settings.passivation.deadline_seconds)
    pod_spec: dict[str, Any] = {
        "restartPolicy": "Never",
        "automountServiceAccountToken": False,
        "enableServiceLinks": False,
        "shareProcessNamespace": SHARE_PROCESS_NAMESPACE,
        "terminationGracePeriodSeconds": grace + SHUTDOWN_MARGIN_SECONDS,
        "securityContext": pod_security_context(settings.pods.run_as_user),
        "containers": [container],
        "volumes": volumes,
    }
    add_redis_ca(pod_spec, container, settings.redis.for_sessions)  # the CA its URL names
    pull = pull_secrets(spec.image_pull_secrets, settings)
    if pull:
        pod_spec["imagePullSecrets"] = pull
    if settings.pods.session_service_account:
        pod_spec["serviceAccountName"] = settings.pods.session_service_account
    if settings.pods.session_runtime_class:
        pod_spec["runtimeClassName"] = settings.pods.session_runtime_class
    pod_spec.update(placement_fields(spec))
    return pod_spec


def placement_fields(spec: AgentSessionSpec) -> dict[str, Any]:
    """The pod spec fields of ``spec.placement``: nodeSelector, affinity, tolerations,
    priorityClassName, topologySpreadConstraints (only those set)."""
    placement = spec.placement
    if placement is None:
        return {}
    out: dict[str, Any] = {}
    if placement.node_selector:
        out["nodeSelector"] = dict(placement.node_selector)
    if placement.affinity:
        out["affinity"] = placement.affinity
    if placement.tolerations:
        out["tolerations"] = [t.wire() for t in placement.tolerations]
    if placement.priority_class_name:
        out["priorityClassName"] = placement.priority_class_name
    if placement.topology_spread_constraints:
        out["topologySpreadConstraints"] = placement.topology_spread_constraints
    return out


def build_session_pod(
    ref: SessionRef,
    spec: AgentSessionSpec,
    settings: OperatorSettings,
    *,
    epoch: int,
    resume_run_id: str | None,
    reason: str,
    avoid_nodes: tuple[str, ...] = (),
    traceparent: str = "",
) -> dict[str, Any]:
    """The session Pod of ``epoch`` (name ``<session>-e<epoch>``), owned by the AgentSession.
    ``traceparent``: the placement's span, as ``TRACEPARENT`` in the pod's environment.

    ``reason`` (a PlacementReason) and ``resume_run_id`` are recorded as annotations so the
    lineage can say why this pod exists and what it resumed. ``avoid_nodes`` (the node a
    passivation moved the session away from) becomes a required node affinity ``metadata.name
    NotIn`` ANDed into every term of spec.placement.affinity (see ``with_avoided_nodes``).
    """
    labels = session_labels(ref, spec) | {LABEL_EPOCH: str(epoch)}
    container = session_container(ref, spec, settings, epoch, resume_run_id)
    if traceparent:
        container["env"].append({"name": envvars.TRACEPARENT, "value": traceparent})
    volumes = session_volumes(ref, spec, claim_name(spec, settings))
    pod_spec = runtime_pod_spec(spec, settings, container, volumes)
    if avoid_nodes:
        pod_spec["affinity"] = with_avoided_nodes(pod_spec.get("affinity"), avoid_nodes)
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": pod_name(ref.name, epoch),
            "namespace": ref.namespace,
            "labels": labels,
            "annotations": {
                ANNOTATION_REPLACED_REASON: reason,
                ANNOTATION_RESUME_RUN_ID: resume_run_id or "",
                "prometheus.io/scrape": "true",
                "prometheus.io/port": str(HTTP_PORT),
            },
            "ownerReferences": [owner_reference(ref)],
        },
        "spec": pod_spec,
    }


def with_avoided_nodes(affinity: dict[str, Any] | None, nodes: tuple[str, ...]) -> dict[str, Any]:
    """``affinity`` (not modified) plus ``metadata.name NotIn nodes`` in every required term.

    nodeSelectorTerms are ORed and the expressions of one term ANDed (core/v1 NodeSelector), so
    the exclusion is appended to each existing term; with no required terms one term is created.
    ``matchFields`` on ``metadata.name`` names the node exactly (no reliance on hostname labels).
    """
    out = copy.deepcopy(affinity) if affinity else {}
    node_aff = out.setdefault("nodeAffinity", {})
    required = node_aff.setdefault("requiredDuringSchedulingIgnoredDuringExecution", {})
    terms = required.get("nodeSelectorTerms") or [{}]
    exclusion = {"key": "metadata.name", "operator": "NotIn", "values": sorted(set(nodes))}
    required["nodeSelectorTerms"] = [
        {**term, "matchFields": [*(term.get("matchFields") or []), exclusion]} for term in terms
    ]
    return out
