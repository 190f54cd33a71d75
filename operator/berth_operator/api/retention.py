"""``spec.storeRetention`` of an AgentSession: what happens to its store and workspace once it has
finished or was deleted (docs/sessions.md, "Retention"; ``berth_operator.retention``)."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field

from berth_operator.api.common import K8sModel


class StoreRetentionSpec(K8sModel):
    """Keep the session's ``store/<ns>/<name>`` and ``workspaces/<ns>/<name>`` (Keep), or remove
    them ``afterSeconds`` after the session finished (Succeeded, Failed) or was deleted (Delete).
    Unset: the namespace's policy from the operator's settings, else its default (Keep)."""

    policy: Literal["Keep", "Delete"]
    """Keep (never remove) or Delete (remove after the period)."""
    after_seconds: Annotated[int, Field(ge=0, le=315360000)] = 0
    """Seconds to wait before the removal (Delete only); a session re-created under the same
    name before then keeps the store and continues its conversation. Default 0."""
