"""The NetworkPolicies the operator provisions per namespace: settings, bodies, updates."""

from __future__ import annotations

import json

import pytest
from berth_operator.builders.netpol import (
    build_network_policy,
    cluster_role_owner,
    needs_update,
)
from berth_operator.settings import NetworkPolicyTemplate, OperatorSettings

from tests.unit.operator.test_settings_and_observe import use_env

SPEC = {"podSelector": {"matchLabels": {"app.kubernetes.io/component": "session"}}}
ROLE = {"metadata": {"name": "berth-operator", "uid": "u-1"}}


def test_templates_and_owner_come_from_env(monkeypatch: pytest.MonkeyPatch) -> None:
    templates = [{"name": "berth-sessions", "component": "session", "spec": SPEC}]
    use_env(
        monkeypatch,
        {
            "BERTH_NETWORK_POLICY_TEMPLATES": json.dumps(templates),
            "BERTH_NETWORK_POLICY_OWNER_CLUSTER_ROLE": "berth-operator",
        },
    )
    s = OperatorSettings.from_env().network_policy
    assert s.templates == [
        NetworkPolicyTemplate(name="berth-sessions", component="session", spec=SPEC)
    ]
    assert s.owner_cluster_role == "berth-operator"


def test_no_templates_by_default(monkeypatch: pytest.MonkeyPatch) -> None:
    use_env(monkeypatch, {})
    assert OperatorSettings.from_env().network_policy.templates == []


def test_a_component_other_than_session_or_laneworker_is_refused(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    bad = [{"name": "x", "component": "redis", "spec": {}}]
    use_env(monkeypatch, {"BERTH_NETWORK_POLICY_TEMPLATES": json.dumps(bad)})
    with pytest.raises(Exception, match="BERTH_NETWORK_POLICY_TEMPLATES"):
        OperatorSettings.from_env()


def test_body_is_labelled_and_owned_by_the_cluster_role() -> None:
    template = NetworkPolicyTemplate(name="berth-sessions", component="session", spec=SPEC)
    body = build_network_policy("team-a", template, cluster_role_owner(ROLE))
    meta = body["metadata"]
    assert (body["apiVersion"], body["kind"]) == ("networking.k8s.io/v1", "NetworkPolicy")
    assert (meta["name"], meta["namespace"]) == ("berth-sessions", "team-a")
    assert meta["labels"] == {
        "app.kubernetes.io/name": "berth",
        "app.kubernetes.io/component": "session",
        "app.kubernetes.io/managed-by": "berth-operator",
    }
    assert meta["ownerReferences"] == [
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRole",
            "name": "berth-operator",
            "uid": "u-1",
        }
    ]
    assert body["spec"] == SPEC
    assert "ownerReferences" not in build_network_policy("team-a", template, None)["metadata"]


def test_only_the_operators_own_changed_policies_are_replaced() -> None:
    template = NetworkPolicyTemplate(name="p", component="laneworker", spec=SPEC)
    wanted = build_network_policy("ns", template, None)
    assert not needs_update(wanted, wanted)
    changed = {**wanted, "spec": {"podSelector": {}}}
    assert needs_update(changed, wanted)
    users = {"metadata": {"labels": {"app.kubernetes.io/managed-by": "Helm"}}, "spec": {}}
    assert not needs_update(users, wanted)
    owned = build_network_policy("ns", template, cluster_role_owner(ROLE))
    assert needs_update(wanted, owned)
