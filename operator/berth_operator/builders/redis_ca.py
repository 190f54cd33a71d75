"""The Redis CA in Berth's pods: a ``rediss://`` URL may name the CA file that verifies the
server (redis-py's ``ssl_ca_certs`` query parameter, as the chart's role URLs do for the bundled
Redis with TLS). That path is a file of the operator's own filesystem; every pod given the URL
must find the same file at the same path, or its first Redis connection fails.

The operator copies each named file into the namespace's ``berth-redis-ca`` Secret (key = the
file's name; a CA is not secret, but the operator may already write Secrets and nothing else of
the kind) and session, warm and LaneWorker pods mount the key their URL names, read-only, at
the file's directory. Pure: the caller reads the files (:func:`redis_ca_paths` says which).
"""

from __future__ import annotations

import base64
import posixpath
from collections.abc import Iterable, Mapping
from typing import Any
from urllib.parse import parse_qs, urlsplit

from berth_operator.api.constants import LABEL_MANAGED_BY, REDIS_CA_SECRET
from berth_operator.builders.secrets import MASTER_MANAGED_BY

CA_QUERY_PARAM = "ssl_ca_certs"
"""Query parameter of a Redis URL naming the CA file (redis-py's connection keyword)."""
REDIS_CA_VOLUME = "redis-ca"
"""Name of the CA volume in Berth's pods."""


def redis_ca_path(url: str) -> str | None:
    """The absolute CA file path ``url`` names, or None (no parameter, or a relative path, which
    would mean a different file in each container)."""
    if not url:
        return None
    values = parse_qs(urlsplit(url).query).get(CA_QUERY_PARAM) or []
    path = values[-1] if values else ""
    return posixpath.normpath(path) if path.startswith("/") else None


def redis_ca_paths(urls: Iterable[str]) -> list[str]:
    """The distinct CA paths the given URLs name, sorted."""
    return sorted({p for p in (redis_ca_path(u) for u in urls) if p})


def build_redis_ca_secret(namespace: str, files: Mapping[str, bytes]) -> dict[str, Any]:
    """``berth-redis-ca`` holding ``files`` (path → PEM bytes), keyed by each file's name, and
    labelled like the namespace's other Secrets of Berth's (``berth-task-key``).
    Raises ValueError when two paths share a file name (their keys would collide)."""
    data: dict[str, str] = {}
    for path, pem in sorted(files.items()):
        key = posixpath.basename(path)
        if key in data:
            raise ValueError(f"Redis CA files {sorted(files)} share the file name {key!r}")
        data[key] = base64.b64encode(pem).decode()
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "type": "Opaque",
        "metadata": {
            "name": REDIS_CA_SECRET,
            "namespace": namespace,
            "labels": {LABEL_MANAGED_BY: MASTER_MANAGED_BY},
        },
        "data": data,
    }


def add_redis_ca(pod_spec: dict[str, Any], container: dict[str, Any], url: str) -> None:
    """Mount the CA file ``url`` names into ``container`` of ``pod_spec`` (in place), from the
    namespace's ``berth-redis-ca``; nothing when the URL names none. The volume is read-only
    with mode 0444 (a CA is public; the pod's user need not be in the Secret's group)."""
    path = redis_ca_path(url)
    if path is None:
        return
    directory, name = posixpath.split(path)
    pod_spec.setdefault("volumes", []).append(
        {
            "name": REDIS_CA_VOLUME,
            "secret": {
                "secretName": REDIS_CA_SECRET,
                "items": [{"key": name, "path": name}],
                "defaultMode": 0o444,
            },
        }
    )
    container.setdefault("volumeMounts", []).append(
        {"name": REDIS_CA_VOLUME, "mountPath": directory, "readOnly": True}
    )
