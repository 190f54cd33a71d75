"""values.schema.json rejects bad values files with messages that name the field and the rule.

Each file in bad_values/ is a realistic mistake; ``helm template`` must fail on it with the message
fragment listed here (helm validates values against the schema before rendering), and the same
values minus the mistake must render (so the failure is the schema's, not something else's).
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from tests.unit.chart.helm import CHART, KUBE_VERSION, render, run_helm

BAD = Path(__file__).parent / "bad_values"

CASES: dict[str, str] = {
    "replicas-zero.yaml": "at '/operator/replicas': minimum: got 0, want 1",
    "typo-key.yaml": "at '/operator': additional properties 'replica' not allowed",
    "pull-policy.yaml": (
        "at '/image/pullPolicy': value must be one of 'Always', 'IfNotPresent', 'Never'"
    ),
    "redis-url-scheme.yaml": "at '/redis/url': 'http://redis.example:6379' does not match pattern",
    "redis-missing-url.yaml": "at '/redis/url': minLength: got 0, want 1",
    "root-user.yaml": "at '/operator/podSecurityContext/runAsUser': minimum: got 0, want 1",
    "writable-rootfs.yaml": (
        "at '/operator/securityContext/readOnlyRootFilesystem': value must be true"
    ),
    "two-leaders.yaml": "at '/operator/leaderElection/enabled': value must be true",
    "backlog-duration.yaml": (
        "at '/prometheusRule/thresholds/backlogFor': '10 minutes' does not match"
    ),
    "env-name.yaml": "'LOG_LEVEL' does not match pattern '^BERTH_[A-Z0-9_]+$'",
    "shared-volume-rwo.yaml": "at '/sharedVolume/accessModes/0': value must be 'ReadWriteMany'",
    "webhook-without-cert.yaml": "at '/webhook/certSecretName': minLength: got 0, want 1",
    "namespace-name.yaml": "at '/operator/watchNamespaces/0': 'Team_A' does not match pattern",
    "redis-writable-rootfs.yaml": (
        "at '/redis/securityContext/readOnlyRootFilesystem': value must be true"
    ),
    "capabilities-kept.yaml": (
        "at '/operator/securityContext/capabilities/drop': no items match contains schema"
    ),
    "seccomp-unconfined.yaml": (
        "at '/operator/podSecurityContext/seccompProfile/type': value must be one of "
        "'RuntimeDefault', 'Localhost'"
    ),
    "runtime-class-name.yaml": "at '/sessions/runtimeClassName': 'gVisor' does not match pattern",
    "redis-tls-without-secret.yaml": "at '/redis/tls/secretName': minLength: got 0, want 1",
    "llm-egress-cidr.yaml": (
        "at '/networkPolicy/llmEgress/cidrs/0': 'api.openai.com' does not match pattern"
    ),
    "redis-no-limits.yaml": "at '/redis/resources': missing property 'limits'",
    "log-level.yaml": (
        "at '/operator/logLevel': value must be one of 'DEBUG', 'INFO', 'WARNING', 'ERROR'"
    ),
}


def test_every_bad_file_has_an_expected_message() -> None:
    assert sorted(p.name for p in BAD.glob("*.yaml")) == sorted(CASES)


@pytest.mark.parametrize("name", sorted(CASES))
def test_schema_rejects_bad_values(name: str) -> None:
    proc = run_helm(
        "template",
        "berth",
        str(CHART),
        "--kube-version",
        KUBE_VERSION,
        "-f",
        str(BAD / name),
        check=False,
    )
    assert proc.returncode != 0, f"{name} was accepted"
    assert "values don't meet the specifications of the schema" in proc.stderr
    assert CASES[name] in proc.stderr, proc.stderr


def test_default_values_pass_the_schema() -> None:
    assert render()


def test_dev_and_external_redis_values_pass_the_schema() -> None:
    values = yaml.safe_load((BAD / "redis-missing-url.yaml").read_text())
    values["redis"]["url"] = "redis://redis.example:6379/0"
    assert "redis://redis.example:6379/0" in render(values)
