"""The shared volume as a managed cluster provisions it: its root owned by root, mode 0755, and no
Berth pod able to chown it (docs/install.md, "The shared volume").

Real pieces: the control plane, ``berth-operator`` as a subprocess under its own ServiceAccount,
the dev cluster's RWX provisioner (rancher's local-path-provisioner, hack/provisioner.sh) serving
StorageClass berth-shared, ``berth-session`` pods (uid 10001, no capabilities) on the real nodes,
and the scripted OpenAI-compatible model.

Asserted, in a namespace the test creates with no claim in it: the operator creates the claim
(managed), the provisioner binds it to a new volume whose root it made root-owned 0755; the
operator's one-shot set-up Job found it so and made it the pods' (10001:10001, setgid, group
write), and recorded that on the claim; the session then runs a tool that writes in its workspace
and its store is written, owned by the pods' user; the Job ran once for the claim, and a second
session in the namespace needs no new one. Without the set-up (the code before it), the kubelet
makes the session's subPath directories root-owned in the root-owned root and the session cannot
write its store: it never reaches Succeeded.
"""

from __future__ import annotations

import json
import stat
from typing import Any

import pytest
import yaml

from tests.cluster import POD_UID, DevCluster
from tests.integration.operator.harness import (
    SECRET,
    bash,
    condition,
    kget,
    klist,
    operator,
    scripted_model,
    session_manifest,
    wait,
)

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(600)]

REAL_NODES = {"nodeSelector": {"berth.dev/dev-node": "real"}}


def finished(dc: DevCluster, ns: str, name: str) -> Any:
    def check() -> Any:
        obj = kget(dc, ns, "agentsession", name)
        phase = (obj or {}).get("status", {}).get("phase")
        return obj if phase in ("Succeeded", "Failed") else None

    return check


def test_a_root_owned_provisioned_volume_is_set_up_once_and_sessions_write_their_store(
    dev_cluster: DevCluster,
) -> None:
    dc = dev_cluster
    script = {
        "turns": [
            {"tool_calls": [bash("id -u > whoami.txt && echo written >> whoami.txt")]},
            {"text": "wrote it"},
        ],
        "cursor": "history",
        "on_exhausted": "repeat_last",
    }
    with dc.namespace("vol") as ns, scripted_model(script) as llm, operator(dc, ns):
        assert kget(dc, ns, "pvc", "berth-shared") is None  # nothing pre-made
        first = session_manifest("first", llm.base_url, "write whoami", placement=REAL_NODES)
        dc.kubectl("-n", ns, "apply", "-f", "-", input=yaml.safe_dump_all([SECRET, first]))
        obj = wait("session first to finish", finished(dc, ns, "first"), 300)
        assert obj["status"]["phase"] == "Succeeded", json.dumps(obj["status"], indent=1)

        # The claim: the operator's, provisioned on demand by the real provisioner.
        pvc = kget(dc, ns, "pvc", "berth-shared")
        assert pvc is not None
        assert pvc["metadata"]["labels"]["app.kubernetes.io/managed-by"] == "berth-operator"
        assert pvc["spec"]["storageClassName"] == "berth-shared"
        assert pvc["metadata"]["annotations"]["berth.dev/volume-setup"] == f"{POD_UID}:{POD_UID}"
        pv = json.loads(dc.kubectl("get", "pv", pvc["spec"]["volumeName"], "-o", "json").stdout)
        provisioned_by = pv["metadata"]["annotations"].get("pv.kubernetes.io/provisioned-by")
        assert provisioned_by == "rancher.io/local-path"

        # The set-up Job found the root as the provisioner made it, and made it the pods'.
        (job,) = klist(dc, ns, "jobs", "app.kubernetes.io/component=volume-setup")
        assert job["status"].get("succeeded") == 1
        log = dc.kubectl("-n", ns, "logs", f"job/{job['metadata']['name']}").stdout
        assert "volume root root:root 755: making it 10001:10001 2775" in log, log
        root = dc.claim_dir(ns)
        st = root.stat()
        assert (st.st_uid, st.st_gid, stat.S_IMODE(st.st_mode)) == (POD_UID, POD_UID, 0o2775)

        # The session wrote its workspace and its store, as the pods' user.
        workspace = root / "workspaces" / ns / "first"
        assert (workspace / "whoami.txt").read_text().split() == [str(POD_UID), "written"]
        store = root / "store" / ns / "first"
        files = [p for p in store.rglob("*") if p.is_file()]
        assert files, f"nothing in the store {store}"
        assert {p.stat().st_uid for p in files} == {POD_UID}
        assert condition(obj, "StoreReady")["status"] == "True"  # type: ignore[index]

        # A second session of the namespace: the claim is set up already, no new Job.
        second = session_manifest("second", llm.base_url, "write again", placement=REAL_NODES)
        dc.kubectl("-n", ns, "apply", "-f", "-", input=yaml.safe_dump(second))
        obj = wait("session second to finish", finished(dc, ns, "second"), 300)
        assert obj["status"]["phase"] == "Succeeded", json.dumps(obj["status"], indent=1)
        jobs = klist(dc, ns, "jobs", "app.kubernetes.io/component=volume-setup")
        assert [j["metadata"]["uid"] for j in jobs] == [job["metadata"]["uid"]]
