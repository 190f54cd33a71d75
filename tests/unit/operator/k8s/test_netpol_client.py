"""NamespacePolicies: the configured policies are written once per namespace and process."""

from __future__ import annotations

import contextlib
from typing import Any, cast

from berth_operator.errors import AlreadyExists, KubeError
from berth_operator.k8s.connection import ApiSession
from berth_operator.k8s.netpol import NamespacePolicies
from berth_operator.settings import NetworkPolicySettings, NetworkPolicyTemplate

SPEC = {"podSelector": {}, "policyTypes": ["Ingress"]}
TEMPLATES = [
    NetworkPolicyTemplate(name="berth-sessions", component="session", spec=SPEC),
    NetworkPolicyTemplate(name="berth-workers", component="laneworker", spec=SPEC),
]


class Rest:
    """The apiserver's answers for NetworkPolicies and ClusterRoles, and the calls made."""

    def __init__(self, existing: dict[str, dict[str, Any]] | None = None) -> None:
        self.existing = existing or {}
        self.calls: list[tuple[str, str]] = []
        self.role_error: KubeError | None = None

    async def create(self, what: str, path: str, body: dict[str, Any]) -> dict[str, Any]:
        self.calls.append(("create", body["metadata"]["name"]))
        if body["metadata"]["name"] in self.existing:
            raise AlreadyExists(what)
        self.existing[body["metadata"]["name"]] = body
        return body

    async def get(self, what: str, path: str) -> dict[str, Any]:
        name = path.rsplit("/", 1)[-1]
        self.calls.append(("get", name))
        if "clusterroles" in path:
            if self.role_error is not None:
                raise self.role_error
            return {"metadata": {"name": name, "uid": "role-uid"}}
        return self.existing[name]

    async def replace(self, what: str, path: str, body: dict[str, Any]) -> dict[str, Any]:
        self.calls.append(("replace", body["metadata"]["name"]))
        self.existing[body["metadata"]["name"]] = body
        return body


def policies(rest: Rest, owner: str = "berth-operator") -> NamespacePolicies:
    settings = NetworkPolicySettings(templates=TEMPLATES, owner_cluster_role=owner)
    np = NamespacePolicies(cast(ApiSession, None), settings)
    np.rest = cast(Any, rest)
    return np


async def test_policies_are_created_owned_and_written_once_per_namespace() -> None:
    rest = Rest()
    np = policies(rest)
    await np.ensure("team-a")
    await np.ensure("team-a")
    assert rest.calls == [
        ("get", "berth-operator"),
        ("create", "berth-sessions"),
        ("create", "berth-workers"),
    ]
    owner = rest.existing["berth-sessions"]["metadata"]["ownerReferences"][0]
    assert (owner["kind"], owner["uid"]) == ("ClusterRole", "role-uid")
    rest.existing.clear()  # another namespace: none of its policies exist yet
    await np.ensure("team-b")
    assert rest.calls[-2:] == [("create", "berth-sessions"), ("create", "berth-workers")]


async def test_an_existing_policy_is_replaced_only_when_it_is_the_operators_and_differs() -> None:
    ours = {
        "metadata": {
            "name": "berth-sessions",
            "resourceVersion": "7",
            "labels": {"app.kubernetes.io/managed-by": "berth-operator"},
        },
        "spec": {"podSelector": {}},
    }
    helms = {
        "metadata": {"name": "berth-workers", "labels": {"app.kubernetes.io/managed-by": "Helm"}},
        "spec": {"podSelector": {}},
    }
    rest = Rest({"berth-sessions": ours, "berth-workers": helms})
    await policies(rest, owner="").ensure("team-a")
    assert ("replace", "berth-sessions") in rest.calls
    assert ("replace", "berth-workers") not in rest.calls
    assert rest.existing["berth-sessions"]["spec"] == SPEC
    assert rest.existing["berth-sessions"]["metadata"]["resourceVersion"] == "7"


async def test_an_unreadable_owner_leaves_the_policies_unowned() -> None:
    rest = Rest()
    rest.role_error = KubeError("forbidden", status=403)
    await policies(rest).ensure("team-a")
    assert "ownerReferences" not in rest.existing["berth-sessions"]["metadata"]


async def test_a_failed_write_is_tried_again_next_time() -> None:
    class Failing(Rest):
        async def create(self, what: str, path: str, body: dict[str, Any]) -> dict[str, Any]:
            raise KubeError("forbidden", status=403)

    np = policies(Failing(), owner="")
    for _ in range(2):
        with contextlib.suppress(KubeError):
            await np.ensure("team-a")
    assert "team-a" not in np.done
