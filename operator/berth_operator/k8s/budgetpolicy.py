"""BudgetPolicy API calls (the only module that writes BudgetPolicy status)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from kubernetes import client

from berth_operator.api.constants import BUDGETPOLICY_PLURAL, GROUP, VERSION
from berth_operator.k8s import calls

MERGE_PATCH = "application/merge-patch+json"


@dataclass(frozen=True)
class BudgetPolicyApi:
    """Calls of the BudgetPolicy handlers, each ``async`` (the client runs in a thread)."""

    api: client.ApiClient

    async def patch_status(self, namespace: str, name: str, status: dict[str, Any]) -> None:
        """Merge ``status`` into the BudgetPolicy's status subresource. Raises NotFound,
        KubeError."""
        objects = client.CustomObjectsApi(self.api)
        await calls.call(
            f"patch budgetpolicy {namespace}/{name} status",
            lambda: objects.patch_namespaced_custom_object_status(
                GROUP,
                VERSION,
                namespace,
                BUDGETPOLICY_PLURAL,
                name,
                {"status": status},
                field_manager="berth-operator",
                _content_type=MERGE_PATCH,
                _preload_content=False,
            ),
        )
