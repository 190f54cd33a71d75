"""Object names and label sets derived from an AgentSession (pure)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from berth_operator.api.agentsession import AgentSessionSpec
from berth_operator.api.constants import (
    API_VERSION,
    COMPONENT_SESSION,
    LABEL_AGENT_TEMPLATE,
    LABEL_COMPONENT,
    LABEL_CORRELATION,
    LABEL_MANAGED_BY,
    LABEL_NAME,
    LABEL_PRINCIPAL,
    LABEL_SESSION,
    LABEL_SESSION_UID,
    LABEL_TENANT,
    MANAGED_BY,
    SESSION_KIND,
    SHARED_MOUNT_PATH,
    STORE_SUBDIR,
    WORKSPACES_SUBDIR,
)

_LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")


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


def pod_name(session: str, epoch: int) -> str:
    """Name of the session pod of ``epoch``: ``<session>-e<epoch>``.

    Distinct per epoch, so a racing second create of the same epoch gets AlreadyExists.
    """
    return f"{session}-e{epoch}"


def options_configmap_name(session: str) -> str:
    """Name of the options ConfigMap: ``<session>-options``."""
    return f"{session}-options"


def is_label_value(value: str) -> bool:
    """Whether ``value`` is a valid label value (≤63 chars, alphanumeric ends)."""
    return len(value) <= 63 and bool(_LABEL_VALUE.match(value))


def selector_labels(ref: SessionRef) -> dict[str, str]:
    """Labels that select the pods of one session (name and uid)."""
    return {LABEL_SESSION: ref.name, LABEL_SESSION_UID: ref.uid}


def session_labels(ref: SessionRef, spec: AgentSessionSpec) -> dict[str, str]:
    """All labels of session objects: selector, app.kubernetes.io/*, and valid identity values."""
    labels = {
        LABEL_NAME: "berth",
        LABEL_COMPONENT: COMPONENT_SESSION,
        LABEL_MANAGED_BY: MANAGED_BY,
        **selector_labels(ref),
    }
    if spec.identity is not None:
        for key, value in (
            (LABEL_TENANT, spec.identity.tenant_id),
            (LABEL_PRINCIPAL, spec.identity.principal),
            (LABEL_AGENT_TEMPLATE, spec.identity.agent_template_id),
            (LABEL_CORRELATION, spec.identity.correlation_id),
        ):
            if value and is_label_value(value):
                labels[key] = value
    return labels


def owner_reference(ref: SessionRef) -> dict[str, Any]:
    """Controller owner reference to the AgentSession (garbage collection deletes dependents)."""
    return {
        "apiVersion": API_VERSION,
        "kind": SESSION_KIND,
        "name": ref.name,
        "uid": ref.uid,
        "controller": True,
        "blockOwnerDeletion": True,
    }


def workspace_subpath(ref: SessionRef, spec: AgentSessionSpec) -> str:
    """Workspace path inside the shared volume (default ``workspaces/<ns>/<name>``)."""
    if spec.workspace is not None and spec.workspace.sub_path:
        return spec.workspace.sub_path.strip("/")
    return f"{WORKSPACES_SUBDIR}/{ref.namespace}/{ref.name}"


def store_dir(mount: str = SHARED_MOUNT_PATH) -> str:
    """BERTH_STORE_DIR: ``<mount>/store`` (the runtime adds ``<ns>/<name>``)."""
    return f"{mount}/{STORE_SUBDIR}"


def session_store_path(ref: SessionRef, mount: str = SHARED_MOUNT_PATH) -> str:
    """The session's own store directory ``<mount>/store/<ns>/<name>`` (ARCHITECTURE.md §6)."""
    return f"{store_dir(mount)}/{ref.namespace}/{ref.name}"
