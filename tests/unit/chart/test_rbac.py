"""The chart grants the operator exactly what config/rbac/ grants.

config/rbac/ is the operator's own statement of least privilege (one rule per API call site). The
chart must not drift from it in either direction: a verb the operator starts using must reach the
chart, and the chart must not grant more.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from tests.unit.chart.helm import ALL_FEATURES, ROOT, by_kind, documents, one, render

Grant = tuple[str, str, str]


def grants(rules: list[dict[str, Any]]) -> set[Grant]:
    return {
        (group, resource, verb)
        for rule in rules
        for group in rule.get("apiGroups", [])
        for resource in rule["resources"]
        for verb in rule["verbs"]
    }


def config_rbac(kind: str, sub: str = "") -> set[Grant]:
    out: set[Grant] = set()
    for path in sorted((ROOT / "config" / "rbac" / sub).glob("*.yaml")):
        for doc in yaml.safe_load_all(Path(path).read_text()):
            if doc and doc.get("kind") == kind:
                out |= grants(doc["rules"])
    return out


def test_cluster_wide_rules_match_config_rbac() -> None:
    docs = documents(render())
    chart = grants(one(docs, "ClusterRole", "-operator")["rules"])
    wanted = config_rbac("ClusterRole")
    assert wanted, "config/rbac has no ClusterRole"
    assert wanted <= chart, f"chart lacks {sorted(wanted - chart)}"
    assert chart <= wanted, f"chart grants more than config/rbac: {sorted(chart - wanted)}"


def test_leader_election_rules_match_config_rbac() -> None:
    roles = [
        r
        for r in by_kind(documents(render()), "Role")
        if r["metadata"]["name"].endswith("-leader-election")
    ]
    assert len(roles) == 1
    assert grants(roles[0]["rules"]) == config_rbac("Role")


def test_watch_namespaces_split_the_same_grants() -> None:
    """With watchNamespaces the same grants are split into a ClusterRole and per-namespace Roles."""
    docs = documents(render(ALL_FEATURES))
    cluster = grants(one(docs, "ClusterRole", "-operator")["rules"])
    ns_roles = [r for r in by_kind(docs, "Role") if r["metadata"]["name"].endswith("-operator")]
    namespaced = grants(ns_roles[0]["rules"])
    wide = grants(one(documents(render()), "ClusterRole", "-operator")["rules"])
    assert cluster | namespaced == wide
    # Cluster-scoped: nodes, and the operator's own ClusterRole (the NetworkPolicies' owner).
    assert {r for _, r, _ in cluster} == {"nodes", "clusterroles"}


def test_webhook_rules_match_config_rbac_webhook() -> None:
    docs = documents(render(ALL_FEATURES))
    chart = grants(one(docs, "ClusterRole", "-webhook")["rules"])
    assert chart == config_rbac("ClusterRole", "webhook")
    assert not [d for d in documents(render()) if d["metadata"]["name"].endswith("-webhook")]
