"""Bad manifests are rejected by the real apiserver with a message naming the field.

Only the CRDs are needed (no operator). Each case mutates a valid manifest; the immutable cases
create the valid object first and then apply the change. Run with ``-s`` to print every message.
"""

from __future__ import annotations

import copy
import subprocess
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import yaml

from tests.cluster import ROOT, DevCluster
from tests.integration.operator.harness import install_crds

pytestmark = pytest.mark.integration

Mutation = Callable[[dict[str, Any]], None]

SESSION: dict[str, Any] = {
    "apiVersion": "berth.dev/v1alpha1",
    "kind": "AgentSession",
    "metadata": {"name": "valid"},
    "spec": {
        "prompt": "do the thing",
        "model": "openai/gpt-4o-mini",
        "llm": {"apiKeySecretRef": {"name": "llm-credentials", "key": "api-key"}},
        "identity": {"tenantId": "acme"},
        "store": {"claimName": "berth-shared"},
        "lanes": {"query": {"mode": "internal"}},
    },
}
WORKER: dict[str, Any] = {
    "apiVersion": "berth.dev/v1alpha1",
    "kind": "LaneWorker",
    "metadata": {"name": "valid-lw"},
    "spec": {"lane": "execute", "minReplicas": 0, "maxReplicas": 3},
}


def spec_set(path: str, value: Any) -> Mutation:
    def mutate(obj: dict[str, Any]) -> None:
        node = obj["spec"]
        keys = path.split(".")
        for key in keys[:-1]:
            node = node.setdefault(key, {})
        node[keys[-1]] = value

    return mutate


def spec_del(key: str) -> Mutation:
    def mutate(obj: dict[str, Any]) -> None:
        del obj["spec"][key]

    return mutate


def rename(name: str) -> Mutation:
    def mutate(obj: dict[str, Any]) -> None:
        obj["metadata"]["name"] = name

    return mutate


# (id, base, mutation, fragments the error must contain, immutable-update case?)
CASES: list[tuple[str, dict[str, Any], Mutation, tuple[str, ...], bool]] = [
    ("missing-prompt", SESSION, spec_del("prompt"), ("spec.prompt", "Required"), False),
    ("empty-prompt", SESSION, spec_set("prompt", ""), ("spec.prompt",), False),
    ("model-without-provider", SESSION, spec_set("model", "gpt-4o"), ("spec.model",), False),
    (
        "llm-authorization-header",
        SESSION,
        spec_set("llm.headers", {"Authorization": "Bearer sk-live"}),
        ("spec.llm.headers", "credentials"),
        False,
    ),
    ("session-image-not-a-ref", SESSION, spec_set("image", "My Image:1"), ("spec.image",), False),
    (
        "worker-image-not-a-ref",
        WORKER,
        spec_set("image", "ghcr.io/x:tag;rm -rf"),
        ("spec.image",),
        False,
    ),
    (
        "pull-secret-name",
        SESSION,
        spec_set("imagePullSecrets", [{"name": "Not_A_Name"}]),
        ("spec.imagePullSecrets[0].name",),
        False,
    ),
    (
        "literal-api-key",
        SESSION,
        spec_set("llm.apiKey", "sk-live-123"),
        ("spec.llm.apiKey", "literal API key"),
        False,
    ),
    (
        "secret-ref-without-key",
        SESSION,
        spec_set("llm.apiKeySecretRef", {"name": "x"}),
        ("spec.llm.apiKeySecretRef.key", "Required"),
        False,
    ),
    (
        "lane-mode-enum",
        SESSION,
        spec_set("lanes.execute", {"mode": "remote"}),
        ("spec.lanes.execute.mode", "Unsupported value"),
        False,
    ),
    (
        "unknown-lane",
        SESSION,
        spec_set("lanes.turbo", {"mode": "internal"}),
        ("spec.lanes", "unknown lane"),
        False,
    ),
    (
        "external-lane-without-worker",
        SESSION,
        spec_set("lanes.execute", {"mode": "external"}),
        ("spec.lanes[execute].laneWorkerRef", "required when mode is external"),
        False,
    ),
    (
        "negative-max-tool-rounds",
        SESSION,
        spec_set("limits.maxToolRounds", -1),
        ("spec.limits.maxToolRounds", "greater than or equal to 1"),
        False,
    ),
    (
        "negative-tool-timeout",
        SESSION,
        spec_set("limits.toolTimeoutSeconds", -5),
        ("spec.limits.toolTimeoutSeconds",),
        False,
    ),
    (
        "bad-compact-threshold",
        SESSION,
        spec_set("limits.autoCompactThreshold", "1.5"),
        ("spec.limits.autoCompactThreshold",),
        False,
    ),
    (
        "soft-limit-over-100",
        SESSION,
        spec_set("budget", {"maxTotalTokens": 10, "softLimitPercent": 150}),
        ("spec.budget.softLimitPercent",),
        False,
    ),
    (
        "soft-limit-without-limit",
        SESSION,
        spec_set("budget", {"softLimitPercent": 80}),
        ("spec.budget.softLimitPercent", "needs maxTotalTokens"),
        False,
    ),
    (
        "zero-passivation-deadline",
        SESSION,
        spec_set("passivation.deadlineSeconds", 0),
        ("spec.passivation.deadlineSeconds",),
        False,
    ),
    (
        "workspace-escape",
        SESSION,
        spec_set("workspace.subPath", "ws/../../etc"),
        ("spec.workspace.subPath", ".."),
        False,
    ),
    (
        "node-selector-bad-label-value",
        SESSION,
        spec_set("placement.nodeSelector", {"disk": "ssd fast!"}),
        ("spec.placement.nodeSelector.disk",),
        False,
    ),
    (
        "node-selector-bad-label-key",
        SESSION,
        spec_set("placement.nodeSelector", {"bad key!": "ssd"}),
        ("spec.placement.nodeSelector", "valid label keys"),
        False,
    ),
    (
        "toleration-operator-enum",
        SESSION,
        spec_set("placement.tolerations", [{"key": "a", "operator": "Maybe"}]),
        ("spec.placement.tolerations[0].operator", "Unsupported value"),
        False,
    ),
    (
        "bad-quantity",
        SESSION,
        spec_set("placement.resources", {"requests": {"cpu": "lots"}}),
        ("spec.placement.resources.requests.cpu",),
        False,
    ),
    ("keepalive-not-bool", SESSION, spec_set("keepAlive", "yes"), ("spec.keepAlive",), False),
    (
        "idle-without-keepalive",
        SESSION,
        spec_set("idle", {"afterSeconds": 60}),
        ("spec.idle", "idle needs keepAlive: true"),
        False,
    ),
    (
        "idle-after-zero",
        SESSION,
        spec_set("idle", {"afterSeconds": 0}),
        ("spec.idle.afterSeconds",),
        False,
    ),
    ("name-too-long", SESSION, rename("s" * 51), ("metadata.name must be at most 50",), False),
    (
        "prompt-immutable",
        SESSION,
        spec_set("prompt", "something else"),
        ("spec.prompt", "immutable"),
        True,
    ),
    (
        "identity-immutable",
        SESSION,
        spec_set("identity", {"tenantId": "other"}),
        ("spec.identity", "immutable"),
        True,
    ),
    (
        "store-immutable",
        SESSION,
        spec_set("store", {"claimName": "other"}),
        ("spec.store", "immutable"),
        True,
    ),
    (
        "lw-min-above-max",
        WORKER,
        spec_set("minReplicas", 5),
        ("spec.minReplicas", "must not exceed maxReplicas"),
        False,
    ),
    ("lw-lane-enum", WORKER, spec_set("lane", "bulk"), ("spec.lane", "Unsupported value"), False),
    (
        "lw-prometheus-without-query",
        WORKER,
        spec_set("scaling", {"source": "prometheus"}),
        ("spec.scaling.prometheus", "required"),
        False,
    ),
    ("lw-zero-concurrency", WORKER, spec_set("concurrency", 0), ("spec.concurrency",), False),
    (
        "workspace-absolute",
        SESSION,
        spec_set("workspace.subPath", "/etc"),
        ("spec.workspace.subPath",),
        False,
    ),
    (
        "workspace-dot",
        SESSION,
        spec_set("workspace.subPath", "."),
        ("spec.workspace.subPath", "'.' segments"),
        False,
    ),
    (
        "workspace-empty-segment",
        SESSION,
        spec_set("workspace.subPath", "src//app"),
        ("spec.workspace.subPath", "empty"),
        False,
    ),
    (
        "lw-replicas-and-scaling",
        WORKER,
        lambda obj: obj["spec"].update(replicas=2, scaling={"targetTasksPerReplica": 4}),
        ("spec.replicas", "not both"),
        False,
    ),
    (
        "lw-privileged",
        WORKER,
        spec_set("template.securityContext", {"privileged": True}),
        ("spec.template.securityContext", "privileged"),
        False,
    ),
    (
        "lw-privilege-escalation",
        WORKER,
        spec_set("template.securityContext", {"allowPrivilegeEscalation": True}),
        ("spec.template.securityContext", "allowPrivilegeEscalation"),
        False,
    ),
    (
        "lw-added-capabilities",
        WORKER,
        spec_set("template.securityContext", {"capabilities": {"add": ["SYS_ADMIN"]}}),
        ("spec.template.securityContext", "capabilities"),
        False,
    ),
    (
        "lw-seccomp-unconfined",
        WORKER,
        spec_set("template.securityContext", {"seccompProfile": {"type": "Unconfined"}}),
        ("spec.template.securityContext", "Unconfined"),
        False,
    ),
    (
        "lw-run-as-root",
        WORKER,
        spec_set("template.securityContext", {"runAsUser": 0}),
        ("spec.template.securityContext", "root"),
        False,
    ),
]


@pytest.fixture(scope="module")
def namespace(dev_cluster: DevCluster) -> Iterator[str]:
    install_crds(dev_cluster)
    with dev_cluster.namespace("val") as ns:
        yield ns


def apply(dc: DevCluster, ns: str, obj: dict[str, Any]) -> subprocess.CompletedProcess[str]:
    return dc.kubectl("-n", ns, "apply", "-f", "-", input=yaml.safe_dump(obj), check=False)


def test_valid_manifests_and_examples_are_accepted(dev_cluster: DevCluster, namespace: str) -> None:
    for obj in (SESSION, WORKER):
        res = apply(dev_cluster, namespace, obj)
        assert res.returncode == 0, res.stderr
    for example in ("agentsession.yaml", "laneworker.yaml"):
        res = dev_cluster.kubectl(
            "-n",
            namespace,
            "apply",
            "--dry-run=server",
            "-f",
            str(ROOT / "examples" / example),
            check=False,
        )
        assert res.returncode == 0, res.stderr


@pytest.mark.parametrize(
    ("case", "base", "mutate", "fragments", "update"), CASES, ids=[c[0] for c in CASES]
)
def test_bad_manifest_is_rejected_naming_the_field(
    dev_cluster: DevCluster,
    namespace: str,
    case: str,
    base: dict[str, Any],
    mutate: Mutation,
    fragments: tuple[str, ...],
    update: bool,
) -> None:
    obj = copy.deepcopy(base)
    obj["metadata"]["name"] = f"bad-{case}"[:50]  # a create, not an update of "valid"
    if update:
        obj["metadata"]["name"] = f"imm-{case}"[:50]
        created = apply(dev_cluster, namespace, obj)
        assert created.returncode == 0, created.stderr
    mutate(obj)
    res = apply(dev_cluster, namespace, obj)
    print(f"\n[{case}] {res.stderr.strip()}")
    assert res.returncode != 0, f"{case}: accepted but should be rejected"
    for fragment in fragments:
        assert fragment in res.stderr, f"{case}: {fragment!r} not in {res.stderr!r}"
