"""AgentSession end to end on the real control plane with process nodes and the scripted model:
the example succeeds, a SIGKILLed session pod is resumed on a new epoch, a lost node's session
moves to the other process node. The operator runs as a subprocess under its own ServiceAccount.
"""

from __future__ import annotations

import base64
import json
import os
import signal
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.cluster import DevCluster
from tests.integration.operator.harness import (
    SECRET,
    apply_in,
    bash,
    blocking_bash,
    condition,
    example_docs,
    kget,
    klist,
    operator,
    scripted_model,
    session_manifest,
    wait,
    with_base_url,
)

pytestmark = pytest.mark.integration


def finished(dc: DevCluster, ns: str, name: str) -> Any:
    def check() -> Any:
        obj = kget(dc, ns, "agentsession", name)
        phase = (obj or {}).get("status", {}).get("phase")
        return obj if phase in ("Succeeded", "Failed") else None

    return check


def lines(path: Path) -> list[str]:
    return path.read_text().splitlines() if path.exists() else []


def test_example_session_runs_tools_on_the_shared_volume_and_succeeds(
    dev_cluster: DevCluster,
) -> None:
    script = {
        "turns": [
            {
                "tool_calls": [
                    {
                        "name": "write",
                        "arguments": {
                            "file_path": "hello.py",
                            "content": 'print("hello from berth")\n',
                        },
                    }
                ]
            },
            {"tool_calls": [bash("python3 hello.py > out.txt && cat out.txt")]},
            {"text": "It printed: hello from berth"},
        ]
    }
    dc = dev_cluster
    with (
        dc.namespace("ags") as ns,
        scripted_model(script) as llm,
        operator(dc, ns),
    ):
        docs = with_base_url(example_docs("agentsession.yaml"), llm.base_url)
        dc.kubectl("-n", ns, "apply", "-f", "-", input=yaml.safe_dump_all(docs))
        obj = wait("session hello to finish", finished(dc, ns, "hello"))
        st = obj["status"]
        assert st["phase"] == "Succeeded", json.dumps(st, indent=1)
        assert condition(obj, "Completed")["status"] == "True"  # type: ignore[index]
        assert condition(obj, "Ready")["status"] == "True"  # type: ignore[index]
        assert st["usage"]["totalTokens"] > 0
        assert "hello from berth" in st["result"]["text"]
        assert len(st["runs"]) == 1 and st["runs"][0]["outcome"] == "completed"
        assert st["epoch"] == 1 and st["observedGeneration"] == 1
        assert st["nodeName"] in dc.nodes
        # No finalizer (its store stays; what it owns goes by garbage collection), and no
        # diff-base of kopf's: kopf writes nothing to the session
        meta = obj["metadata"]
        assert "berth.dev/finalizer" not in (meta.get("finalizers") or [])
        assert not any("last-handled-configuration" in k for k in meta.get("annotations") or {})

        # The runtime really ran the tools in the workspace on the shared volume.
        claim = dc.claim_dir(ns)
        workspace = claim / "workspaces" / ns / "hello"
        assert (workspace / "out.txt").read_text().strip() == "hello from berth"
        assert (workspace / "hello.py").exists()
        assert (claim / "store" / ns / "hello").is_dir()

        # The pod: owned, labelled, non-root, read-only, the LLM key a file (never in env), and
        # only its own workspace and store of the shared volume mounted.
        (pod,) = klist(dc, ns, "pods", "berth.dev/session=hello")
        assert pod["metadata"]["name"] == "hello-e1"
        assert pod["metadata"]["ownerReferences"][0]["kind"] == "AgentSession"
        assert pod["metadata"]["labels"]["berth.dev/tenant"] == "acme"
        container = pod["spec"]["containers"][0]
        assert container["securityContext"]["readOnlyRootFilesystem"] is True
        assert pod["spec"]["securityContext"]["runAsNonRoot"] is True
        env = {e["name"]: e for e in container["env"]}
        assert "OPENAI_API_KEY" not in env
        assert env["BERTH_LLM_API_KEY_FILE"]["value"].startswith("/var/run/berth/")
        volumes = {v["name"]: v for v in pod["spec"]["volumes"]}
        claims = {n for n, v in volumes.items() if "persistentVolumeClaim" in v}
        shared = sorted(m["subPath"] for m in container["volumeMounts"] if m["name"] in claims)
        assert shared == [f"store/{ns}/hello", f"workspaces/{ns}/hello"]
        llm = [
            v
            for v in volumes.values()
            if (v.get("secret") or {}).get("secretName") == "llm-credentials"
        ]
        assert llm and llm[0]["secret"]["items"] == [{"key": "api-key", "path": "api-key"}]
        # options.json is a key of the session's own Secret (no ConfigMap: one write less)
        secret = kget(dc, ns, "secret", "hello-berth")
        assert secret is not None and kget(dc, ns, "configmap", "hello-options") is None
        options = json.loads(base64.b64decode(secret["data"]["options.json"]))
        assert options["prompt"].startswith("Create hello.py")
        assert volumes["options"]["secret"]["items"] == [
            {"key": "options.json", "path": "options.json"}
        ]

        table = dc.kubectl("-n", ns, "get", "ags").stdout
        header = table.splitlines()[0].split()
        assert header == [
            "NAME", "PHASE", "READY", "REASON", "NODE", "RUN", "TURN", "TOKENS", "AGE"
        ]  # fmt: skip
        assert "Succeeded" in table and st["runId"] in table
        row = table.splitlines()[1].split()
        assert row[3] == condition(obj, "Ready")["reason"]  # type: ignore[index]
        print("\n" + table)

        # Deleting the session removes its pod and Secret and keeps the store.
        dc.kubectl("-n", ns, "delete", "agentsession", "hello", "--wait=true", "--timeout=60s")
        wait(
            "pods and Secret to go",
            lambda: (
                not klist(dc, ns, "pods", "berth.dev/session=hello")
                and kget(dc, ns, "secret", "hello-berth") is None
            ),
        )
        assert (claim / "store" / ns / "hello").is_dir()


def test_a_new_namespace_gets_its_shared_claim_and_the_example_succeeds(
    dev_cluster: DevCluster,
) -> None:
    """Nothing prepared in the namespace: the operator creates the shared RWX claim (it binds to
    the dev cluster's pool, as with an RWX provisioner) and the example runs to Succeeded."""
    script = {"turns": [{"tool_calls": [bash("echo made >> out.txt")]}, {"text": "all done"}]}
    dc = dev_cluster
    with dc.namespace("fresh") as ns, scripted_model(script) as llm, operator(dc, ns):
        assert kget(dc, ns, "pvc", "berth-shared") is None
        apply_in(dc, ns, with_base_url(example_docs("agentsession.yaml"), llm.base_url))
        obj = wait("session hello to finish", finished(dc, ns, "hello"))
        assert obj["status"]["phase"] == "Succeeded", json.dumps(obj["status"], indent=1)
        assert condition(obj, "StoreReady")["status"] == "True"  # type: ignore[index]
        pvc = kget(dc, ns, "pvc", "berth-shared")
        assert pvc is not None and pvc["status"]["phase"] == "Bound"
        assert pvc["spec"]["accessModes"] == ["ReadWriteMany"]
        assert pvc["metadata"]["labels"]["app.kubernetes.io/managed-by"] == "berth-operator"
        assert not pvc["metadata"].get("ownerReferences")  # never garbage-collected


def test_a_missing_user_managed_claim_is_reported_not_left_pending(
    dev_cluster: DevCluster,
) -> None:
    dc = dev_cluster
    with dc.namespace("noclaim") as ns, operator(dc, ns, BERTH_SHARED_CLAIM_MANAGED="false"):
        apply_in(dc, ns, example_docs("agentsession.yaml"))

        def reported() -> Any:
            obj = kget(dc, ns, "agentsession", "hello")
            cond = condition(obj, "StoreReady") if obj else None
            return obj if cond and cond["reason"] == "ClaimMissing" else None

        obj = wait("StoreReady=False ClaimMissing", reported)
        assert condition(obj, "Ready")["reason"] == "ClaimMissing"  # type: ignore[index]
        assert not klist(dc, ns, "pods", "berth.dev/session=hello")  # nothing placed
        assert kget(dc, ns, "pvc", "berth-shared") is None  # the user's to create
        described = dc.kubectl("-n", ns, "describe", "agentsession", "hello").stdout
        assert "ClaimMissing" in described and "create a ReadWriteMany claim" in described
        events = dc.kubectl(
            "-n", ns, "get", "events", "--field-selector", "reason=ClaimMissing", "-o", "name"
        ).stdout
        assert events.strip(), "no ClaimMissing Event"


def test_an_image_that_cannot_be_pulled_is_the_sessions_ready_reason(
    dev_cluster: DevCluster,
) -> None:
    """kubectl get ags says why the session does not start: the kubelet's waiting reason, with
    its message in describe and a Warning Event."""
    dc = dev_cluster
    with dc.namespace("pull") as ns, operator(dc, ns):
        docs = example_docs("agentsession.yaml")
        for doc in docs:
            if doc.get("kind") == "AgentSession":
                doc["spec"]["image"] = "berth.dev.local/no-such-image:1"
        apply_in(dc, ns, docs)
        pulling = {"ErrImagePull", "ImagePullBackOff", "ErrImageNeverPull"}

        def stuck() -> Any:
            obj = kget(dc, ns, "agentsession", "hello")
            ready = condition(obj, "Ready") if obj else None
            return obj if ready and ready["reason"] in pulling else None

        obj = wait("Ready to name the image pull failure", stuck)
        ready = condition(obj, "Ready")
        assert ready is not None and "no-such-image" in ready["message"]
        row = dc.kubectl("-n", ns, "get", "ags", "hello", "--no-headers").stdout.split()
        assert row[3] in pulling  # the REASON column
        events = dc.kubectl("-n", ns, "get", "events", "-o", "json").stdout
        assert any(
            e["reason"] in pulling and e["involvedObject"]["kind"] == "AgentSession"
            for e in json.loads(events)["items"]
        )


def test_sigkilled_session_is_resumed_on_a_new_epoch_without_rerunning_tools(
    dev_cluster: DevCluster,
) -> None:
    script = {
        "turns": [
            {"tool_calls": [bash("echo a >> a.txt"), blocking_bash("b.txt")]},
            {"text": "recovered"},
        ]
    }
    dc = dev_cluster
    with (
        dc.namespace("kill") as ns,
        scripted_model(script) as llm,
        operator(dc, ns),
    ):
        apply_in(dc, ns, [SECRET, session_manifest("crash", llm.base_url, "crash test")])
        workspace = dc.claim_dir(ns) / "workspaces" / ns / "crash"
        obj = wait(
            "the blocking tool to start with a known run id",
            lambda: (
                lines(workspace / "b.txt")
                and (o := kget(dc, ns, "agentsession", "crash"))
                and o.get("status", {}).get("runId")
                and o
            ),
        )
        first_run = obj["status"]["runId"]
        pod = kget(dc, ns, "pod", "crash-e1")
        os.kill(dc.container_pid(pod or {}), signal.SIGKILL)
        (workspace / "go").touch()  # a re-run of the blocking tool would now append a 2nd line

        obj = wait("session crash to finish", finished(dc, ns, "crash"))
        st = obj["status"]
        assert st["phase"] == "Succeeded", json.dumps(st, indent=1)
        assert st["epoch"] == 2
        assert [r["outcome"] for r in st["runs"]] == ["crashed", "completed"]
        assert st["runs"][0]["runId"] == first_run
        assert st["runs"][1]["resumedFrom"] == first_run
        assert st["result"]["text"] == "recovered"
        assert lines(workspace / "a.txt") == ["a"]
        assert lines(workspace / "b.txt") == ["ran"]
        # the session's pods (the claim's set-up Job leaves its own, labelled volume-setup)
        session_pods = klist(dc, ns, "pods", "berth.dev/session=crash")
        assert [p["metadata"]["name"] for p in session_pods] == ["crash-e2"]


def test_session_on_a_lost_node_resumes_on_the_other_node(
    dev_cluster: DevCluster,
) -> None:
    dc = dev_cluster
    if len(dc.nodes) < 2:
        pytest.skip("needs two real nodes (BERTH_NODES)")
    script = {"turns": [{"tool_calls": [blocking_bash("b.txt")]}, {"text": "moved"}]}
    with (
        dc.namespace("loss") as ns,
        scripted_model(script) as llm,
        operator(dc, ns),
    ):
        apply_in(dc, ns, [SECRET, session_manifest("mover", llm.base_url, "node loss test")])
        workspace = dc.claim_dir(ns) / "workspaces" / ns / "mover"
        obj = wait(
            "the blocking tool to start",
            lambda: (
                lines(workspace / "b.txt")
                and (o := kget(dc, ns, "agentsession", "mover"))
                and o.get("status", {}).get("runId")
                and o
            ),
        )
        lost = obj["status"]["nodeName"]
        first_run = obj["status"]["runId"]
        try:
            dc.lose_node(lost)
            # Only once the operator has replaced the pod may the tool finish: touching "go"
            # earlier lets the run complete on the lost node before its processes are killed.
            wait(
                "a replacement pod",
                lambda: (
                    (o := kget(dc, ns, "agentsession", "mover"))
                    and o["status"].get("epoch", 0) >= 2
                ),
            )
            (workspace / "go").touch()
            obj = wait("session mover to finish", finished(dc, ns, "mover"))
        finally:
            dc.restore_node(lost)
        st = obj["status"]
        assert st["phase"] == "Succeeded", json.dumps(st, indent=1)
        assert st["nodeName"] != lost and st["nodeName"] in dc.nodes
        assert st["runs"][0]["runId"] == first_run
        assert st["runs"][0]["outcome"] == "lost"
        assert st["runs"][-1].get("resumedFrom") == first_run, json.dumps(st, indent=1)
        assert lines(workspace / "b.txt") == ["ran"]
        degraded = condition(obj, "Degraded")
        assert degraded is not None and degraded["status"] == "False"
        wait(
            f"node {lost} Ready again",
            lambda: (
                (n := kget(dc, "", "node", lost))
                and any(
                    c["type"] == "Ready" and c["status"] == "True"
                    for c in n["status"]["conditions"]
                )
            ),
        )


def test_delete_store_annotation_removes_the_store_through_a_job(dev_cluster: DevCluster) -> None:
    dc = dev_cluster
    script = {"turns": [{"tool_calls": [bash("echo kept > note.txt")]}, {"text": "noted"}]}
    with (
        dc.namespace("store") as ns,
        scripted_model(script) as llm,
        operator(dc, ns),
    ):
        manifest = session_manifest("gone", llm.base_url, "store cleanup test")
        manifest["metadata"]["annotations"] = {"berth.dev/delete-store": "true"}
        apply_in(dc, ns, [SECRET, manifest])
        obj = wait("session gone to finish", finished(dc, ns, "gone"))
        assert obj["status"]["phase"] == "Succeeded"
        assert "berth.dev/finalizer" in obj["metadata"]["finalizers"]  # placed, store to go
        claim = dc.claim_dir(ns)
        store, workspace = claim / "store" / ns / "gone", claim / "workspaces" / ns / "gone"
        assert store.is_dir() and (workspace / "note.txt").exists()
        dc.kubectl("-n", ns, "delete", "agentsession", "gone", "--wait=true", "--timeout=120s")
        wait(
            "store and workspace to be removed",
            lambda: not store.exists() and not workspace.exists(),
        )
        jobs = klist(dc, ns, "jobs", "app.kubernetes.io/component=store-cleanup")
        assert [j["metadata"]["name"][:19] for j in jobs] == ["gone-store-cleanup-"]
