"""The worker Deployment builder (berth_operator.builders.laneworker): the pod contract with
``berth-worker``, security, grace period, overrides and the template hash."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from berth_operator.api.laneworker import LaneWorkerSpec
from berth_operator.builders.laneworker import (
    ANNOTATION_TEMPLATE_HASH,
    DRAIN_MARGIN_SECONDS,
    LaneWorkerRef,
    build_deployment,
    deployment_name,
    selector_labels,
    selector_string,
)
from berth_operator.errors import SpecError
from berth_operator.settings import ImageSettings, OperatorSettings, PodSettings, RedisSettings
from pydantic import ValidationError

from session_runtime.worker.settings import WorkerSettings

REF = LaneWorkerRef("team-a", "exec", "uid-1")
SETTINGS = OperatorSettings(
    redis=RedisSettings(url="redis://r:6379/0"),
    images=ImageSettings(session="img:1"),
    pods=PodSettings(run_as_user=1234),
)


def build(replicas: int = 2, **fields: Any) -> dict[str, Any]:
    return build_deployment(REF, LaneWorkerSpec.model_validate(fields), SETTINGS, replicas=replicas)


def container(dep: dict[str, Any]) -> dict[str, Any]:
    c: dict[str, Any] = dep["spec"]["template"]["spec"]["containers"][0]
    return c


def env_of(dep: dict[str, Any]) -> dict[str, Any]:
    return {e["name"]: e.get("value", e.get("valueFrom")) for e in container(dep)["env"]}


def test_identity_owner_and_selector() -> None:
    dep = build(replicas=3)
    assert dep["metadata"]["name"] == deployment_name("exec") == "exec-workers"
    assert dep["metadata"]["namespace"] == "team-a"
    owner = dep["metadata"]["ownerReferences"][0]
    assert (owner["kind"], owner["name"], owner["uid"], owner["controller"]) == (
        "LaneWorker",
        "exec",
        "uid-1",
        True,
    )
    assert dep["spec"]["replicas"] == 3
    assert dep["spec"]["selector"]["matchLabels"] == selector_labels("exec")
    labels = dep["spec"]["template"]["metadata"]["labels"]
    assert selector_labels("exec").items() <= labels.items()
    assert selector_string("exec") == (
        "app.kubernetes.io/component=laneworker,app.kubernetes.io/name=berth,"
        "berth.dev/laneworker=exec"
    )


def test_worker_env_contract_is_what_berth_worker_reads(tmp_path: Path) -> None:
    dep = build(concurrency=4, taskTimeoutSeconds=30)
    env = env_of(dep)
    assert container(dep)["command"] == ["berth-worker"]
    # The worker role's Redis URL (its ACL password in it) comes from the namespace's Secret.
    assert env["BERTH_REDIS_URL"] == {"secretKeyRef": {"name": "berth-worker-redis", "key": "url"}}
    assert env["BERTH_LANEWORKER"] == "exec"
    assert env["BERTH_NAMESPACE"] == {"fieldRef": {"fieldPath": "metadata.namespace"}}
    assert env["POD_NAME"] == {"fieldRef": {"fieldPath": "metadata.name"}}
    assert env["POD_IP"] == {"fieldRef": {"fieldPath": "status.podIP"}}
    assert env["NODE_NAME"] == {"fieldRef": {"fieldPath": "spec.nodeName"}}  # named on refusal
    assert env["BERTH_TOOL_SANDBOX"] == "required"
    assert env["BERTH_WORKER_CONCURRENCY"] == "4"
    assert env["BERTH_TASK_TIMEOUT_SECONDS"] == "30"
    mounts = {m["mountPath"]: m for m in container(dep)["volumeMounts"]}
    assert "BERTH_SHARED_ROOT" not in env
    assert mounts[env["BERTH_WORKSPACES_ROOT"]]["subPath"] == "workspaces"
    assert env["BERTH_TASK_MASTER_KEY_FILE"] == "/var/run/berth/task-key/master"
    assert mounts["/var/run/berth/task-key"]["readOnly"] is True
    # The worker's own settings parser accepts exactly this environment.
    resolved = {k: v for k, v in env.items() if isinstance(v, str)}
    resolved |= {
        "BERTH_NAMESPACE": "team-a",
        "POD_NAME": "exec-workers-abc-1",
        "POD_IP": "10.0.0.1",
        "BERTH_REDIS_URL": "redis://r:6379/0",
    }
    key_file = tmp_path / "master"  # the mounted berth-task-key, here a local file
    key_file.write_bytes(b"k" * 32)
    resolved["BERTH_TASK_MASTER_KEY_FILE"] = str(key_file)
    ws = WorkerSettings.from_env(resolved, argv=[])
    assert ws.task_stream == "berth:team-a:lw:{exec}:tasks"
    assert (ws.concurrency, ws.task_timeout_seconds) == (4, 30.0)


def test_security_and_grace() -> None:
    dep = build(taskTimeoutSeconds=120)
    pod = dep["spec"]["template"]["spec"]
    sc = container(dep)["securityContext"]
    assert sc["readOnlyRootFilesystem"] is True and sc["runAsNonRoot"] is True
    assert sc["allowPrivilegeEscalation"] is False and sc["capabilities"] == {"drop": ["ALL"]}
    assert pod["securityContext"]["runAsUser"] == 1234
    assert pod["automountServiceAccountToken"] is False
    assert pod["terminationGracePeriodSeconds"] == 120 + DRAIN_MARGIN_SECONDS
    volumes = {v["name"]: v for v in pod["volumes"]}
    assert volumes["shared"]["persistentVolumeClaim"]["claimName"] == "berth-shared"
    assert "emptyDir" in volumes["tmp"]


def test_image_claim_and_template_overrides() -> None:
    dep = build(
        image="custom:2",
        store={"claimName": "rwx"},
        template={
            "resources": {"limits": {"memory": "1Gi"}},
            "nodeSelector": {"berth.dev/process-node": "true"},
            "tolerations": [{"key": "k", "operator": "Exists"}],
            "securityContext": {
                "runAsNonRoot": False,
                "readOnlyRootFilesystem": False,
                "runAsUser": 2000,
                "x": 1,
            },
        },
    )
    pod = dep["spec"]["template"]["spec"]
    assert container(dep)["image"] == "custom:2"
    assert pod["volumes"][0]["persistentVolumeClaim"]["claimName"] == "rwx"
    assert container(dep)["resources"] == {
        "limits": {"memory": "1Gi", "cpu": "2"},
        "requests": {"cpu": "100m", "memory": "256Mi"},
    }
    assert pod["nodeSelector"] == {"berth.dev/process-node": "true"}
    assert pod["tolerations"] == [{"key": "k", "operator": "Exists"}]
    sc = container(dep)["securityContext"]
    assert "x" not in sc and sc["runAsUser"] == 2000  # only harmless fields pass through
    assert sc["runAsNonRoot"] is True and sc["readOnlyRootFilesystem"] is True  # not overridable
    assert build()["spec"]["template"]["spec"]["containers"][0]["image"] == "img:1"


def test_scrape_annotations_and_readiness() -> None:
    dep = build()
    ann = dep["spec"]["template"]["metadata"]["annotations"]
    port = container(dep)["ports"][0]["containerPort"]
    assert ann == {"prometheus.io/scrape": "true", "prometheus.io/port": str(port)}
    assert container(dep)["readinessProbe"]["httpGet"]["port"] == "metrics"
    # the probe waits for a starting worker (its socket listens before the imports)
    assert container(dep)["readinessProbe"]["timeoutSeconds"] == 5
    assert container(dep)["readinessProbe"]["periodSeconds"] == 1
    assert {"name": "BERTH_METRICS_PORT", "value": str(port)} in container(dep)["env"]


def test_template_hash_tracks_the_template_only() -> None:
    base = build(replicas=1)["metadata"]["annotations"][ANNOTATION_TEMPLATE_HASH]
    assert build(replicas=7)["metadata"]["annotations"][ANNOTATION_TEMPLATE_HASH] == base
    changed = build(concurrency=3)["metadata"]["annotations"][ANNOTATION_TEMPLATE_HASH]
    assert changed != base


@pytest.mark.parametrize("name", ["x" * 64, "Bad_"])
def test_names_that_cannot_be_label_values_are_spec_errors(name: str) -> None:
    with pytest.raises(SpecError):
        build_deployment(LaneWorkerRef("ns", name, "u"), LaneWorkerSpec(), SETTINGS, replicas=0)


def test_worker_pull_secrets_default_to_the_operators_and_are_overridden() -> None:
    settings = SETTINGS.model_copy(
        update={"images": ImageSettings(session="img:1", pull_secrets=["reg-a"])}
    )
    dep = build_deployment(REF, LaneWorkerSpec.model_validate({}), settings, replicas=1)
    assert dep["spec"]["template"]["spec"]["imagePullSecrets"] == [{"name": "reg-a"}]
    own = LaneWorkerSpec.model_validate({"imagePullSecrets": [{"name": "team"}]})
    dep = build_deployment(REF, own, settings, replicas=1)
    assert dep["spec"]["template"]["spec"]["imagePullSecrets"] == [{"name": "team"}]
    assert "imagePullSecrets" not in build(replicas=1)["spec"]["template"]["spec"]


def test_a_worker_image_that_is_not_a_reference_is_refused() -> None:
    with pytest.raises(ValidationError):
        LaneWorkerSpec.model_validate({"image": "ghcr.io/x:tag;rm -rf"})
