"""The one-shot set-up Job of a shared claim: its volume root made writable by the pods' user.

Owned by ``berth_operator.builders``. Session, warm and worker pods run as ``run_as_user`` with
no capabilities, and mount directories below the claim's root through ``subPath``; the kubelet
creates a missing subPath directory as root, with the root's mode. Provisioners create volume
roots owned by root (mode 0755: local-path, most NFS and CSI drivers), and the kubelet applies
``fsGroup`` only to volume types that support ownership management (not hostPath or local
volumes, nor NFS, EFS or Azure Files), so nothing a Berth pod could do makes such a root
writable. Before a claim's first session pod the operator therefore runs this Job once: a
root container with only ``CAP_CHOWN`` and ``CAP_FOWNER`` that, when the root is not writable by
the pods' user already, does what the kubelet does for ``fsGroup`` on the root alone (and on
Berth's directories a pod may have made below it as root): owner and group ``run_as_user``,
mode 2775 (setgid, so the kubelet's subPath directories get that group and group write). A
root already writable (an EFS access point with that uid, Azure Files ``uid``/``gid`` mount
options) is left as it is. Success is recorded on the claim
(``ANNOTATION_VOLUME_SETUP``); a failed Job keeps sessions at ``StoreReady=False``, reason
``VolumeSetupFailed``, until it is fixed (the Job is removed ``SETUP_TTL_SECONDS`` after it
finished, and then runs again). docs/install.md says what the volume needs. Pure.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from typing import Any, Final

from berth_operator.api.conditions import Reason
from berth_operator.api.constants import (
    ANNOTATION_VOLUME_SETUP,
    COMPONENT_VOLUME_SETUP,
    LABEL_COMPONENT,
    LABEL_MANAGED_BY,
    LABEL_NAME,
    MANAGED_BY,
    SHARED_MOUNT_PATH,
    STORE_SUBDIR,
    WORKSPACES_SUBDIR,
)
from berth_operator.builders.security import pull_secrets
from berth_operator.settings import OperatorSettings

SETUP_TTL_SECONDS: Final = 600
"""``ttlSecondsAfterFinished`` of the Job: a failed one is retried this long after it ended."""
SETUP_DEADLINE_SECONDS: Final = 300
"""``activeDeadlineSeconds``: a Job whose pod cannot even be created (a Pod Security
``restricted`` namespace refuses a root pod) fails instead of waiting for ever."""

SETUP_SCRIPT: Final = """set -eu
root=$1; id=$2
writable() {  # $1 is writable by uid=gid=$id (owner, group or other write bit)
  set -- $(stat -c '%u %g %a' "$1"); m=$((0$3))
  { [ "$1" = "$id" ] && [ $((m & 0200)) -ne 0 ]; } || \\
    { [ "$2" = "$id" ] && [ $((m & 020)) -ne 0 ]; } || [ $((m & 02)) -ne 0 ]
}
if writable "$root"; then echo "volume root already writable by $id: left as it is"; exit 0; fi
echo "volume root $(stat -c '%U:%G %a' "$root"): making it $id:$id 2775"
chown "$id:$id" "$root"; chmod 2775 "$root"
shift 2
for d in "$@"; do
  [ -d "$root/$d" ] || continue
  find "$root/$d" -xdev -maxdepth 2 -type d -uid 0 -exec chown "$id:$id" {} + -exec chmod 2775 {} +
done
echo done
"""
"""``sh -c`` script; args: the mount path, the uid (= gid), then Berth's top-level directories.
Directories a pod made as root before the set-up (``<dir>``, ``<dir>/<ns>``,
``<dir>/<ns>/<name>``) get the same owner and mode as the root."""


def setup_job_name(claim: str) -> str:
    """``berth-volume-setup-<claim>``; a claim name too long for a Job name (63 characters, the
    ``job-name`` label's limit) is replaced by a hash of it."""
    name = f"berth-volume-setup-{claim}"
    if len(name) <= 63:
        return name
    return "berth-volume-setup-" + hashlib.sha256(claim.encode()).hexdigest()[:16]


def setup_record(settings: OperatorSettings) -> str:
    """The ``ANNOTATION_VOLUME_SETUP`` value: ``"<uid>:<gid>"`` of the pods' user."""
    uid = settings.pods.run_as_user
    return f"{uid}:{uid}"


def needs_setup(claim: Mapping[str, Any], settings: OperatorSettings) -> bool:
    """Whether the observed claim must still be set up: setup enabled and the claim lacks the
    record of a set-up for the current user."""
    if not settings.claims.setup:
        return False
    annotations = (claim.get("metadata") or {}).get("annotations") or {}
    return bool(annotations.get(ANNOTATION_VOLUME_SETUP) != setup_record(settings))


def build_setup_job(namespace: str, claim: str, settings: OperatorSettings) -> dict[str, Any]:
    """The set-up Job of ``namespace/claim``: the session image, root with only CAP_CHOWN and
    CAP_FOWNER, no privilege escalation, read-only root filesystem, no API token."""
    labels = {
        LABEL_NAME: "berth",
        LABEL_COMPONENT: COMPONENT_VOLUME_SETUP,
        LABEL_MANAGED_BY: MANAGED_BY,
    }
    uid = str(settings.pods.run_as_user)
    args = [SHARED_MOUNT_PATH, uid, STORE_SUBDIR, WORKSPACES_SUBDIR]
    container = {
        "name": "setup",
        "image": settings.images.session,
        "imagePullPolicy": settings.images.pull_policy,
        "command": ["sh", "-c", SETUP_SCRIPT, "berth-volume-setup", *args],
        "volumeMounts": [{"name": "shared", "mountPath": SHARED_MOUNT_PATH}],
        "securityContext": {
            "runAsUser": 0,
            "runAsGroup": 0,
            "runAsNonRoot": False,
            "allowPrivilegeEscalation": False,
            "privileged": False,
            "readOnlyRootFilesystem": True,
            "capabilities": {"drop": ["ALL"], "add": ["CHOWN", "FOWNER"]},
        },
        "resources": {
            "requests": {"cpu": "10m", "memory": "16Mi"},
            "limits": {"memory": "64Mi"},
        },
    }
    pod_spec: dict[str, Any] = {
        "restartPolicy": "Never",
        "automountServiceAccountToken": False,
        # The pod is bounded as well as the Job: a run-to-completion pod, which a ResourceQuota
        # scoped NotTerminating (long-running pods, such as session pods) does not count.
        "activeDeadlineSeconds": SETUP_DEADLINE_SECONDS,
        # In the group it hands the root to: Linux clears S_ISGID on a chmod by a caller outside
        # the file's group without CAP_FSETID, and the setgid bit is what gives the kubelet's
        # subPath directories the pods' group.
        "securityContext": {
            "seccompProfile": {"type": "RuntimeDefault"},
            "supplementalGroups": [settings.pods.run_as_user],
        },
        "containers": [container],
        "volumes": [{"name": "shared", "persistentVolumeClaim": {"claimName": claim}}],
    }
    secrets = pull_secrets(None, settings)
    if secrets:
        pod_spec["imagePullSecrets"] = secrets
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": setup_job_name(claim), "namespace": namespace, "labels": labels},
        "spec": {
            "backoffLimit": 2,
            "activeDeadlineSeconds": SETUP_DEADLINE_SECONDS,
            "ttlSecondsAfterFinished": SETUP_TTL_SECONDS,
            "template": {"metadata": {"labels": labels}, "spec": pod_spec},
        },
    }


def setup_outcome(job: Mapping[str, Any] | None) -> str:
    """``"succeeded"``, ``"failed"`` or ``"running"`` (also for None: not created yet) from the
    Job's ``Complete``/``Failed`` conditions (batch/v1 Job status)."""
    for cond in (job or {}).get("status", {}).get("conditions") or []:
        if cond.get("status") != "True":
            continue
        if cond.get("type") == "Complete":
            return "succeeded"
        if cond.get("type") == "Failed":
            return "failed"
    return "running"


def setup_status(
    namespace: str, claim: str, job: Mapping[str, Any] | None
) -> tuple[bool, str, str]:
    """``StoreReady`` (ready, reason, message) while the claim is not set up: reason
    ``VolumeSettingUp`` (the Job runs, or is about to) or ``VolumeSetupFailed`` (it failed; the
    Job's own condition message and what to do)."""
    ref = f"Job {namespace}/{setup_job_name(claim)}"
    if setup_outcome(job) == "failed":
        cond = next(
            c
            for c in (job or {}).get("status", {}).get("conditions") or []
            if c.get("type") == "Failed"
        )
        why = f"{cond.get('reason') or 'Failed'}: {cond.get('message') or ''}".strip()
        return (
            False,
            Reason.VOLUME_SETUP_FAILED,
            f"{ref}, which makes the root of PersistentVolumeClaim {namespace}/{claim} "
            f"writable by Berth's pods, failed ({why}); its pod's log says why. Make the volume "
            "root writable by the pods' user (docs/install.md) and delete the Job, or wait: it "
            f"runs again {SETUP_TTL_SECONDS}s after it ended",
        )
    return (
        False,
        Reason.VOLUME_SETTING_UP,
        f"{ref} is making the root of PersistentVolumeClaim {namespace}/{claim} writable by "
        "Berth's pods (once per claim)",
    )
