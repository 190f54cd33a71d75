"""The shared claim's one-shot set-up: the Job (root with CAP_CHOWN and CAP_FOWNER only), its
outcome as StoreReady, placement held until it succeeded, and its script run for real on
directories shaped as a provisioner leaves them (root-owned 0755) and as a pre-owned one does."""

from __future__ import annotations

import os
import stat
import subprocess
from pathlib import Path
from typing import Any

import pytest
from berth_operator.api.conditions import get_condition
from berth_operator.builders.volume_setup import (
    SETUP_SCRIPT,
    build_setup_job,
    needs_setup,
    setup_job_name,
    setup_outcome,
    setup_status,
)
from berth_operator.reconcile.session import decide
from berth_operator.settings import OperatorSettings, SharedClaimSettings

from tests.unit.operator.fixtures import make_session, observation

SETTINGS = OperatorSettings()


def test_the_job_is_root_with_chown_and_fowner_only_and_mounts_the_claim() -> None:
    job = build_setup_job("team-a", "berth-shared", SETTINGS)
    assert job["metadata"]["name"] == "berth-volume-setup-berth-shared"
    pod = job["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    sc = container["securityContext"]
    assert sc["runAsUser"] == 0 and sc["allowPrivilegeEscalation"] is False
    assert sc["capabilities"] == {"drop": ["ALL"], "add": ["CHOWN", "FOWNER"]}
    assert pod["automountServiceAccountToken"] is False
    # in the pods' group, so its chmod 2775 keeps the setgid bit (no CAP_FSETID)
    assert pod["securityContext"]["supplementalGroups"] == [10001]
    assert pod["volumes"] == [
        {"name": "shared", "persistentVolumeClaim": {"claimName": "berth-shared"}}
    ]
    assert container["command"][-4:] == ["/var/lib/berth/shared", "10001", "store", "workspaces"]
    assert job["spec"]["activeDeadlineSeconds"] > 0  # a pod refused by admission still ends


def test_a_long_claim_name_gives_a_valid_job_name() -> None:
    assert len(setup_job_name("c" * 200)) <= 63
    assert setup_job_name("c" * 200) != setup_job_name("d" * 200)


def test_the_record_on_the_claim_ends_the_setup_and_it_can_be_turned_off() -> None:
    claim: dict[str, Any] = {"metadata": {"annotations": {}}}
    assert needs_setup(claim, SETTINGS)
    claim["metadata"]["annotations"]["berth.dev/volume-setup"] = "10001:10001"
    assert not needs_setup(claim, SETTINGS)
    other_user = OperatorSettings.model_validate({"pods": {"run_as_user": 20000}})
    assert needs_setup(claim, other_user)
    off = OperatorSettings(claims=SharedClaimSettings(setup=False))
    assert not needs_setup({"metadata": {}}, off)


def job(cond_type: str | None, reason: str = "", message: str = "") -> dict[str, Any]:
    conds = [{"type": cond_type, "status": "True", "reason": reason, "message": message}]
    return {"status": {"conditions": conds if cond_type else []}}


def test_outcomes_come_from_the_job_conditions() -> None:
    assert setup_outcome(None) == "running"
    assert setup_outcome(job(None)) == "running"
    assert setup_outcome(job("Complete")) == "succeeded"
    assert setup_outcome(job("Failed")) == "failed"


def test_while_it_runs_no_pod_is_placed() -> None:
    status = setup_status("ns", "berth-shared", None)
    plan = decide(observation(make_session(), claim=status), SETTINGS)
    assert plan.create is None
    store = get_condition(plan.status.conditions, "StoreReady")
    assert store is not None and (store.status, store.reason) == ("False", "VolumeSettingUp")
    assert not plan.events


def test_a_failed_setup_says_why_in_ready_and_one_warning_event() -> None:
    failed = job("Failed", "BackoffLimitExceeded", "Job has reached the specified backoff limit")
    status = setup_status("ns", "berth-shared", failed)
    plan = decide(observation(make_session(), claim=status), SETTINGS)
    assert plan.create is None
    ready = get_condition(plan.status.conditions, "Ready")
    assert ready is not None and ready.reason == "VolumeSetupFailed"
    assert "BackoffLimitExceeded" in ready.message and "docs/install.md" in ready.message
    assert [e.reason for e in plan.events] == ["VolumeSetupFailed"]


def run_script(root: Path, uid: int) -> str:
    args = [str(root), str(uid), "store", "workspaces"]
    proc = subprocess.run(
        ["sh", "-c", SETUP_SCRIPT, "berth-volume-setup", *args],
        capture_output=True,
        text=True,
        check=True,
    )
    return proc.stdout


@pytest.mark.skipif(os.geteuid() != 0, reason="chown to another user needs root")
def test_the_script_makes_a_root_owned_root_and_dirs_made_below_it_the_users(
    tmp_path: Path,
) -> None:
    root = tmp_path / "vol"
    (root / "store" / "ns").mkdir(parents=True)  # a pod's subPath made by the kubelet first
    for d in (root, root / "store", root / "store" / "ns"):
        os.chown(d, 0, 0)
        d.chmod(0o755)
    run_script(root, 10001)
    for d in (root, root / "store", root / "store" / "ns"):
        st = d.stat()
        assert (st.st_uid, st.st_gid, stat.S_IMODE(st.st_mode)) == (10001, 10001, 0o2775), d


def test_the_script_leaves_a_root_the_user_can_write_alone(tmp_path: Path) -> None:
    root = tmp_path / "vol"
    root.mkdir(mode=0o700)
    root.chmod(0o700)
    out = run_script(root, os.geteuid())
    assert "left as it is" in out
    assert stat.S_IMODE(root.stat().st_mode) == 0o700
