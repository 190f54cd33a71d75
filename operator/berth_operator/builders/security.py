"""Hardened container settings shared by session and worker pods (pure; the Berth security
contract, "Pod hardening").

- :func:`hardened_container_security`: the container ``securityContext`` every Berth pod gets:
  all capabilities dropped, no privilege escalation, not privileged, ``RuntimeDefault`` seccomp,
  read-only root filesystem, non-root. A LaneWorker's ``template.securityContext`` may only add
  a non-root ``runAsUser``/``runAsGroup``, ``seLinuxOptions`` or a non-``Unconfined``
  ``appArmorProfile``; everything else it says is replaced by the hardened value (the CRD's CEL
  rules already refuse the dangerous ones, so this also covers objects stored before them).
- :data:`SHARE_PROCESS_NAMESPACE`: Berth's processes are not PID 1 of their PID namespace.
- :func:`with_default_resources`: container resources with the operator's default requests and
  limits filled in where the user set none (a limit is never below the user's request).
"""

from __future__ import annotations

from collections.abc import Mapping
from decimal import Decimal
from typing import Any, Final

from berth_operator.api.common import LocalObjectReference
from berth_operator.settings import OperatorSettings

HARDENED_SECURITY: Final[Mapping[str, Any]] = {
    "allowPrivilegeEscalation": False,
    "privileged": False,
    "readOnlyRootFilesystem": True,
    "runAsNonRoot": True,
    "capabilities": {"drop": ["ALL"]},
    "seccompProfile": {"type": "RuntimeDefault"},
}
"""The container securityContext forced on every session and worker container."""

_PASS_THROUGH: Final = ("runAsUser", "runAsGroup", "seLinuxOptions", "appArmorProfile")

SHARE_PROCESS_NAMESPACE: Final = True
"""``shareProcessNamespace`` of session, warm and worker pods: the pod's containers share one PID
namespace whose PID 1 is the pause container (which also reaps orphaned tool processes), so
``berth-session`` and ``berth-worker`` are not PID 1. The kernel drops a signal sent to PID 1
without a handler; a process that is not PID 1 gets the default action instead. A pod deleted
while its interpreter starts (before ``session_runtime.early_signals`` catches SIGTERM) therefore
ends at once instead of running on until the kubelet's SIGKILL at the end of its grace period
(135 s for a session pod). The only other process the containers see is pause."""


def pull_secrets(
    own: list[LocalObjectReference] | None, settings: OperatorSettings
) -> list[dict[str, str]]:
    """``imagePullSecrets`` of a pod: the object's own list when it sets one (even empty),
    else the operator's ``image_pull_secrets``."""
    names = [r.name for r in own] if own is not None else settings.images.pull_secrets
    return [{"name": n} for n in names]


def pod_security_context(uid: int) -> dict[str, Any]:
    """The pod securityContext of session, worker and cleanup pods: non-root ``uid`` as user,
    group and fsGroup (so the shared volume's files stay the pods' own where the volume type
    supports ownership management), ``fsGroupChangePolicy: OnRootMismatch`` (the kubelet walks a
    volume to change its group only when the root's differs, not at every mount of a large
    store), RuntimeDefault seccomp (Pod Security Standards "restricted")."""
    return {
        "runAsNonRoot": True,
        "runAsUser": uid,
        "runAsGroup": uid,
        "fsGroup": uid,
        "fsGroupChangePolicy": "OnRootMismatch",
        "seccompProfile": {"type": "RuntimeDefault"},
    }


def hardened_container_security(overrides: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The container securityContext: :data:`HARDENED_SECURITY` plus the harmless parts of
    ``overrides`` (a core/v1 SecurityContext as a dict). ``runAsUser``/``runAsGroup`` 0 and an
    ``Unconfined`` appArmorProfile are dropped, never passed on."""
    out: dict[str, Any] = {k: _copy(v) for k, v in HARDENED_SECURITY.items()}
    for key in _PASS_THROUGH:
        if not overrides or key not in overrides:
            continue
        value = overrides[key]
        if key in ("runAsUser", "runAsGroup") and (not isinstance(value, int) or value == 0):
            continue
        if key == "appArmorProfile" and (
            not isinstance(value, Mapping) or value.get("type") == "Unconfined"
        ):
            continue
        out[key] = _copy(value)
    return out


def _copy(value: Any) -> Any:
    if isinstance(value, Mapping):
        return {k: _copy(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_copy(v) for v in value]
    return value


_SUFFIXES: Final = {
    "Ki": Decimal(2**10),
    "Mi": Decimal(2**20),
    "Gi": Decimal(2**30),
    "Ti": Decimal(2**40),
    "Pi": Decimal(2**50),
    "Ei": Decimal(2**60),
    "n": Decimal("1e-9"),
    "u": Decimal("1e-6"),
    "m": Decimal("1e-3"),
    "k": Decimal("1e3"),
    "M": Decimal("1e6"),
    "G": Decimal("1e9"),
    "T": Decimal("1e12"),
    "P": Decimal("1e15"),
    "E": Decimal("1e18"),
}


def _quantity(value: Any) -> Decimal | None:
    """A Kubernetes quantity (``500m``, ``2Gi``, ``1e3``, 3) as a number; None if unreadable."""
    if value is None:
        return None
    text = str(value).strip()
    for suffix in sorted(_SUFFIXES, key=len, reverse=True):
        if text.endswith(suffix) and not (suffix == "E" and "e" in text.lower()[:-1]):
            try:
                return Decimal(text[: -len(suffix)]) * _SUFFIXES[suffix]
            except ArithmeticError:
                return None
    try:
        return Decimal(text)
    except ArithmeticError:
        return None


def with_default_resources(
    resources: Mapping[str, Any] | None, settings: OperatorSettings
) -> dict[str, Any]:
    """``resources`` (core/v1 ResourceRequirements as a dict, not modified) with the operator's
    default cpu/memory requests and limits added where missing. A default limit below the
    user's own request is raised to that request, so the apiserver never sees request > limit;
    a default request above the user's own limit is lowered to that limit."""
    requests = dict((resources or {}).get("requests") or {})
    limits = dict((resources or {}).get("limits") or {})
    defaults = {
        "cpu": (settings.pods.default_cpu_request, settings.pods.default_cpu_limit),
        "memory": (settings.pods.default_memory_request, settings.pods.default_memory_limit),
    }
    for name, (default_request, default_limit) in defaults.items():
        if name not in limits:
            limit: Any = default_limit
            asked, cap = _quantity(requests.get(name)), _quantity(default_limit)
            if asked is not None and cap is not None and asked > cap:
                limit = requests[name]
            limits[name] = limit
        if name not in requests:
            request: Any = default_request
            want, cap = _quantity(default_request), _quantity(limits[name])
            if want is not None and cap is not None and want > cap:
                request = limits[name]
            requests[name] = request
    out = {k: v for k, v in (resources or {}).items() if k not in ("requests", "limits")}
    return {**out, "requests": requests, "limits": limits}
