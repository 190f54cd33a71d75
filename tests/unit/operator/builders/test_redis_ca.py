"""The Redis CA in Berth's pods (berth_operator.builders.redis_ca): every pod given a Redis URL
that names a CA file (``ssl_ca_certs``) mounts that file at that path, from the namespace's
``berth-redis-ca`` Secret; a URL naming none adds nothing."""

from __future__ import annotations

import base64
from typing import Any

import pytest
from berth_operator.api.constants import REDIS_CA_SECRET
from berth_operator.api.laneworker import LaneWorkerSpec
from berth_operator.api.sessionwarmpool import WarmPodTemplate
from berth_operator.builders.laneworker import LaneWorkerRef, build_deployment
from berth_operator.builders.redis_ca import (
    build_redis_ca_secret,
    redis_ca_path,
    redis_ca_paths,
)
from berth_operator.builders.session_pod import build_session_pod
from berth_operator.builders.warm_pod import build_warm_pod
from berth_operator.settings import ImageSettings, OperatorSettings, RedisSettings

from tests.unit.operator.fixtures import make_session

CA = "/var/run/berth/redis-tls/ca.crt"
TLS = OperatorSettings(
    redis=RedisSettings(
        url="rediss://r:6379/0",
        session_url=f"rediss://berth-session:pw@r:6379/0?ssl_ca_certs={CA}",
        worker_url="rediss://berth-worker:pw@r:6379/0?ssl_ca_certs=/etc/w/worker-ca.pem",
    ),
    images=ImageSettings(session="img:1"),
)
PLAIN = OperatorSettings(redis=RedisSettings(url="redis://r:6379/0"))


def ca_mounts(pod_spec: dict[str, Any]) -> list[tuple[str, str, str]]:
    """(mountPath, secret, item path) of each mount backed by berth-redis-ca."""
    volumes = {v["name"]: v for v in pod_spec.get("volumes", [])}
    out = []
    for m in pod_spec["containers"][0]["volumeMounts"]:
        secret = volumes[m["name"]].get("secret") or {}
        if secret.get("secretName") == REDIS_CA_SECRET:
            assert m["readOnly"] is True
            (item,) = secret["items"]
            out.append((m["mountPath"], secret["secretName"], item["path"]))
    return out


@pytest.mark.parametrize(
    ("url", "path"),
    [
        (f"rediss://u:p@h:6379/0?ssl_ca_certs={CA}", CA),
        ("rediss://u:p@h:6379/0?ssl_cert_reqs=required&ssl_ca_certs=/a/../b/ca.pem", "/b/ca.pem"),
        ("rediss://u:p@h:6379/0", None),
        ("rediss://u:p@h:6379/0?ssl_ca_certs=ca.pem", None),  # relative: no one file
        ("", None),
    ],
)
def test_the_ca_path_is_the_urls_ssl_ca_certs(url: str, path: str | None) -> None:
    assert redis_ca_path(url) == path


def test_session_pods_mount_the_ca_their_url_names() -> None:
    s = make_session()
    pod = build_session_pod(s.ref(), s.spec(), TLS, epoch=1, resume_run_id=None, reason="New")
    assert ca_mounts(pod["spec"]) == [("/var/run/berth/redis-tls", REDIS_CA_SECRET, "ca.crt")]
    plain = build_session_pod(s.ref(), s.spec(), PLAIN, epoch=1, resume_run_id=None, reason="New")
    assert ca_mounts(plain["spec"]) == []


def test_warm_pods_mount_the_session_roles_ca() -> None:
    # A warm pod is told the session URL at adoption: the file must already be there.
    pod = build_warm_pod("ns", "p", "uid", WarmPodTemplate.model_validate({}), "h", TLS)
    assert ca_mounts(pod["spec"]) == [("/var/run/berth/redis-tls", REDIS_CA_SECRET, "ca.crt")]


def test_laneworker_pods_mount_the_worker_roles_ca() -> None:
    ref = LaneWorkerRef("ns", "exec", "uid")
    dep = build_deployment(ref, LaneWorkerSpec(), TLS, replicas=1)
    assert ca_mounts(dep["spec"]["template"]["spec"]) == [
        ("/etc/w", REDIS_CA_SECRET, "worker-ca.pem")
    ]
    plain = build_deployment(ref, LaneWorkerSpec(), PLAIN, replicas=1)
    assert ca_mounts(plain["spec"]["template"]["spec"]) == []


def test_the_secret_holds_each_named_file_under_its_name() -> None:
    paths = redis_ca_paths([TLS.redis.for_sessions, TLS.redis.for_workers, PLAIN.redis.url])
    assert paths == ["/etc/w/worker-ca.pem", CA]
    secret = build_redis_ca_secret("ns", {p: p.encode() for p in paths})
    assert secret["metadata"] == {
        "name": REDIS_CA_SECRET,
        "namespace": "ns",
        "labels": {"app.kubernetes.io/managed-by": "berth"},
    }
    assert {k: base64.b64decode(v).decode() for k, v in secret["data"].items()} == {
        "ca.crt": CA,
        "worker-ca.pem": "/etc/w/worker-ca.pem",
    }
    with pytest.raises(ValueError, match="share the file name"):
        build_redis_ca_secret("ns", {"/a/ca.crt": b"x", "/b/ca.crt": b"y"})
