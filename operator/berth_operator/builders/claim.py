"""The shared ReadWriteMany claim of a namespace (docs/architecture.md §2: stores and workspaces).

Owned by ``berth_operator.builders``. PersistentVolumeClaims are namespaced, so every namespace
that runs sessions or LaneWorkers needs one. With ``shared_claim_managed`` (the default) the
operator creates it from its settings when a session or LaneWorker needs it; it has no owner
reference and the operator never deletes it (session stores outlive their AgentSessions, see
docs/sessions.md). Without, the claim is the user's and a missing one is reported
(:func:`claim_status`). Pure.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from berth_operator.api.agentsession import AgentSessionSpec
from berth_operator.api.constants import (
    COMPONENT_SHARED_VOLUME,
    LABEL_COMPONENT,
    LABEL_MANAGED_BY,
    MANAGED_BY,
)
from berth_operator.api.laneworker import LaneWorkerSpec
from berth_operator.settings import OperatorSettings

ANNOTATION_KEEP = "berth.dev/keep"
"""On claims the operator created: why it must not be deleted while stores live in it."""


def claim_name(spec: AgentSessionSpec | LaneWorkerSpec, settings: OperatorSettings) -> str:
    """``spec.store.claimName`` (AgentSession or LaneWorker), else ``default_claim_name``."""
    store = spec.store
    return (store.claim_name if store is not None else None) or settings.claims.default_name


def build_shared_claim(namespace: str, name: str, settings: OperatorSettings) -> dict[str, Any]:
    """The PersistentVolumeClaim body the operator creates (ReadWriteMany, ``shared_claim_size``,
    ``shared_claim_storage_class`` or the default class)."""
    spec: dict[str, Any] = {
        "accessModes": ["ReadWriteMany"],
        "resources": {"requests": {"storage": settings.claims.size}},
    }
    if settings.claims.storage_class:
        spec["storageClassName"] = settings.claims.storage_class
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "labels": {LABEL_MANAGED_BY: MANAGED_BY, LABEL_COMPONENT: COMPONENT_SHARED_VOLUME},
            "annotations": {
                ANNOTATION_KEEP: "session stores and workspaces live here; Berth never deletes it"
            },
        },
        "spec": spec,
    }


def claim_status(
    namespace: str, name: str, claim: Mapping[str, Any] | None, managed: bool
) -> tuple[bool, str, str]:
    """(ready, reason, message) of the ``StoreReady`` condition for the observed claim body
    (None: it does not exist). Reasons: ``ClaimBound``; ``ClaimPending`` (exists, not bound yet:
    the pod waits for it); ``ClaimMissing`` (user-managed claims only: nothing is placed until
    it exists); ``ClaimLost``; ``ClaimCreating`` (managed, about to be created)."""
    ref = f"PersistentVolumeClaim {namespace}/{name}"
    if claim is None:
        if managed:
            return False, "ClaimCreating", f"creating {ref} (ReadWriteMany)"
        return (
            False,
            "ClaimMissing",
            f"{ref} does not exist and claims are managed by the user "
            "(BERTH_SHARED_CLAIM_MANAGED=false): create a ReadWriteMany claim of that name, or "
            "set spec.store.claimName to an existing one",
        )
    phase = (claim.get("status") or {}).get("phase") or "Pending"
    if phase == "Bound":
        return True, "ClaimBound", f"{ref} is bound"
    if phase == "Lost":
        return False, "ClaimLost", f"{ref} lost its PersistentVolume"
    klass = (claim.get("spec") or {}).get("storageClassName") or "the default class"
    return (
        False,
        "ClaimPending",
        f"{ref} is not bound yet (storage class {klass}); the session pod waits for it. It needs "
        "a ReadWriteMany volume: check the class's provisioner or create a matching "
        "PersistentVolume",
    )
