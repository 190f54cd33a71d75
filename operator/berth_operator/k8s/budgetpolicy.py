"""BudgetPolicy API calls (the only module that writes BudgetPolicy status)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from berth_operator.api.constants import BUDGETPOLICY_PLURAL, GROUP, VERSION
from berth_operator.k8s import rest
from berth_operator.k8s.connection import ApiSession


@dataclass(frozen=True)
class BudgetPolicyApi:
    """Calls of the BudgetPolicy handlers, each ``async``. ``session`` is the operator's
    connection to the apiserver."""

    session: ApiSession

    @property
    def rest(self) -> rest.AsyncRest:
        """Requests over ``session`` (a light wrapper, built per call)."""
        return rest.AsyncRest(self.session)

    async def list_in(self, namespaces: Sequence[str]) -> list[dict[str, Any]]:
        """LIST the BudgetPolicies of the watched ``namespaces`` (empty = every namespace): the
        raw items. Raises KubeError."""
        scopes: list[str | None] = list(namespaces) or [None]
        out: list[dict[str, Any]] = []
        for namespace in scopes:
            what = "list budgetpolicies" + (f" {namespace}" if namespace else "")
            path = rest.group(GROUP, VERSION, namespace, BUDGETPOLICY_PLURAL)
            out.extend((await self.rest.get(what, path)).get("items") or [])
        return out

    async def patch_status(self, namespace: str, name: str, status: dict[str, Any]) -> None:
        """Merge ``status`` into the BudgetPolicy's status subresource. Raises NotFound,
        KubeError."""
        await self.rest.patch(
            f"patch budgetpolicy {namespace}/{name} status",
            rest.group(GROUP, VERSION, namespace, BUDGETPOLICY_PLURAL, name, "status"),
            {"status": status},
            fieldManager="berth-operator",
        )
