"""Builder of the worker Deployment of a LaneWorker (docs/architecture.md §4, §7).

Pure: takes the LaneWorker's identity, its parsed spec and the operator settings and returns the
``apps/v1`` Deployment as a dict. Called by ``berth_operator.handlers.laneworker`` on create,
update and resume of a LaneWorker.

Contract given to ``berth-worker`` (read by
``session_runtime.worker.settings.WorkerSettings.from_env``):

- command ``berth-worker``; env ``BERTH_REDIS_URL`` (operator setting ``redis_url``),
  ``BERTH_NAMESPACE`` (downward API), ``BERTH_LANEWORKER`` (the LaneWorker name, which names the
  task stream ``berth:<ns>:lw:{<name>}:tasks``), ``POD_NAME`` (the consumer name in group
  ``workers``) and ``POD_IP`` (downward API), ``BERTH_WORKER_CONCURRENCY`` (``spec.concurrency``),
  ``BERTH_WORKSPACES_ROOT`` (``/var/lib/berth/workspaces``), ``BERTH_TASK_MASTER_KEY_FILE``
  (``/var/run/berth/task-key/master``), ``BERTH_TASK_TIMEOUT_SECONDS``
  (``spec.taskTimeoutSeconds``), ``BERTH_METRICS_PORT`` (:data:`METRICS_PORT`);
- only the ``workspaces`` directory of the shared RWX claim (``spec.store.claimName`` or the
  operator's ``default_claim_name``; volumeMount subPath ``workspaces``) at
  ``/var/lib/berth/workspaces`` — never the store; the worker builds each task's workspace as
  ``<root>/<its namespace>/<task session>/<relative path>``; the namespace's ``berth-task-key``
  Secret read-only at ``/var/run/berth/task-key`` (mode 0440); an ``emptyDir`` at ``/tmp``
  because the root filesystem is read-only;
- hardened (:func:`berth_operator.builders.security.hardened_container_security`): non-root
  (the operator's ``run_as_user``), no privilege escalation, not privileged, all capabilities
  dropped, RuntimeDefault seccomp, read-only root; ``template.securityContext`` can only add a
  non-root ``runAsUser``/``runAsGroup``, ``seLinuxOptions`` or ``appArmorProfile``; no
  ServiceAccount token (workers never call the Kubernetes API, §2); default resource limits when
  ``template.resources`` sets none;
- ``terminationGracePeriodSeconds`` = ``taskTimeoutSeconds`` + :data:`DRAIN_MARGIN_SECONDS`: on
  SIGTERM a worker takes no new task and finishes those it holds, each bounded by the task
  timeout, so a scale-down never kills a running task;
- readiness: ``GET /metrics`` on the worker's metrics port (the server starts with the worker);
  Prometheus scrape annotations (``prometheus.io/scrape``, ``prometheus.io/port``) on the pods.

The pod template carries a hash of itself in :data:`ANNOTATION_TEMPLATE_HASH` on the Deployment,
so the handler replaces the template only when the spec changed (the apiserver adds defaults, so
comparing the live template with the built one would always differ).
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass
from typing import Any, Final

from berth_contract import envvars
from berth_operator.api.constants import (
    API_VERSION,
    LABEL_COMPONENT,
    LABEL_LANEWORKER,
    LABEL_MANAGED_BY,
    LABEL_NAME,
    LANEWORKER_KIND,
    MANAGED_BY,
    TASK_KEY_MOUNT_PATH,
    TASK_MASTER_KEY,
    TASK_MASTER_SECRET,
    WORKER_REDIS_SECRET,
    WORKER_REDIS_URL_KEY,
    WORKSPACES_MOUNT_PATH,
    WORKSPACES_SUBDIR,
)
from berth_operator.api.laneworker import LaneWorkerSpec
from berth_operator.builders.claim import claim_name
from berth_operator.builders.redis_ca import add_redis_ca
from berth_operator.builders.security import (
    SHARE_PROCESS_NAMESPACE,
    hardened_container_security,
    pod_security_context,
    pull_secrets,
    with_default_resources,
)
from berth_operator.builders.session_pod import tool_sandbox_env
from berth_operator.builders.telemetry import telemetry_env
from berth_operator.errors import SpecError
from berth_operator.settings import OperatorSettings

WORKER_COMMAND: Final = "berth-worker"
WORKER_CONTAINER: Final = "worker"
COMPONENT_LANEWORKER: Final = "laneworker"
METRICS_PORT: Final = 9090
"""Port of the worker's Prometheus endpoint (``BERTH_METRICS_PORT``)."""
PROBE_TIMEOUT_SECONDS: Final = 5
"""The worker's readiness probe's timeout: the probe's request waits in the worker's metrics
socket while the worker starts (``session_runtime.listen``) and is answered once it can take
tasks, so it must outlast a start on a busy node rather than fail and wait for the next period."""
DRAIN_MARGIN_SECONDS: Final = 15
"""Added to ``taskTimeoutSeconds`` for the termination grace: reply, ack and exit (seconds)."""
ANNOTATION_TEMPLATE_HASH: Final = "berth.dev/template-hash"
"""On the Deployment: sha256 (first 16 hex digits) of the pod template the operator built."""
TMP_MOUNT_PATH: Final = "/tmp"

_LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")


@dataclass(frozen=True, slots=True)
class LaneWorkerRef:
    """Identity of one LaneWorker object."""

    namespace: str
    name: str
    uid: str


def deployment_name(name: str) -> str:
    """Name of the worker Deployment: ``<laneworker>-workers``."""
    return f"{name}-workers"


def selector_labels(name: str) -> dict[str, str]:
    """Labels selecting the pods of LaneWorker ``name`` (Deployment selector, ``status.selector``).

    Raises SpecError when ``name`` is not a valid label value (longer than 63 characters).
    """
    if len(name) > 63 or not _LABEL_VALUE.match(name):
        raise SpecError(f"LaneWorker name {name!r} must be a valid label value (<= 63 characters)")
    return {
        LABEL_NAME: "berth",
        LABEL_COMPONENT: COMPONENT_LANEWORKER,
        LABEL_LANEWORKER: name,
    }


def selector_string(name: str) -> str:
    """``status.selector`` for ``/scale``: the selector labels as ``k=v,k=v`` (sorted)."""
    return ",".join(f"{k}={v}" for k, v in sorted(selector_labels(name).items()))


def termination_grace_seconds(spec: LaneWorkerSpec) -> int:
    """``taskTimeoutSeconds`` + :data:`DRAIN_MARGIN_SECONDS` (seconds)."""
    return spec.task_timeout_seconds + DRAIN_MARGIN_SECONDS


def owner_reference(ref: LaneWorkerRef) -> dict[str, Any]:
    """Controller owner reference to the LaneWorker (the Deployment is garbage-collected)."""
    return {
        "apiVersion": API_VERSION,
        "kind": LANEWORKER_KIND,
        "name": ref.name,
        "uid": ref.uid,
        "controller": True,
        "blockOwnerDeletion": True,
    }


def _field_env(name: str, path: str) -> dict[str, Any]:
    return {"name": name, "valueFrom": {"fieldRef": {"fieldPath": path}}}


def worker_env(
    ref: LaneWorkerRef, spec: LaneWorkerSpec, settings: OperatorSettings
) -> list[dict[str, Any]]:
    """The worker container's environment (``berth-worker`` reads only env): its Redis URL from
    the namespace's worker Redis Secret, identity from the downward API (the node's name for
    its Landlock refusal), the pool's concurrency and task timeout, the mounted task master key
    and workspaces, and the operator's tool sandbox mode."""
    return [
        {
            "name": envvars.REDIS_URL,
            "valueFrom": {
                "secretKeyRef": {"name": WORKER_REDIS_SECRET, "key": WORKER_REDIS_URL_KEY}
            },
        },
        _field_env(envvars.NAMESPACE, "metadata.namespace"),
        {"name": envvars.LANEWORKER, "value": ref.name},
        _field_env(envvars.POD_NAME, "metadata.name"),
        _field_env(envvars.POD_IP, "status.podIP"),
        _field_env(envvars.NODE_NAME, "spec.nodeName"),
        tool_sandbox_env(settings.pods.default_tool_sandbox),
        {"name": envvars.WORKER_CONCURRENCY, "value": str(spec.concurrency)},
        {"name": envvars.WORKSPACES_ROOT, "value": WORKSPACES_MOUNT_PATH},
        {
            "name": envvars.TASK_MASTER_KEY_FILE,
            "value": f"{TASK_KEY_MOUNT_PATH}/{TASK_MASTER_KEY}",
        },
        {"name": envvars.TASK_TIMEOUT_SECONDS, "value": str(spec.task_timeout_seconds)},
        {"name": envvars.METRICS_PORT, "value": str(METRICS_PORT)},
        *telemetry_env(),
    ]


def worker_volumes(claim: str) -> list[dict[str, Any]]:
    """The shared claim (only its ``workspaces`` directory is mounted), the namespace's task
    master key (read-only, mode 0440) and a scratch ``/tmp``."""
    return [
        {"name": "shared", "persistentVolumeClaim": {"claimName": claim}},
        {
            "name": "task-key",
            "secret": {
                "secretName": TASK_MASTER_SECRET,
                "items": [{"key": TASK_MASTER_KEY, "path": TASK_MASTER_KEY}],
                "defaultMode": 0o440,
            },
        },
        {"name": "tmp", "emptyDir": {}},
    ]


def build_pod_template(
    ref: LaneWorkerRef, spec: LaneWorkerSpec, settings: OperatorSettings
) -> dict[str, Any]:
    """The worker pod template (``spec.template`` of the Deployment). Raises SpecError."""
    labels = {**selector_labels(ref.name), LABEL_MANAGED_BY: MANAGED_BY}
    claim = claim_name(spec, settings)
    uid = settings.pods.run_as_user
    template = spec.template
    security = hardened_container_security(template.security_context if template else None)
    container: dict[str, Any] = {
        "name": WORKER_CONTAINER,
        "image": spec.image or settings.images.session,
        "imagePullPolicy": settings.images.pull_policy,
        "command": [WORKER_COMMAND],
        "env": worker_env(ref, spec, settings),
        "ports": [{"name": "metrics", "containerPort": METRICS_PORT, "protocol": "TCP"}],
        "readinessProbe": {
            "httpGet": {"path": "/metrics", "port": "metrics"},
            "periodSeconds": 1,  # a scale-up counts once workers are Ready: probe often
            # A probe sent while the worker still starts waits in its metrics socket (bound
            # before the imports) for the answer, given once the worker joined its group: long
            # enough for a start on a busy node, so that no probe period is lost to it.
            "timeoutSeconds": PROBE_TIMEOUT_SECONDS,
            "failureThreshold": 3,
        },
        "volumeMounts": [
            {"name": "shared", "mountPath": WORKSPACES_MOUNT_PATH, "subPath": WORKSPACES_SUBDIR},
            {"name": "task-key", "mountPath": TASK_KEY_MOUNT_PATH, "readOnly": True},
            {"name": "tmp", "mountPath": TMP_MOUNT_PATH},
        ],
        "securityContext": security,
    }
    user_resources = template.resources.wire() if template and template.resources else None
    container["resources"] = with_default_resources(user_resources, settings)
    pod_spec: dict[str, Any] = {
        "automountServiceAccountToken": False,
        "shareProcessNamespace": SHARE_PROCESS_NAMESPACE,
        "terminationGracePeriodSeconds": termination_grace_seconds(spec),
        "securityContext": pod_security_context(uid),
        "containers": [container],
        "volumes": worker_volumes(claim),
    }
    add_redis_ca(pod_spec, container, settings.redis.for_workers)  # the CA its URL names
    pull = pull_secrets(spec.image_pull_secrets, settings)
    if pull:
        pod_spec["imagePullSecrets"] = pull
    if settings.pods.worker_runtime_class:
        pod_spec["runtimeClassName"] = settings.pods.worker_runtime_class
    if template is not None and template.node_selector:
        pod_spec["nodeSelector"] = dict(template.node_selector)
    if template is not None and template.tolerations:
        pod_spec["tolerations"] = [t.wire() for t in template.tolerations]
    return {
        "metadata": {
            "labels": labels,
            "annotations": {
                "prometheus.io/scrape": "true",
                "prometheus.io/port": str(METRICS_PORT),
            },
        },
        "spec": pod_spec,
    }


def template_hash(template: dict[str, Any]) -> str:
    """First 16 hex digits of the sha256 of the template's canonical JSON."""
    canonical = json.dumps(template, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).hexdigest()[:16]


def build_deployment(
    ref: LaneWorkerRef, spec: LaneWorkerSpec, settings: OperatorSettings, *, replicas: int
) -> dict[str, Any]:
    """The ``apps/v1`` Deployment of the pool with ``replicas`` pods. Raises SpecError.

    Rolling updates never take a ready worker away before its replacement is ready
    (``maxUnavailable: 0``), so a template change does not shrink a busy pool.
    """
    template = build_pod_template(ref, spec, settings)
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {
            "name": deployment_name(ref.name),
            "namespace": ref.namespace,
            "labels": {**selector_labels(ref.name), LABEL_MANAGED_BY: MANAGED_BY},
            "annotations": {ANNOTATION_TEMPLATE_HASH: template_hash(template)},
            "ownerReferences": [owner_reference(ref)],
        },
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": selector_labels(ref.name)},
            "strategy": {
                "type": "RollingUpdate",
                "rollingUpdate": {"maxSurge": "25%", "maxUnavailable": 0},
            },
            "revisionHistoryLimit": 3,
            "template": template,
        },
    }
