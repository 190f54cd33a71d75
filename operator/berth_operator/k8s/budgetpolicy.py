"""BudgetPolicy API calls (the only module that writes BudgetPolicy status)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
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

    async def list_in(self, namespaces: Sequence[str]) -> list[dict[str, Any]]:
        """LIST the BudgetPolicies of the watched ``namespaces`` (empty = every namespace): the
        raw items. Raises KubeError."""
        objects = client.CustomObjectsApi(self.api)

        async def items(what: str, fn: Callable[..., Any], *args: str) -> list[dict[str, Any]]:
            def run() -> dict[str, Any]:
                answer = fn(*args, _preload_content=False)
                return calls.decode_object(what, answer.data)

            return list((await calls.call(what, run)).get("items") or [])

        if not namespaces:
            return await items(
                "list budgetpolicies",
                objects.list_cluster_custom_object,
                GROUP,
                VERSION,
                BUDGETPOLICY_PLURAL,
            )
        out: list[dict[str, Any]] = []
        for namespace in namespaces:
            out.extend(
                await items(
                    f"list budgetpolicies {namespace}",
                    objects.list_namespaced_custom_object,
                    GROUP,
                    VERSION,
                    namespace,
                    BUDGETPOLICY_PLURAL,
                )
            )
        return out

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
