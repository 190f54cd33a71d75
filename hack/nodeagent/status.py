"""Pod status and Node object builders for process pods and nodes (test-only node agent).

Pure functions: they take what the agent observed (process start/exit, readiness, pod IP) plus the
previous conditions and a timestamp and return the JSON the agent writes. ``lastTransitionTime``
moves only when a condition's status changes. Called by ``hack/process_node_agent.py``.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

MAX_TERMINATION_MESSAGE = 4096
KUBELET_VERSION = "v1.34.4"
NODE_ROLE_LABEL = "berth.dev/process-node"


def rfc3339(t: dt.datetime) -> str:
    """Kubernetes metav1.Time text (UTC, second precision)."""
    return t.astimezone(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def rfc3339_micro(t: dt.datetime) -> str:
    """Kubernetes metav1.MicroTime text (UTC, microsecond precision), for Lease renewTime."""
    return t.astimezone(dt.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def exit_code_of(returncode: int) -> int:
    """Container exit code from a Popen returncode (-N for signal N -> 128+N, as runtimes do)."""
    return 128 - returncode if returncode < 0 else returncode


def truncate_message(raw: bytes) -> str:
    """Termination message: at most 4096 bytes of the file, decoded leniently."""
    return raw[:MAX_TERMINATION_MESSAGE].decode("utf-8", errors="replace")


@dataclass(frozen=True)
class Exited:
    """A finished container attempt."""

    exit_code: int
    message: str
    started_at: str
    finished_at: str
    container_id: str


def terminated_state(ex: Exited) -> dict[str, Any]:
    """ContainerState with ``terminated`` (reason Completed for 0, Error otherwise)."""
    term: dict[str, Any] = {
        "exitCode": ex.exit_code,
        "reason": "Completed" if ex.exit_code == 0 else "Error",
        "startedAt": ex.started_at,
        "finishedAt": ex.finished_at,
        "containerID": ex.container_id,
    }
    if ex.message:
        term["message"] = ex.message
    return {"terminated": term, "running": None, "waiting": None}


def running_state(started_at: str) -> dict[str, Any]:
    return {"running": {"startedAt": started_at}, "terminated": None, "waiting": None}


def waiting_state(reason: str, message: str = "") -> dict[str, Any]:
    waiting: dict[str, Any] = {"reason": reason}
    if message:
        waiting["message"] = message
    return {"waiting": waiting, "running": None, "terminated": None}


def container_status(
    container: Mapping[str, Any],
    *,
    state: Mapping[str, Any],
    last_state: Mapping[str, Any] | None,
    ready: bool,
    restart_count: int,
    container_id: str | None,
) -> dict[str, Any]:
    """One entry of status.containerStatuses (or initContainerStatuses)."""
    image = container.get("image", "")
    cs: dict[str, Any] = {
        "name": container["name"],
        "image": image,
        "imageID": f"process://{image}",
        "ready": ready,
        "started": state.get("running") is not None,
        "restartCount": restart_count,
        "state": {k: v for k, v in state.items() if v is not None},
        "lastState": {k: v for k, v in (last_state or {}).items() if v is not None},
    }
    if container_id:
        cs["containerID"] = container_id
    return cs


def _condition(
    ctype: str,
    status: str,
    prev: Mapping[str, Mapping[str, Any]],
    now: str,
    reason: str | None = None,
    message: str | None = None,
) -> dict[str, Any]:
    old = prev.get(ctype)
    moved = old is None or old.get("status") != status
    cond: dict[str, Any] = {
        "type": ctype,
        "status": status,
        "lastProbeTime": None,
        "lastTransitionTime": now if old is None or moved else old.get("lastTransitionTime", now),
    }
    if reason:
        cond["reason"] = reason
    if message:
        cond["message"] = message
    return cond


def pod_conditions(
    *,
    phase: str,
    ready: bool,
    container_name: str,
    prev: Sequence[Mapping[str, Any]],
    now: str,
    pending_init: Sequence[str] = (),
) -> list[dict[str, Any]]:
    """Kubelet's pod conditions: PodReadyToStartContainers, Initialized, Ready, ContainersReady,
    PodScheduled (kept True as the scheduler wrote it). ``pending_init`` names the init
    containers that have not completed yet."""
    by_type = {c["type"]: c for c in prev}
    terminal = phase in ("Succeeded", "Failed")
    if pending_init and not terminal:
        init = _condition(
            "Initialized",
            "False",
            by_type,
            now,
            "ContainersNotInitialized",
            f"containers with incomplete status: [{' '.join(pending_init)}]",
        )
    else:
        init = _condition("Initialized", "True", by_type, now, "PodCompleted" if terminal else None)
    if ready:
        reason = message = None
    elif terminal:
        reason, message = "PodCompleted", None
    else:
        reason = "ContainersNotReady"
        message = f"containers with unready status: [{container_name}]"
    ready_s = "True" if ready else "False"
    sandbox = "False" if terminal else "True"
    return [
        _condition("PodReadyToStartContainers", sandbox, by_type, now),
        init,
        _condition("Ready", ready_s, by_type, now, reason, message),
        _condition("ContainersReady", ready_s, by_type, now, reason, message),
        _condition("PodScheduled", "True", by_type, now),
    ]


def pod_status(
    *,
    phase: str,
    pod_ip: str,
    host_ip: str,
    start_time: str,
    container_statuses: list[dict[str, Any]],
    ready: bool,
    container_name: str,
    prev_conditions: Sequence[Mapping[str, Any]],
    now: str,
    init_container_statuses: list[dict[str, Any]] | None = None,
    pending_init: Sequence[str] = (),
) -> dict[str, Any]:
    """The whole status the agent writes (JSON merge patch: lists replaced wholesale)."""
    st: dict[str, Any] = {
        "phase": phase,
        "conditions": pod_conditions(
            phase=phase,
            ready=ready,
            container_name=container_name,
            prev=prev_conditions,
            now=now,
            pending_init=pending_init,
        ),
        "hostIP": host_ip,
        "hostIPs": [{"ip": host_ip}],
        "podIP": pod_ip,
        "podIPs": [{"ip": pod_ip}],
        "startTime": start_time,
        "containerStatuses": container_statuses,
    }
    if init_container_statuses:
        st["initContainerStatuses"] = init_container_statuses
    return st


def phase_after_exit(restart_policy: str, exit_code: int) -> str | None:
    """Terminal phase after the container exited, or None when it is restarted."""
    if restart_policy == "Always":
        return None
    if restart_policy == "OnFailure":
        return "Succeeded" if exit_code == 0 else None
    return "Succeeded" if exit_code == 0 else "Failed"


def restart_delay(restarts: int, base: float, cap: float) -> float:
    """Exponential back-off before restart number ``restarts + 1`` (base, 2*base, ... <= cap)."""
    return float(min(cap, base * (2 ** max(0, restarts))))


# --- nodes ------------------------------------------------------------------------------------

NODE_CAPACITY = {"cpu": "8", "memory": "32Gi", "pods": "110", "ephemeral-storage": "100Gi"}


def node_labels(name: str) -> dict[str, str]:
    return {
        "kubernetes.io/hostname": name,
        "kubernetes.io/os": "linux",
        "kubernetes.io/arch": "amd64",
        "beta.kubernetes.io/os": "linux",
        "beta.kubernetes.io/arch": "amd64",
        NODE_ROLE_LABEL: "true",
    }


def node_conditions(
    ready: bool, prev: Sequence[Mapping[str, Any]], now: str
) -> list[dict[str, Any]]:
    """Node conditions: all healthy when ready, else all Unknown as when a kubelet vanishes."""
    by_type = {c["type"]: c for c in prev}
    out: list[dict[str, Any]] = []
    healthy = {
        "MemoryPressure": ("False", "KubeletHasSufficientMemory", "kubelet has sufficient memory"),
        "DiskPressure": ("False", "KubeletHasNoDiskPressure", "kubelet has no disk pressure"),
        "PIDPressure": ("False", "KubeletHasSufficientPID", "kubelet has sufficient PID"),
        "Ready": ("True", "KubeletReady", "process node agent is posting ready status"),
    }
    for ctype, (status, reason, message) in healthy.items():
        if not ready:
            status, reason, message = (
                "Unknown",
                "NodeStatusUnknown",
                "Kubelet stopped posting node status.",
            )
        cond = _condition(ctype, status, by_type, now, reason, message)
        cond.pop("lastProbeTime")
        cond["lastHeartbeatTime"] = now
        out.append(cond)
    return out


def node_status(
    ready: bool, prev: Sequence[Mapping[str, Any]], now: str, kubelet_port: int = 10250
) -> dict[str, Any]:
    return {
        "capacity": dict(NODE_CAPACITY),
        "allocatable": dict(NODE_CAPACITY),
        "addresses": [
            {"type": "InternalIP", "address": "127.0.0.1"},
        ],
        "conditions": node_conditions(ready, prev, now),
        "daemonEndpoints": {"kubeletEndpoint": {"Port": kubelet_port}},
        "nodeInfo": {
            "machineID": "berth-process-node",
            "systemUUID": "berth-process-node",
            "bootID": "berth-process-node",
            "kernelVersion": "process",
            "osImage": "berth process node agent (test-only)",
            "containerRuntimeVersion": "process://1",
            "kubeletVersion": KUBELET_VERSION,
            "kubeProxyVersion": KUBELET_VERSION,
            "operatingSystem": "linux",
            "architecture": "amd64",
        },
    }


def parse_taint(text: str) -> dict[str, str]:
    """kubelet's ``--register-with-taints`` syntax, ``key[=value]:Effect``, as a Taint.

    Raises ValueError for anything else."""
    kv, sep, effect = text.strip().rpartition(":")
    if not sep or not kv or effect not in ("NoSchedule", "PreferNoSchedule", "NoExecute"):
        raise ValueError(f"bad taint {text!r}: want key[=value]:Effect")
    key, _, value = kv.partition("=")
    taint = {"key": key, "effect": effect}
    if value:
        taint["value"] = value
    return taint


def node_object(name: str) -> dict[str, Any]:
    """The Node the agent registers (status is written separately through /status)."""
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "labels": node_labels(name),
            "annotations": {"node.alpha.kubernetes.io/ttl": "0"},
        },
        "spec": {},
    }
