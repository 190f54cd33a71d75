"""The chart's NetworkPolicies select Berth's pods and admit only the peers docs/security.md names.

Rendered with ``helm template`` and evaluated with tests/unit/chart/netpol.py (the NetworkPolicy
rules of networking.k8s.io/v1), for peers the dev cluster cannot show (other CNIs' address
ranges, an API server off the nodes); tests/e2e/test_network_policy.py probes them by packets.
Session and worker pod labels come from the operator's own builders, so a label renamed there
fails here.
"""

from __future__ import annotations

import json
from typing import Any

from berth_operator.api.agentsession import AgentSessionSpec
from berth_operator.api.common import SessionRef
from berth_operator.api.constants import LABEL_MANAGED_BY, MANAGED_BY
from berth_operator.builders import laneworker
from berth_operator.builders.names import session_labels

from berth_contract.state import HTTP_PORT
from tests.unit.chart.helm import by_kind, documents, one, render
from tests.unit.chart.netpol import Endpoint, allowed, selects

NS = "berth-system"
API_SERVER = Endpoint("172.18.0.2")
LLM = Endpoint("104.18.6.192")
METADATA = Endpoint("169.254.169.254")
VALUES: dict[str, Any] = {
    "operator": {"watchNamespaces": ["team-a", "team-b"]},
    "webhook": {"enabled": True, "certSecretName": "tls"},
    "networkPolicy": {"apiServer": {"cidrs": ["172.18.0.0/16"]}},
}


def _pod_labels(docs: list[dict[str, Any]], suffix: str) -> dict[str, str]:
    labels: dict[str, str] = one(docs, "Deployment", suffix)["spec"]["template"]["metadata"][
        "labels"
    ]
    return labels


def session_pod(ns: str, name: str = "s1", ip: str = "10.244.1.10") -> Endpoint:
    spec = AgentSessionSpec.model_validate(
        {"prompt": "p", "model": "openai/m", "identity": {"tenantId": "acme"}}
    )
    return Endpoint(ip, ns, session_labels(SessionRef(ns, name, f"uid-{name}"), spec))


def worker_pod(ns: str, ip: str = "10.244.1.20") -> Endpoint:
    return Endpoint(ip, ns, {**laneworker.selector_labels("pool"), LABEL_MANAGED_BY: MANAGED_BY})


class World:
    """Pods of one rendering: Berth's, DNS, Prometheus, and an attacker in a session namespace."""

    def __init__(self, values: dict[str, Any] | None = None) -> None:
        self.docs = documents(render(values if values is not None else VALUES))
        self.policies = by_kind(self.docs, "NetworkPolicy")
        self.operator = Endpoint("10.244.0.2", NS, _pod_labels(self.docs, "-operator"))
        bundled = [
            d for d in by_kind(self.docs, "Deployment") if d["metadata"]["name"].endswith("-redis")
        ]
        self.redis = Endpoint("10.244.0.3", NS, _pod_labels(self.docs, "-redis") if bundled else {})
        self.session = session_pod("team-a")
        self.other_session = session_pod("team-b", "s2", "10.244.2.10")
        self.worker = worker_pod("team-a")
        self.dns = Endpoint("10.244.0.9", "kube-system", {"k8s-app": "kube-dns"})
        self.prometheus = Endpoint("10.244.3.3", "monitoring", {"app": "prometheus"})
        self.attacker = Endpoint("10.244.1.66", "team-a", {"app": "anything"})
        self.outsider = Endpoint("10.244.5.66", "elsewhere", {"app": "anything"})

    def ok(self, src: Endpoint, dst: Endpoint, port: int, protocol: str = "TCP") -> bool:
        return allowed(self.policies, src, dst, port, protocol)


def test_policies_are_rendered_per_session_namespace_and_select_berths_pods() -> None:
    w = World()
    where = {(p["metadata"]["namespace"], p["metadata"]["name"]) for p in w.policies}
    assert where == {
        (NS, "berth-operator"),
        (NS, "berth-redis"),
        ("team-a", "berth-sessions"),
        ("team-a", "berth-workers"),
        ("team-b", "berth-sessions"),
        ("team-b", "berth-workers"),
    }
    selected = {
        p["metadata"]["name"]: [
            e
            for e in (w.operator, w.redis, w.session, w.worker, w.attacker, w.dns)
            if selects(p["spec"]["podSelector"], e.labels)
        ]
        for p in w.policies
    }
    assert selected["berth-operator"] == [w.operator]
    assert selected["berth-redis"] == [w.redis]
    assert selected["berth-sessions"] == [w.session]
    assert selected["berth-workers"] == [w.worker]
    for p in w.policies:
        assert p["spec"]["policyTypes"] == ["Ingress", "Egress"]


def test_only_the_operator_reaches_the_session_api() -> None:
    w = World()
    assert w.ok(w.operator, w.session, HTTP_PORT)
    assert w.ok(w.operator, w.other_session, HTTP_PORT)
    for intruder in (w.attacker, w.outsider, w.other_session, w.worker, w.redis):
        assert not w.ok(intruder, w.session, HTTP_PORT), intruder
    assert not w.ok(w.operator, w.session, 22)
    # Prometheus scrapes /metrics on the same port (the API itself needs the session's token).
    assert w.ok(w.prometheus, w.session, HTTP_PORT)


def test_session_egress_is_llm_redis_and_dns_only() -> None:
    w = World()
    assert w.ok(w.session, LLM, 443)
    assert not w.ok(w.session, LLM, 80)
    assert w.ok(w.session, w.redis, 6379)
    assert w.ok(w.session, w.dns, 53, "UDP") and w.ok(w.session, w.dns, 53, "TCP")
    for target, port in (
        (w.other_session, HTTP_PORT),
        (w.operator, 8081),
        (w.attacker, 443),  # 0.0.0.0/0 is for addresses outside the pod network
        (w.dns, 443),
        (w.worker, 9090),
    ):
        assert not w.ok(w.session, target, port), (target, port)


def test_llm_egress_cidrs_and_except_narrow_it() -> None:
    values = {
        **VALUES,
        "networkPolicy": {
            "llmEgress": {
                "cidrs": ["104.18.0.0/16"],
                "except": ["104.18.6.0/24"],
                "ports": [443, 8443],
            }
        },
    }
    w = World(values)
    assert w.ok(w.session, Endpoint("104.18.9.9"), 8443)
    assert not w.ok(w.session, LLM, 443)  # in except
    assert not w.ok(w.session, METADATA, 443)


def test_worker_egress_is_redis_and_dns_unless_allowed() -> None:
    w = World()
    assert w.ok(w.worker, w.redis, 6379)
    assert w.ok(w.worker, w.dns, 53, "UDP")
    for target, port in ((LLM, 443), (METADATA, 80), (w.session, HTTP_PORT), (w.attacker, 80)):
        assert not w.ok(w.worker, target, port), (target, port)
    assert not w.ok(w.attacker, w.worker, 9090)
    assert w.ok(w.prometheus, w.worker, 9090)
    extra = {"to": [{"ipBlock": {"cidr": "151.101.0.0/16"}}], "ports": [{"port": 443}]}
    values = {**VALUES, "networkPolicy": {"workers": {"allowEgress": [extra]}}}
    w = World(values)
    assert w.ok(w.worker, Endpoint("151.101.1.1"), 443)
    assert not w.ok(w.worker, LLM, 443)
    assert not w.ok(w.session, Endpoint("151.101.1.1"), 80)


def test_redis_admits_only_berth_pods() -> None:
    w = World()
    for client in (w.operator, w.session, w.other_session, w.worker):
        assert w.ok(client, w.redis, 6379), client
    for intruder in (w.attacker, w.outsider, w.prometheus):
        assert not w.ok(intruder, w.redis, 6379), intruder
    for target, port in ((LLM, 443), (w.session, HTTP_PORT), (w.dns, 53)):
        assert not w.ok(w.redis, target, port)


def test_operator_ingress_webhook_from_api_server_and_metrics_from_monitoring() -> None:
    w = World()
    assert w.ok(API_SERVER, w.operator, 9443)
    assert not w.ok(Endpoint("8.8.8.8"), w.operator, 9443)
    assert not w.ok(w.attacker, w.operator, 9443)
    assert w.ok(w.prometheus, w.operator, 8081)
    assert not w.ok(w.attacker, w.operator, 8081)
    assert not w.ok(w.session, w.operator, 8081)


def test_operator_egress_api_server_sessions_redis_dns() -> None:
    w = World()
    assert w.ok(w.operator, API_SERVER, 6443) and w.ok(w.operator, API_SERVER, 443)
    assert w.ok(w.operator, w.session, HTTP_PORT)
    assert w.ok(w.operator, w.redis, 6379)
    assert w.ok(w.operator, w.dns, 53, "UDP")
    assert not w.ok(w.operator, LLM, 443)
    assert not w.ok(w.operator, w.attacker, HTTP_PORT)
    assert not w.ok(w.operator, w.worker, 9090)


def test_gateway_peers_and_metrics_selector_are_configurable() -> None:
    gateway = Endpoint("10.244.7.7", "front", {"app": "gateway"})
    values = {
        **VALUES,
        "networkPolicy": {
            "gatewayPeers": [
                {
                    "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "front"}},
                    "podSelector": {"matchLabels": {"app": "gateway"}},
                }
            ],
            "metrics": {"namespaceSelector": None},
        },
    }
    w = World(values)
    assert w.ok(gateway, w.session, HTTP_PORT)
    assert not w.ok(Endpoint("10.244.7.8", "front", {"app": "other"}), w.session, HTTP_PORT)
    assert not w.ok(w.prometheus, w.session, HTTP_PORT)
    assert not w.ok(w.prometheus, w.worker, 9090)
    assert not w.ok(w.prometheus, w.operator, 8081)


def test_namespaces_default_to_the_release_namespace_and_can_be_listed() -> None:
    default = by_kind(documents(render()), "NetworkPolicy")
    assert {p["metadata"]["namespace"] for p in default} == {NS}
    w = World({"networkPolicy": {"namespaces": ["team-c"]}})
    assert {p["metadata"]["namespace"] for p in w.policies} == {NS, "team-c"}
    # With no list, peers may be session/worker pods in any namespace (the operator watches all).
    w = World({})
    assert w.ok(session_pod("anywhere"), w.redis, 6379)
    assert not w.ok(Endpoint("10.244.9.9", "anywhere", {"app": "x"}), w.redis, 6379)
    assert not by_kind(documents(render({"networkPolicy": {"enabled": False}})), "NetworkPolicy")


def test_external_redis_egress_uses_its_cidrs_and_ports() -> None:
    values = {
        "operator": {"watchNamespaces": ["team-a"]},
        "redis": {"enabled": False, "url": "redis://redis.example:6380/0"},
        "networkPolicy": {"externalRedis": {"cidrs": ["10.9.0.0/24"], "ports": [6380]}},
    }
    w = World(values)
    assert not [p for p in w.policies if p["metadata"]["name"].endswith("-redis")]
    managed = Endpoint("10.9.0.5")
    assert w.ok(w.worker, managed, 6380) and w.ok(w.session, managed, 6380)
    assert not w.ok(w.worker, managed, 6379)
    assert not w.ok(w.worker, Endpoint("10.9.1.5"), 6380)


def test_llm_egress_admits_the_provider_recipes_ports_by_default() -> None:
    w = World()
    for port in (443, 4000, 8000, 8080):  # HTTPS, LiteLLM, vLLM, llama.cpp (docs/llm-providers.md)
        assert w.ok(w.session, LLM, port), port
    assert not w.ok(w.session, LLM, 9999)
    anyport = World(
        {**VALUES, "networkPolicy": {**VALUES["networkPolicy"], "llmEgress": {"ports": []}}}
    )
    assert anyport.ok(anyport.session, LLM, 9999)


def test_the_api_servers_pod_proxy_reaches_sessions_only_when_its_cidrs_are_set() -> None:
    w = World()
    assert w.ok(API_SERVER, w.session, HTTP_PORT)
    assert not w.ok(API_SERVER, w.session, 22)
    unset = World({**VALUES, "networkPolicy": {}})
    assert not unset.ok(API_SERVER, unset.session, HTTP_PORT)


def test_dns_cidrs_admit_a_resolver_outside_the_cluster() -> None:
    resolver = Endpoint("169.254.20.10")
    assert not World().ok(World().session, resolver, 53, "UDP")
    values = {
        **VALUES,
        "networkPolicy": {**VALUES["networkPolicy"], "dns": {"cidrs": ["169.254.20.10/32"]}},
    }
    w = World(values)
    assert w.ok(w.session, resolver, 53, "UDP") and w.ok(w.worker, resolver, 53, "TCP")
    assert not w.ok(w.session, resolver, 80)


def test_the_operator_is_given_the_same_session_and_worker_policies() -> None:
    """The policies the operator creates in other namespaces are the chart's own."""
    w = World()
    env = one(w.docs, "Deployment", "-operator")["spec"]["template"]["spec"]["containers"][0]["env"]
    values = {e["name"]: e.get("value") for e in env}
    templates = json.loads(values["BERTH_NETWORK_POLICY_TEMPLATES"])
    rendered = {
        p["metadata"]["name"]: p["spec"]
        for p in w.policies
        if p["metadata"]["namespace"] == "team-a"
    }
    assert {t["name"]: t["spec"] for t in templates} == rendered
    assert {t["component"] for t in templates} == {"session", "laneworker"}
    assert values["BERTH_NETWORK_POLICY_OWNER_CLUSTER_ROLE"].endswith("-operator")
    off = documents(render({**VALUES, "networkPolicy": {"enabled": False}}))
    env_off = one(off, "Deployment", "-operator")["spec"]["template"]["spec"]["containers"][0][
        "env"
    ]
    assert "BERTH_NETWORK_POLICY_TEMPLATES" not in {e["name"] for e in env_off}
