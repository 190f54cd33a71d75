"""A small evaluator of Kubernetes NetworkPolicy semantics, for testing the chart's policies.

Follows the networking.k8s.io/v1 rules (https://kubernetes.io/docs/concepts/services-networking/network-policies/):
a pod is isolated for ingress (egress) when a policy in its namespace selects it with that policy
type; an isolated pod admits a connection only if some rule of some such policy matches the peer
and the port; a connection needs both the source's egress and the destination's ingress. Peers:
``podSelector`` alone = pods of the policy's namespace; ``namespaceSelector`` (+ ``podSelector``)
= pods in matching namespaces (namespaces carry ``kubernetes.io/metadata.name``); ``ipBlock`` =
addresses in ``cidr`` minus ``except`` (only for endpoints outside the pod network here). Rules
without ``from``/``to`` match every peer; without ``ports`` every port. Named ports and endPort
are not supported (the chart uses neither). Pure functions; no I/O.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class Endpoint:
    """A pod (``namespace`` set) or an address outside the pod network (``namespace`` None)."""

    ip: str
    namespace: str | None = None
    labels: dict[str, str] = field(default_factory=dict)


def selects(selector: dict[str, Any] | None, labels: dict[str, str]) -> bool:
    """Whether a LabelSelector matches ``labels`` ({} matches everything)."""
    if selector is None:
        return False
    for key, value in (selector.get("matchLabels") or {}).items():
        if labels.get(key) != value:
            return False
    for expr in selector.get("matchExpressions") or []:
        key, op, values = expr["key"], expr["operator"], expr.get("values") or []
        ok = {
            "In": key in labels and labels[key] in values,
            "NotIn": key not in labels or labels[key] not in values,
            "Exists": key in labels,
            "DoesNotExist": key not in labels,
        }[op]
        if not ok:
            return False
    return True


def _peer_matches(peer: dict[str, Any], policy_ns: str, other: Endpoint) -> bool:
    if "ipBlock" in peer:
        if other.namespace is not None:
            return False
        ip = ipaddress.ip_address(other.ip)
        block = peer["ipBlock"]
        if ip not in ipaddress.ip_network(block["cidr"]):
            return False
        return not any(ip in ipaddress.ip_network(c) for c in block.get("except") or [])
    if other.namespace is None:
        return False
    ns_sel = peer.get("namespaceSelector")
    if ns_sel is None:
        ns_ok = other.namespace == policy_ns
    else:
        ns_ok = selects(ns_sel, {"kubernetes.io/metadata.name": other.namespace})
    pod_sel = peer.get("podSelector")
    return ns_ok and (pod_sel is None or selects(pod_sel, other.labels))


def _port_matches(ports: list[dict[str, Any]] | None, port: int, protocol: str) -> bool:
    if not ports:
        return True
    return any(
        p.get("protocol", "TCP") == protocol and ("port" not in p or int(p["port"]) == port)
        for p in ports
    )


def _rule_allows(
    rule: dict[str, Any], key: str, policy_ns: str, other: Endpoint, port: int, protocol: str
) -> bool:
    peers = rule.get(key)
    peer_ok = not peers or any(_peer_matches(p, policy_ns, other) for p in peers)
    return peer_ok and _port_matches(rule.get("ports"), port, protocol)


def _side_allows(
    policies: list[dict[str, Any]],
    pod: Endpoint,
    other: Endpoint,
    direction: str,
    port: int,
    protocol: str,
) -> bool:
    if pod.namespace is None:  # outside the cluster: no policy applies
        return True
    key = "from" if direction == "Ingress" else "to"
    isolating = [
        p
        for p in policies
        if p["metadata"]["namespace"] == pod.namespace
        and selects(p["spec"]["podSelector"], pod.labels)
        and direction in p["spec"].get("policyTypes", ["Ingress"])
    ]
    if not isolating:
        return True
    for policy in isolating:
        for rule in policy["spec"].get(direction.lower()) or []:
            if _rule_allows(rule, key, pod.namespace, other, port, protocol):
                return True
    return False


def allowed(
    policies: list[dict[str, Any]], src: Endpoint, dst: Endpoint, port: int, protocol: str = "TCP"
) -> bool:
    """Whether a connection ``src`` -> ``dst``:``port`` passes every policy."""
    return _side_allows(policies, src, dst, "Egress", port, protocol) and _side_allows(
        policies, dst, src, "Ingress", port, protocol
    )
