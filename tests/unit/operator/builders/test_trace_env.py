"""The operator passes its log format and OpenTelemetry variables on to the session, warm and
worker pods it builds (berth_contract.envvars.PASSED_ON), and never a header variable."""

from __future__ import annotations

from typing import Any

import pytest
from berth_operator.api.laneworker import LaneWorkerSpec
from berth_operator.api.sessionwarmpool import WarmPodTemplate
from berth_operator.builders.laneworker import LaneWorkerRef, build_deployment
from berth_operator.builders.session_pod import build_session_pod
from berth_operator.builders.warm_pod import build_warm_pod
from berth_operator.settings import ImageSettings, OperatorSettings, RedisSettings

from berth_contract import envvars
from tests.unit.operator.fixtures import make_session

SETTINGS = OperatorSettings(
    redis=RedisSettings(url="redis://r:6379/0"), images=ImageSettings(session="img:1")
)
OPERATOR_ENV = {
    "BERTH_LOG_FORMAT": "json",
    "OTEL_EXPORTER_OTLP_ENDPOINT": "http://jaeger.observability:4318",
    "OTEL_TRACES_SAMPLER": "parentbased_traceidratio",
    "OTEL_TRACES_SAMPLER_ARG": "0.5",
    "OTEL_RESOURCE_ATTRIBUTES": "deployment.environment=dev",
    "OTEL_EXPORTER_OTLP_HEADERS": "authorization=Bearer secret",
    "OTEL_SERVICE_NAME": "berth-operator",
}


def _env(pod_spec: dict[str, Any]) -> dict[str, str]:
    return {e["name"]: e.get("value", "") for e in pod_spec["containers"][0]["env"]}


def _pods() -> dict[str, dict[str, Any]]:
    s = make_session()
    session = build_session_pod(
        s.ref(), s.spec(), SETTINGS, epoch=1, resume_run_id=None, reason="Initial"
    )
    warm = build_warm_pod("ns", "p", "uid", WarmPodTemplate.model_validate({}), "h", SETTINGS)
    ref = LaneWorkerRef("ns", "lw", "u")
    worker = build_deployment(ref, LaneWorkerSpec(), SETTINGS, replicas=1)
    return {
        "session": session["spec"],
        "warm": warm["spec"],
        "worker": worker["spec"]["template"]["spec"],
    }


def test_pods_get_the_operators_telemetry_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    for name, value in OPERATOR_ENV.items():
        monkeypatch.setenv(name, value)
    for kind, spec in _pods().items():
        env = _env(spec)
        passed = {k: v for k, v in OPERATOR_ENV.items() if k in envvars.PASSED_ON}
        assert {k: env.get(k) for k in passed} == passed, kind
        # a credential, and a name that would make every pod the operator, stay behind
        assert "OTEL_EXPORTER_OTLP_HEADERS" not in env and "OTEL_SERVICE_NAME" not in env, kind


def test_nothing_is_passed_when_the_operator_has_none(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in envvars.PASSED_ON:
        monkeypatch.delenv(name, raising=False)
    for kind, spec in _pods().items():
        assert not set(_env(spec)) & set(envvars.PASSED_ON), kind
