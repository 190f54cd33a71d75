"""The chart grants the operator exactly what config/rbac/ grants, plus the LaneWorker verbs.

config/rbac/ is the operator's own statement of least privilege (one rule per API call site). The
chart must not drift from it: every (apiGroup, resource, verb) there is in the chart, and the chart
adds only the LaneWorker scaling verbs listed here (berth_operator/k8s/laneworker.py), until
config/rbac/ carries them too.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from tests.unit.chart.helm import ALL_FEATURES, ROOT, by_kind, documents, render

Grant = tuple[str, str, str]

LANEWORKER_GRANTS: set[Grant] = {
    ("berth.dev", "laneworkers", "list"),
    ("berth.dev", "laneworkers", "watch"),
    ("berth.dev", "laneworkers", "patch"),
    ("berth.dev", "laneworkers/status", "get"),
    ("berth.dev", "laneworkers/status", "patch"),
    ("", "pods", "patch"),
    ("apps", "deployments", "get"),
    ("apps", "deployments", "create"),
    ("apps", "deployments", "patch"),
    ("apps", "deployments/scale", "get"),
    ("apps", "deployments/scale", "patch"),
}


def grants(rules: list[dict[str, Any]]) -> set[Grant]:
    return {
        (group, resource, verb)
        for rule in rules
        for group in rule.get("apiGroups", [])
        for resource in rule["resources"]
        for verb in rule["verbs"]
    }


def config_rbac(kind: str) -> set[Grant]:
    out: set[Grant] = set()
    for path in sorted((ROOT / "config" / "rbac").glob("*.yaml")):
        for doc in yaml.safe_load_all(Path(path).read_text()):
            if doc and doc.get("kind") == kind:
                out |= grants(doc["rules"])
    return out


def test_cluster_wide_rules_match_config_rbac() -> None:
    docs = documents(render())
    chart = grants(by_kind(docs, "ClusterRole")[0]["rules"])
    wanted = config_rbac("ClusterRole")
    assert wanted, "config/rbac has no ClusterRole"
    assert wanted <= chart, f"chart lacks {sorted(wanted - chart)}"
    assert chart - wanted <= LANEWORKER_GRANTS, (
        f"chart grants more: {sorted(chart - wanted - LANEWORKER_GRANTS)}"
    )


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
    cluster = grants(by_kind(docs, "ClusterRole")[0]["rules"])
    ns_roles = [r for r in by_kind(docs, "Role") if r["metadata"]["name"].endswith("-operator")]
    namespaced = grants(ns_roles[0]["rules"])
    wide = grants(by_kind(documents(render()), "ClusterRole")[0]["rules"])
    assert cluster | namespaced == wide
    assert {r for _, r, _ in cluster} == {"nodes"}
