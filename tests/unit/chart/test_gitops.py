"""The chart renders the same manifests for the same values (GitOps: Argo CD and Flux compare a
``helm template`` with what runs), given the Redis passwords (docs/install.md, GitOps); and the
bundled Redis keeps its data on a claim by default (appendonly)."""

from __future__ import annotations

import base64
import copy
from typing import Any

import pytest

from tests.unit.chart.helm import ALL_FEATURES, by_kind, documents, one, render

PASSWORDS = {
    "session": "session-0123456789abcdef",
    "worker": "worker-0123456789abcdef",
    "operator": "operator-0123456789abcdef",
}


def with_redis(**redis: Any) -> dict[str, Any]:
    values = copy.deepcopy(ALL_FEATURES)
    values["redis"] = {**values.get("redis", {}), **redis}
    return values


@pytest.mark.parametrize(
    "auth",
    [{"existingSecret": "my-redis-auth"}, {"passwords": PASSWORDS}],
    ids=["existingSecret", "passwords"],
)
def test_two_renders_with_the_passwords_given_are_identical(auth: dict[str, Any]) -> None:
    values = with_redis(auth=auth)
    first, second = render(values), render(values)
    assert first == second
    # ... and the operator reads the passwords from that one Secret.
    docs = documents(first)
    deploy = one(docs, "Deployment", "-operator")
    refs = {
        e["valueFrom"]["secretKeyRef"]["name"]
        for e in deploy["spec"]["template"]["spec"]["containers"][0]["env"]
        if e["name"].startswith("REDIS_") and "valueFrom" in e
    }
    secret_name = auth.get("existingSecret") or "berth-redis-auth"
    assert refs == {secret_name}


def test_the_chart_writes_the_given_passwords() -> None:
    docs = documents(render(with_redis(auth={"passwords": PASSWORDS})))
    secret = one(docs, "Secret", "-redis-auth")
    data = {k: base64.b64decode(v).decode() for k, v in secret["data"].items()}
    assert data == {f"{role}-password": pw for role, pw in PASSWORDS.items()}


def test_without_given_passwords_only_the_generated_secret_changes() -> None:
    # Why GitOps needs one of the two: a render without a cluster generates new passwords.
    first, second = documents(render()), documents(render())
    assert len(first) == len(second)
    changed = [a["metadata"]["name"] for a, b in zip(first, second, strict=True) if a != b]
    assert changed == ["berth-redis-auth"]


def test_some_passwords_but_not_all_is_refused() -> None:
    with pytest.raises(AssertionError, match="set all three"):
        render(with_redis(auth={"passwords": {"session": PASSWORDS["session"]}}))


def test_a_short_password_is_refused_by_the_schema() -> None:
    with pytest.raises(AssertionError, match="passwords"):
        render(with_redis(auth={"passwords": {**PASSWORDS, "worker": "short"}}))


def redis_parts(values: dict[str, Any] | None) -> tuple[dict[str, Any], str, list[dict[str, Any]]]:
    """(data volume of the Redis pod, its redis.conf, the rendering's claims)."""
    docs = documents(render(values))
    deploy = one(docs, "Deployment", "-redis")
    volumes = {v["name"]: v for v in deploy["spec"]["template"]["spec"]["volumes"]}
    conf = one(docs, "ConfigMap", "-redis-config")["data"]["redis.conf"]
    return volumes["data"], conf, by_kind(docs, "PersistentVolumeClaim")


def test_the_bundled_redis_keeps_an_append_only_file_on_a_claim_by_default() -> None:
    data, conf, claims = redis_parts(None)
    assert data == {"name": "data", "persistentVolumeClaim": {"claimName": "berth-redis-data"}}
    assert "appendonly yes" in conf.splitlines()
    assert "appendfsync everysec" in conf.splitlines()
    (claim,) = claims
    assert claim["metadata"]["name"] == "berth-redis-data"
    assert claim["spec"]["resources"]["requests"]["storage"] == "1Gi"
    assert "storageClassName" not in claim["spec"]  # the cluster's default class
    # Deleted with the release: no resource-policy keep.
    assert "helm.sh/resource-policy" not in (claim["metadata"].get("annotations") or {})


def test_persistence_off_is_an_empty_dir_and_no_append_only_file() -> None:
    values = {"redis": {"persistence": {"enabled": False}}}
    data, conf, claims = redis_parts(values)
    assert "emptyDir" in data
    assert "appendonly no" in conf.splitlines()
    assert claims == []


def test_persistence_names_the_class_and_size() -> None:
    values = {"redis": {"persistence": {"storageClassName": "fast", "size": "5Gi"}}}
    _, _, (claim,) = redis_parts(values)
    assert claim["spec"]["storageClassName"] == "fast"
    assert claim["spec"]["resources"]["requests"]["storage"] == "5Gi"


def test_an_external_redis_ca_is_mounted_into_the_operator() -> None:
    pem = "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n"
    url = "rediss://r.example:6380/0?ssl_ca_certs=/var/run/berth/redis-tls/ca.crt"
    values = {"redis": {"enabled": False, "url": url, "tls": {"caCert": pem}}}
    docs = documents(render(values))
    secret = one(docs, "Secret", "-redis-ca")
    assert base64.b64decode(secret["data"]["ca.crt"]).decode() == pem
    spec = one(docs, "Deployment", "-operator")["spec"]["template"]["spec"]
    volumes = {v["name"]: v for v in spec["volumes"]}
    assert volumes["redis-tls-ca"]["secret"]["secretName"] == secret["metadata"]["name"]
    mounts = {m["name"]: m for m in spec["containers"][0]["volumeMounts"]}
    assert mounts["redis-tls-ca"]["mountPath"] == "/var/run/berth/redis-tls"
    # Without a CA nothing is mounted.
    plain = documents(render({"redis": {"enabled": False, "url": "redis://r:6379/0"}}))
    assert not [d for d in plain if d["metadata"]["name"].endswith("-redis-ca")]
