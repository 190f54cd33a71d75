"""Container environment resolution for process pods (test-only node agent).

Implements what kubelet does before starting a container: ``envFrom`` (configMapRef/secretRef,
``prefix``, ``optional``), ``env`` entries (``value``, ``valueFrom.configMapKeyRef``,
``secretKeyRef``, ``fieldRef``) and kubelet's ``$(VAR)`` expansion (``$$`` escapes, unknown
references stay literal) in env values, command and args. Object lookups are injected as callables
returning the object's decoded data (or None when the object does not exist), so everything here
is pure. Called by ``hack/process_node_agent.py``.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import Any

DataLookup = Callable[[str], Mapping[str, str] | None]

_ENV_NAME = re.compile(r"^[-._a-zA-Z][-._a-zA-Z0-9]*$")
_LABEL_REF = re.compile(r"^metadata\.(labels|annotations)\['(.+)'\]$")


class ConfigError(Exception):
    """A container cannot start yet (kubelet's CreateContainerConfigError): missing object/key."""


def expand(text: str, env: Mapping[str, str]) -> str:
    """kubelet's ``$(VAR)`` expansion (k8s.io/kubernetes third_party/forked/golang/expansion)."""
    out: list[str] = []
    checkpoint = 0
    cursor = 0
    n = len(text)
    while cursor < n:
        if text[cursor] == "$" and cursor + 1 < n:
            out.append(text[checkpoint:cursor])
            rest = text[cursor + 1 :]
            if rest[0] == "$":
                out.append("$")
                advance = 1
            elif rest[0] == "(":
                close = rest.find(")", 1)
                if close == -1:
                    out.append("$(")
                    advance = 1
                else:
                    name = rest[1:close]
                    out.append(env.get(name, f"$({name})"))
                    advance = close + 1
            else:
                out.append("$" + rest[0])
                advance = 1
            cursor += advance
            checkpoint = cursor + 1
        cursor += 1
    return "".join(out) + text[checkpoint:]


def field_value(pod: Mapping[str, Any], field_path: str, pod_ip: str, host_ip: str) -> str:
    """Value of a downward API ``fieldRef.fieldPath`` for this pod."""
    meta = pod.get("metadata", {})
    spec = pod.get("spec", {})
    simple: dict[str, str] = {
        "metadata.name": meta.get("name", ""),
        "metadata.namespace": meta.get("namespace", ""),
        "metadata.uid": meta.get("uid", ""),
        "spec.nodeName": spec.get("nodeName", ""),
        "spec.serviceAccountName": spec.get("serviceAccountName", "default"),
        "status.podIP": pod_ip,
        "status.podIPs": pod_ip,
        "status.hostIP": host_ip,
        "status.hostIPs": host_ip,
    }
    if field_path in simple:
        return simple[field_path]
    m = _LABEL_REF.match(field_path)
    if m:
        return str((meta.get(m.group(1)) or {}).get(m.group(2), ""))
    if field_path in ("metadata.labels", "metadata.annotations"):
        items = meta.get(field_path.split(".")[1]) or {}
        return "\n".join(f'{k}="{v}"' for k, v in sorted(items.items()))
    raise ConfigError(f"unsupported fieldRef fieldPath {field_path!r}")


def _key_ref(ref: Mapping[str, Any], kind: str, lookup: DataLookup, var: str) -> str | None:
    name = ref.get("name", "")
    key = ref["key"]
    optional = bool(ref.get("optional"))
    data = lookup(name)
    if data is None:
        if optional:
            return None
        raise ConfigError(f'{kind} "{name}" not found (env {var})')
    if key not in data:
        if optional:
            return None
        raise ConfigError(f"couldn't find key {key} in {kind} {name} (env {var})")
    return data[key]


def resolve_env(
    pod: Mapping[str, Any],
    container: Mapping[str, Any],
    *,
    pod_ip: str,
    host_ip: str,
    configmaps: DataLookup,
    secrets: DataLookup,
) -> dict[str, str]:
    """The container's environment as kubelet computes it (before host path substitution).

    Raises ConfigError when a non-optional ConfigMap/Secret or key is missing.
    """
    env: dict[str, str] = {}
    for source in container.get("envFrom") or []:
        prefix = source.get("prefix", "")
        if "configMapRef" in source:
            ref, kind, lookup = source["configMapRef"], "configmap", configmaps
        elif "secretRef" in source:
            ref, kind, lookup = source["secretRef"], "secret", secrets
        else:
            continue
        data = lookup(ref.get("name", ""))
        if data is None:
            if ref.get("optional"):
                continue
            raise ConfigError(f'{kind} "{ref.get("name", "")}" not found (envFrom)')
        for k, v in data.items():
            name = prefix + k
            if _ENV_NAME.match(name):
                env[name] = v
    for item in container.get("env") or []:
        name = item["name"]
        if "valueFrom" not in item:
            env[name] = expand(item.get("value", ""), env)
            continue
        src = item["valueFrom"]
        value: str | None
        if "fieldRef" in src:
            value = field_value(pod, src["fieldRef"]["fieldPath"], pod_ip, host_ip)
        elif "configMapKeyRef" in src:
            value = _key_ref(src["configMapKeyRef"], "configmap", configmaps, name)
        elif "secretKeyRef" in src:
            value = _key_ref(src["secretKeyRef"], "secret", secrets, name)
        else:
            # resourceFieldRef and friends are not modelled on process nodes.
            value = None
        if value is not None:
            env[name] = value
    return env


def container_argv(container: Mapping[str, Any], env: Mapping[str, str]) -> list[str]:
    """command + args with ``$(VAR)`` expanded. The image is ignored on process nodes, so a
    container without ``command`` runs its ``args`` as the argv."""
    command = [expand(c, env) for c in container.get("command") or []]
    args = [expand(a, env) for a in container.get("args") or []]
    return command + args
