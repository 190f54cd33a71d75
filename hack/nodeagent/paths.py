"""Container path -> host path mapping for process pods (test-only node agent).

Many process pods share one host, so every absolute container path a pod can see (each
volumeMount's ``mountPath``, the ``terminationMessagePath``) is mapped to a per-pod or per-claim
host directory. ``PathMap.substitute`` rewrites those prefixes inside env values, command and args
(longest prefix first, whole path components only). Called by ``hack/process_node_agent.py``.
"""

from __future__ import annotations

import posixpath
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

DEFAULT_TERMINATION_MESSAGE_PATH = "/dev/termination-log"

# A character that may continue a path component: a prefix match must not be followed by one
# (so "/data" does not match "/database" or "/data.txt") nor preceded by one (so "/data" does not
# match inside "/srv/data"), except right after a URL scheme ("file:///data").
_PATH_CHARS = r"\w.\-~/"


@dataclass(frozen=True)
class Mount:
    """One volumeMount of the container resolved to a host path."""

    volume: str
    container_path: str
    host_path: str
    read_only: bool


def _norm(path: str) -> str:
    """Normalise an absolute container path ("/a//b/" -> "/a/b")."""
    return posixpath.normpath(path) if path else path


class PathMap:
    """Maps absolute container paths to host paths by longest matching prefix."""

    def __init__(self, mapping: Mapping[str, str]) -> None:
        cleaned: dict[str, str] = {}
        for container, host in mapping.items():
            c = _norm(container)
            if not c.startswith("/") or c == "/":
                continue
            cleaned[c] = host.rstrip("/") or "/"
        self.mapping = cleaned
        self._prefixes = sorted(cleaned, key=len, reverse=True)
        if self._prefixes:
            alternation = "|".join(re.escape(p) for p in self._prefixes)
            self._regex: re.Pattern[str] | None = re.compile(
                rf"(?:(?<=://)|(?<![{_PATH_CHARS}]))({alternation})(?![\w.\-~])"
            )
        else:
            self._regex = None

    def map_path(self, path: str) -> str | None:
        """Host path for an absolute container path, or None when no prefix covers it."""
        p = _norm(path)
        for prefix in self._prefixes:
            if p == prefix:
                return self.mapping[prefix]
            if p.startswith(prefix + "/"):
                return self.mapping[prefix] + p[len(prefix) :]
        return None

    def substitute(self, text: str) -> str:
        """Replace every mapped container path prefix found in ``text`` (one pass)."""
        if self._regex is None or "/" not in text:
            return text
        return self._regex.sub(lambda m: self.mapping[m.group(1)], text)


def volume_host_paths(
    pod: Mapping[str, Any], pod_dir: str, pvc_root: str
) -> dict[str, tuple[str, str]]:
    """Host path and kind for every volume of the pod: ``{name: (kind, host_path)}``.

    persistentVolumeClaim -> ``<pvc_root>/<namespace>/<claimName>`` (shared by all pods of the
    claim); hostPath -> the path itself; everything else -> ``<pod_dir>/volumes/<name>``.
    """
    ns = pod["metadata"].get("namespace", "default")
    out: dict[str, tuple[str, str]] = {}
    for vol in pod.get("spec", {}).get("volumes") or []:
        name = vol["name"]
        if "persistentVolumeClaim" in vol:
            claim = vol["persistentVolumeClaim"]["claimName"]
            out[name] = ("persistentVolumeClaim", posixpath.join(pvc_root, ns, claim))
        elif "hostPath" in vol:
            out[name] = ("hostPath", vol["hostPath"]["path"])
        else:
            kind = next((k for k in vol if k != "name"), "emptyDir")
            out[name] = (kind, posixpath.join(pod_dir, "volumes", name))
    return out


def container_mounts(
    container: Mapping[str, Any], volumes: Mapping[str, tuple[str, str]]
) -> list[Mount]:
    """Resolve the container's volumeMounts (with subPath) to host paths."""
    mounts: list[Mount] = []
    for vm in container.get("volumeMounts") or []:
        vol = volumes.get(vm["name"])
        if vol is None:
            continue
        host = vol[1]
        sub = (vm.get("subPath") or "").strip("/")
        if sub:
            host = posixpath.join(host, sub)
        mounts.append(
            Mount(
                volume=vm["name"],
                container_path=_norm(vm["mountPath"]),
                host_path=host,
                read_only=bool(vm.get("readOnly")),
            )
        )
    return mounts


def build_path_map(
    container: Mapping[str, Any], mounts: list[Mount], termination_log_host: str
) -> PathMap:
    """The PathMap of one container: its mounts plus its terminationMessagePath."""
    mapping = {m.container_path: m.host_path for m in mounts}
    tm = container.get("terminationMessagePath") or DEFAULT_TERMINATION_MESSAGE_PATH
    mapping[_norm(tm)] = termination_log_host
    return PathMap(mapping)
