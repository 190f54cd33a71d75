"""Builder of the Job that deletes a session's store when ``berth.dev/delete-store: "true"``.

The operator itself does not mount the shared volume, so removal runs in a pod that does: ``sh -c
'rm -rf -- "$@"'`` over the session's store directory and its workspace root
``workspaces/<ns>/<name>`` (spec.workspace.subPath only names a directory inside that root).
Paths are passed as args (never baked into the script) so a node agent that rewrites mount
prefixes in args works too. ``ttlSecondsAfterFinished`` lets
the TTL controller remove the Job.
"""

from __future__ import annotations

from typing import Any

from berth_operator.api.agentsession import AgentSessionSpec
from berth_operator.api.common import SessionRef
from berth_operator.api.constants import (
    COMPONENT_STORE_CLEANUP,
    LABEL_COMPONENT,
    LABEL_MANAGED_BY,
    LABEL_NAME,
    LABEL_SESSION,
    LABEL_SESSION_UID,
    MANAGED_BY,
    SHARED_MOUNT_PATH,
)
from berth_operator.builders.names import session_store_path, workspace_root_subpath
from berth_operator.builders.security import pod_security_context
from berth_operator.settings import OperatorSettings

CLEANUP_TTL_SECONDS = 300


def cleanup_job_name(ref: SessionRef) -> str:
    """``<session>-store-cleanup-<uid prefix>`` (unique per session incarnation)."""
    return f"{ref.name}-store-cleanup-{ref.uid[:8]}"


def build_store_cleanup_job(
    ref: SessionRef, spec: AgentSessionSpec, settings: OperatorSettings
) -> dict[str, Any]:
    """The cleanup Job (not owned by the session, which is being deleted)."""
    claim = (spec.store.claim_name if spec.store else None) or settings.claims.default_name
    paths = [session_store_path(ref, SHARED_MOUNT_PATH)]
    paths.append(f"{SHARED_MOUNT_PATH}/{workspace_root_subpath(ref)}")
    labels = {
        LABEL_NAME: "berth",
        LABEL_COMPONENT: COMPONENT_STORE_CLEANUP,
        LABEL_MANAGED_BY: MANAGED_BY,
        LABEL_SESSION: ref.name,
        LABEL_SESSION_UID: ref.uid,
    }
    uid = settings.pods.run_as_user
    pod_spec: dict[str, Any] = {
        "restartPolicy": "Never",
        "automountServiceAccountToken": False,
        "securityContext": pod_security_context(uid),
        "containers": [
            {
                "name": "cleanup",
                "image": settings.images.session,
                "imagePullPolicy": settings.images.pull_policy,
                "command": ["sh", "-c", 'rm -rf -- "$@"', "berth-store-cleanup", *paths],
                "volumeMounts": [{"name": "shared", "mountPath": SHARED_MOUNT_PATH}],
                "securityContext": {
                    "allowPrivilegeEscalation": False,
                    "readOnlyRootFilesystem": True,
                    "capabilities": {"drop": ["ALL"]},
                },
            }
        ],
        "volumes": [{"name": "shared", "persistentVolumeClaim": {"claimName": claim}}],
    }
    if spec.placement is not None:
        if spec.placement.node_selector:
            pod_spec["nodeSelector"] = dict(spec.placement.node_selector)
        if spec.placement.tolerations:
            pod_spec["tolerations"] = [t.wire() for t in spec.placement.tolerations]
        if spec.placement.affinity:
            pod_spec["affinity"] = spec.placement.affinity
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": cleanup_job_name(ref), "namespace": ref.namespace, "labels": labels},
        "spec": {
            "backoffLimit": 3,
            "ttlSecondsAfterFinished": CLEANUP_TTL_SECONDS,
            "template": {"metadata": {"labels": labels}, "spec": pod_spec},
        },
    }
