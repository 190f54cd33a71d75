"""The chart's ``observability`` values: JSON logs by default, traces only with an endpoint, and
OpenTelemetry's own variables on the operator (which passes them on to its pods)."""

from __future__ import annotations

from typing import Any

from tests.unit.chart.helm import documents, one, render


def _operator_env(values: dict[str, Any] | None) -> dict[str, str]:
    deploy = one(documents(render(values)), "Deployment", "-operator")
    container = deploy["spec"]["template"]["spec"]["containers"][0]
    return {e["name"]: e.get("value", "") for e in container["env"]}


def test_json_logs_and_no_traces_by_default() -> None:
    env = _operator_env(None)
    assert env["BERTH_LOG_FORMAT"] == "json"
    assert not [name for name in env if name.startswith("OTEL_")]


def test_tracing_values_become_opentelemetry_variables() -> None:
    values = {
        "observability": {
            "logFormat": "text",
            "tracing": {
                "otlpEndpoint": "http://jaeger.observability:4318",
                "sampler": "parentbased_traceidratio",
                "samplerArg": "0.25",
                "resourceAttributes": {"deployment.environment": "dev", "team": "infra"},
            },
        }
    }
    env = _operator_env(values)
    assert env["BERTH_LOG_FORMAT"] == "text"
    assert env["OTEL_EXPORTER_OTLP_ENDPOINT"] == "http://jaeger.observability:4318"
    assert env["OTEL_TRACES_SAMPLER"] == "parentbased_traceidratio"
    assert env["OTEL_TRACES_SAMPLER_ARG"] == "0.25"
    assert env["OTEL_RESOURCE_ATTRIBUTES"] == "deployment.environment=dev,team=infra"


def _egress_ports(policy: dict[str, Any]) -> set[int]:
    return {p["port"] for rule in policy.get("egress") or [] for p in rule.get("ports") or []}


def test_policies_let_berths_pods_reach_the_otlp_endpoint_only_when_tracing() -> None:
    import json

    from tests.unit.chart.helm import by_kind

    def policies(values: dict[str, Any]) -> dict[str, dict[str, Any]]:
        docs = documents(render(values))
        found = {p["metadata"]["name"]: p["spec"] for p in by_kind(docs, "NetworkPolicy")}
        deploy = one(docs, "Deployment", "-operator")
        env = {
            e["name"]: e.get("value")
            for e in deploy["spec"]["template"]["spec"]["containers"][0]["env"]
        }
        for template in json.loads(env["BERTH_NETWORK_POLICY_TEMPLATES"]):  # session, worker
            found[template["name"]] = template["spec"]
        return found

    traced = {
        "observability": {"tracing": {"otlpEndpoint": "http://otel.obs:4318"}},
        "networkPolicy": {"otlpEgress": {"cidrs": ["10.9.0.0/16"], "ports": [4318]}},
    }
    on, off = policies(traced), policies({})
    for name in ("berth-operator", "berth-sessions", "berth-workers"):
        assert 4318 in _egress_ports(on[name]), name
        assert 4318 not in _egress_ports(off[name]), name
    rule = next(r for r in on["berth-workers"]["egress"] if r["ports"][0]["port"] == 4318)
    assert rule["to"] == [{"ipBlock": {"cidr": "10.9.0.0/16"}}]
