"""Object names and label sets derived from an AgentSession (pure)."""

from __future__ import annotations

import re
from typing import Any

from berth_operator.api.agentsession import AgentSessionSpec
from berth_operator.api.common import SessionRef
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
from berth_operator.errors import SpecError

_LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")


def pod_name(session: str, epoch: int) -> str:
    """Name of the session pod of ``epoch``: ``<session>-e<epoch>``.

    Distinct per epoch, so a racing second create of the same epoch gets AlreadyExists.
    """
    return f"{session}-e{epoch}"


def pod_epoch(session: str, name: str) -> int | None:
    """The epoch in ``name`` when it is a pod name of ``session`` (``pod_name``), else None."""
    prefix = f"{session}-e"
    digits = name[len(prefix) :] if name.startswith(prefix) else ""
    return int(digits) if digits.isdigit() else None


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


def workspace_root_subpath(ref: SessionRef) -> str:
    """The session's workspace root inside the shared volume: ``workspaces/<ns>/<name>``.

    Fixed by construction (never taken from the spec), so one session's mounts can never name
    another session's directory or the store.
    """
    return f"{WORKSPACES_SUBDIR}/{ref.namespace}/{ref.name}"


def relative_workspace(spec: AgentSessionSpec) -> str:
    """spec.workspace.subPath normalised (``""`` when unset): a path inside the workspace root.

    Raises SpecError for ``..``, a leading ``/``, ``.`` segments, empty segments or a NUL byte
    (the CRD's CEL rules refuse them too; this guards objects stored before those rules).
    """
    sub = spec.workspace.sub_path if spec.workspace is not None else None
    if not sub:
        return ""
    problem = subpath_problem(sub)
    if problem:
        raise SpecError(f"spec.workspace.subPath {sub!r}: {problem}")
    return sub.rstrip("/")


def subpath_problem(sub: str) -> str:
    """Why ``sub`` is not a safe relative workspace path, or ``""`` when it is."""
    if "\x00" in sub:
        return "must not contain a NUL byte"
    if sub.startswith("/"):
        return "must be relative to the session's workspace (no leading '/')"
    parts = sub.rstrip("/").split("/")
    if any(p == ".." for p in parts):
        return "must not contain '..'"
    if any(p in ("", ".") for p in parts):
        return "must not contain empty or '.' segments"
    return ""


def workspace_subpath(ref: SessionRef, spec: AgentSessionSpec) -> str:
    """The effective workspace inside the shared volume:
    ``workspaces/<ns>/<name>[/<spec.workspace.subPath>]``. Raises SpecError (see
    :func:`relative_workspace`)."""
    rel = relative_workspace(spec)
    root = workspace_root_subpath(ref)
    return f"{root}/{rel}" if rel else root


def store_subpath(ref: SessionRef) -> str:
    """The session's store inside the shared volume: ``store/<ns>/<name>``."""
    return f"{STORE_SUBDIR}/{ref.namespace}/{ref.name}"


def session_secret_name(session: str) -> str:
    """Name of the per-session Secret (API token, task key): ``<session>-berth``."""
    return f"{session}-berth"


def store_dir(mount: str = SHARED_MOUNT_PATH) -> str:
    """BERTH_STORE_DIR: ``<mount>/store`` (the runtime adds ``<ns>/<name>``)."""
    return f"{mount}/{STORE_SUBDIR}"


def session_store_path(ref: SessionRef, mount: str = SHARED_MOUNT_PATH) -> str:
    """The session's own store directory ``<mount>/store/<ns>/<name>`` (docs/architecture.md §6)."""
    return f"{store_dir(mount)}/{ref.namespace}/{ref.name}"
