"""Pod status / Node builders of the process node agent (hack/nodeagent/status.py)."""

from __future__ import annotations

from typing import Any

import pytest

from hack.nodeagent import status


@pytest.mark.parametrize(
    ("returncode", "code"), [(0, 0), (3, 3), (-9, 137), (-15, 143), (255, 255)]
)
def test_exit_code_of(returncode: int, code: int) -> None:
    assert status.exit_code_of(returncode) == code


@pytest.mark.parametrize(
    ("policy", "exit_code", "phase"),
    [
        ("Never", 0, "Succeeded"),
        ("Never", 1, "Failed"),
        ("OnFailure", 0, "Succeeded"),
        ("OnFailure", 2, None),
        ("Always", 0, None),
        ("Always", 1, None),
    ],
)
def test_phase_after_exit(policy: str, exit_code: int, phase: str | None) -> None:
    assert status.phase_after_exit(policy, exit_code) == phase


@pytest.mark.parametrize(
    ("restarts", "delay"), [(0, 1.0), (1, 2.0), (2, 4.0), (5, 30.0), (50, 30.0)]
)
def test_restart_delay(restarts: int, delay: float) -> None:
    assert status.restart_delay(restarts, 1.0, 30.0) == delay


def test_truncate_message() -> None:
    assert status.truncate_message(b"x" * 5000) == "x" * 4096
    assert status.truncate_message(b"ok\xff") == "ok\ufffd"


@pytest.mark.parametrize(
    ("exit_code", "message", "reason"),
    [(0, "done", "Completed"), (7, "", "Error")],
)
def test_terminated_state(exit_code: int, message: str, reason: str) -> None:
    ex = status.Exited(exit_code, message, "T1", "T2", "process://42")
    st = status.terminated_state(ex)["terminated"]
    assert st["exitCode"] == exit_code
    assert st["reason"] == reason
    assert st.get("message") == (message or None)
    assert (st["startedAt"], st["finishedAt"], st["containerID"]) == ("T1", "T2", "process://42")


def test_container_status_drops_empty_states() -> None:
    cs = status.container_status(
        {"name": "main", "image": "img:1"},
        state=status.running_state("T0"),
        last_state=None,
        ready=True,
        restart_count=2,
        container_id="process://9",
    )
    assert cs["state"] == {"running": {"startedAt": "T0"}}
    assert cs["lastState"] == {}
    assert (cs["ready"], cs["started"], cs["restartCount"]) == (True, True, 2)
    assert cs["containerID"] == "process://9"


def conds(result: list[dict[str, Any]]) -> dict[str, tuple[str, str | None]]:
    return {c["type"]: (c["status"], c.get("reason")) for c in result}


@pytest.mark.parametrize(
    ("phase", "ready", "expected_ready"),
    [
        ("Running", True, ("True", None)),
        ("Running", False, ("False", "ContainersNotReady")),
        ("Succeeded", False, ("False", "PodCompleted")),
        ("Pending", False, ("False", "ContainersNotReady")),
    ],
)
def test_pod_conditions(phase: str, ready: bool, expected_ready: tuple[str, str | None]) -> None:
    got = conds(
        status.pod_conditions(phase=phase, ready=ready, container_name="c", prev=[], now="T")
    )
    assert got["Ready"] == expected_ready
    assert got["ContainersReady"] == expected_ready
    assert got["PodScheduled"][0] == "True"
    assert got["Initialized"][0] == "True"


@pytest.mark.parametrize(("prev_status", "expected_time"), [("True", "OLD"), ("False", "NOW")])
def test_transition_time_moves_only_on_change(prev_status: str, expected_time: str) -> None:
    prev = [{"type": "Ready", "status": prev_status, "lastTransitionTime": "OLD"}]
    got = status.pod_conditions(
        phase="Running", ready=True, container_name="c", prev=prev, now="NOW"
    )
    ready = next(c for c in got if c["type"] == "Ready")
    assert ready["lastTransitionTime"] == expected_time


@pytest.mark.parametrize(
    ("ready", "status_value", "reason"),
    [(True, "True", "KubeletReady"), (False, "Unknown", "NodeStatusUnknown")],
)
def test_node_conditions(ready: bool, status_value: str, reason: str) -> None:
    got = {c["type"]: c for c in status.node_conditions(ready, [], "NOW")}
    assert got["Ready"]["status"] == status_value
    assert got["Ready"]["reason"] == reason
    assert got["Ready"]["lastHeartbeatTime"] == "NOW"
    assert set(got) == {"Ready", "MemoryPressure", "DiskPressure", "PIDPressure"}


def test_node_object_and_status_shape() -> None:
    node = status.node_object("proc-a")
    labels = node["metadata"]["labels"]
    assert labels["kubernetes.io/hostname"] == "proc-a"
    assert labels["kubernetes.io/os"] == "linux"
    assert labels["berth.dev/process-node"] == "true"
    st = status.node_status(True, [], "NOW")
    assert st["capacity"]["cpu"] == "8"
    assert st["allocatable"]["memory"] == "32Gi"
    assert st["allocatable"]["pods"] == "110"
    assert st["addresses"] == [{"type": "InternalIP", "address": "127.0.0.1"}]
    assert st["nodeInfo"]["kubeletVersion"] == "v1.34.4"


@pytest.mark.parametrize(
    ("phase", "pending", "expected"),
    [
        ("Pending", ["seed"], ("False", "ContainersNotInitialized")),
        ("Pending", [], ("True", None)),
        ("Failed", ["seed"], ("True", "PodCompleted")),
    ],
)
def test_initialized_condition(
    phase: str, pending: list[str], expected: tuple[str, str | None]
) -> None:
    got = conds(
        status.pod_conditions(
            phase=phase, ready=False, container_name="c", prev=[], now="T", pending_init=pending
        )
    )
    assert got["Initialized"] == expected


def test_pod_status_lists_init_containers_only_when_present() -> None:
    common: dict[str, Any] = {
        "phase": "Running",
        "pod_ip": "127.0.1.1",
        "host_ip": "127.0.0.1",
        "start_time": "T",
        "container_statuses": [{"name": "c"}],
        "ready": True,
        "container_name": "c",
        "prev_conditions": [],
        "now": "T",
    }
    assert "initContainerStatuses" not in status.pod_status(**common)
    with_init = status.pod_status(**common, init_container_statuses=[{"name": "i"}])
    assert with_init["initContainerStatuses"] == [{"name": "i"}]
    assert with_init["podIPs"] == [{"ip": "127.0.1.1"}]


@pytest.mark.parametrize(
    ("text", "taint"),
    [
        ("a=b:NoSchedule", {"key": "a", "value": "b", "effect": "NoSchedule"}),
        ("berth.dev/x:NoExecute", {"key": "berth.dev/x", "effect": "NoExecute"}),
        ("k=v:w:PreferNoSchedule", {"key": "k", "value": "v:w", "effect": "PreferNoSchedule"}),
    ],
)
def test_parse_taint(text: str, taint: dict[str, str]) -> None:
    assert status.parse_taint(text) == taint


@pytest.mark.parametrize("text", ["a=b", "a=b:Sometimes", ":NoSchedule"])
def test_parse_taint_refuses(text: str) -> None:
    with pytest.raises(ValueError):
        status.parse_taint(text)
