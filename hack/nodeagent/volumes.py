"""File contents of ConfigMap, Secret, downwardAPI and projected volumes (test-only node agent).

``keyed_files`` and ``downward_files`` are pure: they turn an object's data and the volume's
``items``/``defaultMode`` into ``(relative path, bytes, mode)`` triples. ``write_files`` writes
them into the volume's host directory atomically per file. Called by
``hack/process_node_agent.py``.
"""

from __future__ import annotations

import os
import posixpath
import tempfile
from collections.abc import Mapping, Sequence
from typing import Any

from .env import field_value

FileSpec = tuple[str, bytes, int]
DEFAULT_MODE = 0o644


def keyed_files(
    data: Mapping[str, bytes],
    items: Sequence[Mapping[str, Any]] | None,
    default_mode: int | None,
) -> list[FileSpec]:
    """Files of a ConfigMap/Secret volume: every key, or only ``items`` (key -> path, mode).

    Raises KeyError for an item whose key is missing (kubelet refuses to mount such a volume
    unless the source is optional)."""
    mode = DEFAULT_MODE if default_mode is None else default_mode
    if not items:
        return [(k, v, mode) for k, v in sorted(data.items())]
    out: list[FileSpec] = []
    for item in items:
        key = item["key"]
        if key not in data:
            raise KeyError(key)
        out.append((item.get("path") or key, data[key], item.get("mode", mode)))
    return out


def downward_files(
    pod: Mapping[str, Any],
    items: Sequence[Mapping[str, Any]],
    default_mode: int | None,
    pod_ip: str,
    host_ip: str,
) -> list[FileSpec]:
    """Files of a downwardAPI volume (fieldRef items only)."""
    mode = DEFAULT_MODE if default_mode is None else default_mode
    out: list[FileSpec] = []
    for item in items:
        if "fieldRef" not in item:
            continue
        value = field_value(pod, item["fieldRef"]["fieldPath"], pod_ip, host_ip)
        out.append((item["path"], value.encode(), item.get("mode", mode)))
    return out


def safe_relpath(path: str) -> str:
    """A volume item path kept inside its volume ("../x" and absolute paths are refused)."""
    norm = posixpath.normpath(path)
    if norm.startswith("/") or norm == ".." or norm.startswith("../"):
        raise ValueError(f"volume item path {path!r} leaves the volume")
    return norm


def write_files(root: str, files: Sequence[FileSpec]) -> None:
    """Write the files under ``root`` (temp file + rename, so readers never see a torn file)."""
    os.makedirs(root, exist_ok=True)
    for rel, content, mode in files:
        target = os.path.join(root, safe_relpath(rel))
        os.makedirs(os.path.dirname(target), exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=os.path.dirname(target), prefix=".tmp-")
        try:
            with os.fdopen(fd, "wb") as fh:
                fh.write(content)
            os.chmod(tmp, mode)
            os.replace(tmp, target)
        except BaseException:
            if os.path.exists(tmp):
                os.unlink(tmp)
            raise
