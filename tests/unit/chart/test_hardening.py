"""Pod hardening and the Redis credential wiring the chart renders (docs/security.md).

Every container the chart runs is non-root, read-only root filesystem, no privilege escalation,
all capabilities dropped, RuntimeDefault seccomp and resource limits; Redis mounts no
ServiceAccount token. The operator receives one Redis URL per ACL user, its password taken from
the auth Secret by reference (never a literal in the Deployment).
"""

from __future__ import annotations

import base64
import re
from typing import Any

from tests.unit.chart.helm import ALL_FEATURES, by_kind, documents, one, render


def _pod(deploy: dict[str, Any]) -> dict[str, Any]:
    spec: dict[str, Any] = deploy["spec"]["template"]["spec"]
    return spec


def _env(deploy: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {e["name"]: e for e in _pod(deploy)["containers"][0]["env"]}


def test_every_chart_container_is_hardened_with_limits() -> None:
    for values in (None, ALL_FEATURES):
        for deploy in by_kind(documents(render(values)), "Deployment"):
            pod = _pod(deploy)
            assert pod["securityContext"]["runAsNonRoot"] is True
            assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
            assert pod["enableServiceLinks"] is False
            for c in pod.get("initContainers", []) + pod["containers"]:
                sc = c["securityContext"]
                assert sc["readOnlyRootFilesystem"] is True, c["name"]
                assert sc["allowPrivilegeEscalation"] is False, c["name"]
                assert sc["capabilities"] == {"drop": ["ALL"]}, c["name"]
                assert sc["runAsNonRoot"] is True, c["name"]
                assert c["resources"]["limits"]["memory"], c["name"]


def test_the_operator_is_not_pid_1_of_its_pod() -> None:
    """berth-operator installs its signal handlers only once kopf is imported; as PID 1 it would
    drop a SIGTERM that came before and live out its grace period. With a shared process
    namespace pause is PID 1 and such a signal ends the process. Nothing else runs beside it."""
    for values in (None, ALL_FEATURES):
        pod = _pod(one(documents(render(values)), "Deployment", "-operator"))
        assert pod["shareProcessNamespace"] is True
        assert [c["name"] for c in pod["containers"]] == ["operator"]
        assert "initContainers" not in pod


def test_redis_mounts_no_token_and_reads_its_acl_from_an_init_container() -> None:
    docs = documents(render())
    pod = _pod(one(docs, "Deployment", "-redis"))
    assert pod["automountServiceAccountToken"] is False
    assert pod["securityContext"]["runAsUser"] > 0
    init = pod["initContainers"][0]
    assert init["command"] == ["sh", "/etc/berth-redis/render-acl.sh"]
    redis = pod["containers"][0]
    assert redis["args"] == ["/etc/berth-redis/redis.conf"]
    assert {"name": "acl", "mountPath": "/run/redis", "readOnly": True} in redis["volumeMounts"]
    auth = next(v for v in pod["volumes"] if v["name"] == "auth")
    assert auth["secret"]["secretName"] == "berth-redis-auth"
    conf = one(docs, "ConfigMap", "-redis-config")["data"]["redis.conf"]
    assert "aclfile /run/redis/users.acl" in conf and "port 6379" in conf


def test_generated_redis_secret_has_three_strong_passwords() -> None:
    secret = one(documents(render()), "Secret", "-redis-auth")
    assert sorted(secret["data"]) == ["operator-password", "session-password", "worker-password"]
    values = {base64.b64decode(v).decode() for v in secret["data"].values()}
    assert len(values) == 3
    for pw in values:
        assert re.fullmatch(r"[A-Za-z0-9]{40}", pw)


def test_operator_gets_one_url_per_acl_user_from_secret_references() -> None:
    deploy = one(documents(render()), "Deployment", "-operator")
    env = _env(deploy)
    for role in ("session", "worker", "operator"):
        ref = env[f"REDIS_{role.upper()}_PASSWORD"]["valueFrom"]["secretKeyRef"]
        assert ref == {"name": "berth-redis-auth", "key": f"{role}-password"}
        assert env[f"BERTH_REDIS_{role.upper()}_URL"]["value"] == (
            f"redis://berth-{role}:$(REDIS_{role.upper()}_PASSWORD)"
            "@berth-redis.berth-system.svc:6379/0"
        )
    names = [e["name"] for e in _pod(deploy)["containers"][0]["env"]]
    # $(VAR) expands only variables defined earlier in the list.
    assert names.index("REDIS_WORKER_PASSWORD") < names.index("BERTH_REDIS_WORKER_URL")
    assert env["BERTH_REDIS_URL"]["value"] == "redis://berth-redis.berth-system.svc:6379/0"


def test_existing_secret_replaces_the_generated_one() -> None:
    docs = documents(render({"redis": {"auth": {"existingSecret": "my-redis"}}}))
    assert not [d for d in by_kind(docs, "Secret") if d["metadata"]["name"].endswith("-auth")]
    env = _env(one(docs, "Deployment", "-operator"))
    assert env["REDIS_SESSION_PASSWORD"]["valueFrom"]["secretKeyRef"]["name"] == "my-redis"
    auth = next(
        v for v in _pod(one(docs, "Deployment", "-redis"))["volumes"] if v["name"] == "auth"
    )
    assert auth["secret"]["secretName"] == "my-redis"


def test_external_redis_urls_only_with_an_existing_secret() -> None:
    external = {"redis": {"enabled": False, "url": "rediss://u:p@redis.example:6380/2?x=1"}}
    env = _env(one(documents(render(external)), "Deployment", "-operator"))
    assert "BERTH_REDIS_SESSION_URL" not in env
    external["redis"]["auth"] = {"existingSecret": "ext"}  # type: ignore[index]
    env = _env(one(documents(render(external)), "Deployment", "-operator"))
    assert env["BERTH_REDIS_WORKER_URL"]["value"] == (
        "rediss://berth-worker:$(REDIS_WORKER_PASSWORD)@redis.example:6380/2?x=1"
    )


def test_tls_mounts_only_the_ca_into_the_operator() -> None:
    docs = documents(render({"redis": {"tls": {"enabled": True, "secretName": "redis-tls"}}}))
    pod = _pod(one(docs, "Deployment", "-operator"))
    ca = next(v for v in pod["volumes"] if v["name"] == "redis-tls-ca")
    assert ca["secret"] == {
        "secretName": "redis-tls",
        "items": [{"key": "ca.crt", "path": "ca.crt"}],
    }
    mount = next(m for m in pod["containers"][0]["volumeMounts"] if m["name"] == "redis-tls-ca")
    assert mount == {
        "name": "redis-tls-ca",
        "mountPath": "/var/run/berth/redis-tls",
        "readOnly": True,
    }
    conf = one(docs, "ConfigMap", "-redis-config")["data"]["redis.conf"]
    assert "port 0" in conf and "tls-port 6379" in conf and "tls-auth-clients no" in conf


def test_runtime_class_values_become_operator_env() -> None:
    env = _env(one(documents(render(ALL_FEATURES)), "Deployment", "-operator"))
    assert env["BERTH_SESSION_RUNTIME_CLASS"]["value"] == "gvisor"
    assert env["BERTH_WORKER_RUNTIME_CLASS"]["value"] == "kata"
    env = _env(one(documents(render()), "Deployment", "-operator"))
    assert "BERTH_SESSION_RUNTIME_CLASS" not in env and "BERTH_WORKER_RUNTIME_CLASS" not in env
