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
