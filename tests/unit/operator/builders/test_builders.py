"""Session pod, options ConfigMap and cleanup Job builders (the operator ⇄ runtime contract)."""

from __future__ import annotations

import json
from typing import Any

import pytest
from berth_operator.builders.cleanup_job import build_store_cleanup_job
from berth_operator.builders.names import is_label_value, pod_name
from berth_operator.builders.session_pod import (
    build_options,
    build_session_pod,
)
from berth_operator.settings import ImageSettings, OperatorSettings, RedisSettings

from tests.unit.operator.fixtures import make_session

SETTINGS = OperatorSettings(
    redis=RedisSettings(url="redis://r:6379/0"), images=ImageSettings(session="img:1")
)


def env_of(pod: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {e["name"]: e for e in pod["spec"]["containers"][0]["env"]}


def test_tool_sandbox_comes_from_the_session_else_the_operator() -> None:
    s = make_session()
    pod = build_session_pod(
        s.ref(), s.spec(), SETTINGS, epoch=1, resume_run_id=None, reason="Initial"
    )
    assert env_of(pod)["BERTH_TOOL_SANDBOX"]["value"] == "required"
    lenient = SETTINGS.model_copy(
        update={"pods": SETTINGS.pods.model_copy(update={"default_tool_sandbox": "BestEffort"})}
    )
    pod = build_session_pod(
        s.ref(), s.spec(), lenient, epoch=1, resume_run_id=None, reason="Initial"
    )
    assert env_of(pod)["BERTH_TOOL_SANDBOX"]["value"] == "best-effort"
    strict = make_session().with_spec(toolSandbox="Required")
    pod = build_session_pod(
        strict.ref(), strict.spec(), lenient, epoch=1, resume_run_id=None, reason="Initial"
    )
    assert env_of(pod)["BERTH_TOOL_SANDBOX"]["value"] == "required"


def test_pod_name_carries_the_epoch() -> None:
    assert pod_name("demo", 7) == "demo-e7"


def test_pod_env_follows_the_contract() -> None:
    s = make_session().with_llm(
        baseURL="http://llm:8000/v1", apiKeySecretRef={"name": "k", "key": "api-key"}
    )
    pod = build_session_pod(
        s.ref(), s.spec(), SETTINGS, epoch=3, resume_run_id="run-1", reason="PodCrashed"
    )
    env = env_of(pod)
    assert env["BERTH_SESSION"]["value"] == "ns/demo"
    assert env["BERTH_SESSION_UID"]["value"] == "uid-1234567890"
    assert env["BERTH_EPOCH"]["value"] == "3"
    assert env["BERTH_RESUME_RUN_ID"]["value"] == "run-1"
    assert env["BERTH_STORE_DIR"]["value"] == "/var/lib/berth/store"
    assert env["BERTH_WORKSPACE"]["value"] == "/var/lib/berth/workspace"
    assert "BERTH_SHARED_ROOT" not in env
    # The Redis URL (with the session role's password) comes from the session's own Secret.
    assert env["BERTH_REDIS_URL"]["valueFrom"]["secretKeyRef"] == {
        "name": "demo-berth",
        "key": "redis-url",
    }
    assert env["BERTH_OPTIONS_FILE"]["value"] == "/etc/berth/session/options.json"
    assert env["BERTH_TERMINATION_LOG"]["value"] == "/dev/termination-log"
    assert env["POD_IP"]["valueFrom"]["fieldRef"]["fieldPath"] == "status.podIP"
    assert env["NODE_NAME"]["valueFrom"]["fieldRef"]["fieldPath"] == "spec.nodeName"
    assert "OPENAI_API_KEY" not in env  # credentials are files, never environment
    assert env["BERTH_LLM_API_KEY_FILE"]["value"] == "/var/run/berth/llm/api-key"
    assert env["BERTH_API_TOKEN_FILE"]["value"] == "/var/run/berth/session/api-token"
    assert env["BERTH_TASK_KEY_FILE"]["value"] == "/var/run/berth/session/task-key"
    from_secrets = [n for n, e in env.items() if "secretKeyRef" in e.get("valueFrom", {})]
    assert from_secrets == ["BERTH_REDIS_URL"]  # from the session's own Secret, never the LLM key
    assert env["OPENAI_BASE_URL"]["value"] == "http://llm:8000/v1"
    c = pod["spec"]["containers"][0]
    assert c["terminationMessagePath"] == env["BERTH_TERMINATION_LOG"]["value"]
    assert pod["metadata"]["annotations"]["berth.dev/placement-reason"] == "PodCrashed"


def test_first_pod_has_no_resume_and_no_base_url() -> None:
    s = make_session()
    env = env_of(
        build_session_pod(
            s.ref(), s.spec(), SETTINGS, epoch=1, resume_run_id=None, reason="Initial"
        )
    )
    assert "BERTH_RESUME_RUN_ID" not in env
    assert "OPENAI_BASE_URL" not in env
    assert "OPENAI_API_KEY" not in env
    assert "BERTH_LLM_API_KEY_FILE" not in env


def test_pod_is_owned_non_root_read_only_and_never_restarted_by_the_kubelet() -> None:
    s = make_session()
    pod = build_session_pod(
        s.ref(), s.spec(), SETTINGS, epoch=1, resume_run_id=None, reason="Initial"
    )
    owner = pod["metadata"]["ownerReferences"][0]
    assert (owner["kind"], owner["uid"], owner["controller"]) == (
        "AgentSession",
        "uid-1234567890",
        True,
    )
    assert pod["spec"]["restartPolicy"] == "Never"
    assert pod["spec"]["securityContext"]["runAsNonRoot"] is True
    csc = pod["spec"]["containers"][0]["securityContext"]
    assert csc["readOnlyRootFilesystem"] is True and csc["allowPrivilegeEscalation"] is False
    assert pod["spec"]["automountServiceAccountToken"] is False
    vols = {v["name"]: v for v in pod["spec"]["volumes"]}
    assert vols["shared"]["persistentVolumeClaim"]["claimName"] == "berth-shared"
    # options.json is the one key of the session Secret mounted at the options path
    assert vols["options"]["secret"]["secretName"] == "demo-berth"
    assert vols["options"]["secret"]["items"] == [{"key": "options.json", "path": "options.json"}]
    assert pod["metadata"]["labels"]["berth.dev/epoch"] == "1"


def test_placement_fields_are_copied() -> None:
    s = make_session().with_spec(
        store={"claimName": "team-vol"},
        placement={
            "nodeSelector": {"pool": "agents"},
            "tolerations": [{"key": "dedicated", "operator": "Exists", "effect": "NoSchedule"}],
            "priorityClassName": "high",
            "resources": {"requests": {"cpu": "500m"}, "limits": {"memory": "1Gi"}},
            "affinity": {"nodeAffinity": {}},
            "topologySpreadConstraints": [{"maxSkew": 1}],
        },
    )
    pod = build_session_pod(
        s.ref(), s.spec(), SETTINGS, epoch=1, resume_run_id=None, reason="Initial"
    )
    spec = pod["spec"]
    assert spec["nodeSelector"] == {"pool": "agents"}
    assert spec["tolerations"] == [
        {"key": "dedicated", "operator": "Exists", "effect": "NoSchedule"}
    ]
    assert spec["priorityClassName"] == "high"
    assert spec["containers"][0]["resources"] == {
        "requests": {"cpu": "500m", "memory": "256Mi"},
        "limits": {"cpu": "2", "memory": "1Gi"},
    }
    assert spec["affinity"] == {"nodeAffinity": {}}
    assert spec["topologySpreadConstraints"] == [{"maxSkew": 1}]
    assert spec["volumes"][0]["persistentVolumeClaim"]["claimName"] == "team-vol"


@pytest.mark.parametrize(
    ("value", "labelled"),
    [("acme", True), ("a" * 63, True), ("a" * 64, False), ("has space", False), ("-x", False)],
)
def test_identity_becomes_a_label_only_when_valid(value: str, labelled: bool) -> None:
    assert is_label_value(value) is labelled
    s = make_session().with_spec(identity={"tenantId": value})
    pod = build_session_pod(
        s.ref(), s.spec(), SETTINGS, epoch=1, resume_run_id=None, reason="Initial"
    )
    assert ("berth.dev/tenant" in pod["metadata"]["labels"]) is labelled


def test_options_json_resolves_lane_worker_streams() -> None:
    s = (
        make_session()
        .with_lane("execute", mode="external", laneWorkerRef={"name": "exec"}, timeoutSeconds=30)
        .with_spec(keepAlive=True, passivation={"deadlineSeconds": 45}, limits={"maxToolRounds": 7})
    )
    options = build_options(s.ref(), s.spec(), SETTINGS)
    data = json.loads(options.render())
    assert data["schemaVersion"] == 1
    assert data["session"] == {"namespace": "ns", "name": "demo", "uid": "uid-1234567890"}
    assert data["lanes"]["execute"]["laneWorker"] == {
        "name": "exec",
        "taskStream": "berth:ns:lw:{exec}:tasks",
    }  # the consumer group is not rendered: it is always berth_contract.names.GROUP
    assert data["resultStream"] == "berth:ns:s:{uid-1234567890}:results"
    assert data["keepAlive"] is True
    assert data["passivation"] == {"deadlineSeconds": 45}
    assert data["limits"] == {"maxToolRounds": 7}
    assert "sk-" not in json.dumps(data) and 'apiKey"' not in json.dumps(data)


def test_options_json_is_read_by_the_session_runtime() -> None:
    """The writer (operator) and the reader (berth-session) agree on options.json."""
    from berth_contract.options import parse_options

    s = (
        make_session()
        .with_lane("execute", mode="hybrid", laneWorkerRef={"name": "w"})
        .with_spec(
            limits={"autoCompact": True, "autoCompactThreshold": "80%"},
            budget={"maxTotalTokens": 1000, "softLimitPercent": 50},
            identity={"tenantId": "acme", "principal": "p"},
        )
    )
    parsed = parse_options(json.loads(build_options(s.ref(), s.spec(), SETTINGS).render()))
    assert parsed.prompt == "do it"
    assert parsed.lanes["execute"].stream_for("ns") == "berth:ns:lw:{w}:tasks"
    assert parsed.limits.auto_compact_threshold == pytest.approx(0.8)
    assert parsed.budget.soft_limit_percent == 50
    assert parsed.identity.tenant_id == "acme"


def test_cleanup_job_removes_store_and_default_workspace() -> None:
    s = make_session()
    job = build_store_cleanup_job(s.ref(), s.spec(), SETTINGS)
    cmd = job["spec"]["template"]["spec"]["containers"][0]["command"]
    assert cmd[:3] == ["sh", "-c", 'rm -rf -- "$@"']
    assert cmd[4:] == [
        "/var/lib/berth/shared/store/ns/demo",
        "/var/lib/berth/shared/workspaces/ns/demo",
    ]
    # subPath is a directory inside the session's own root: the root still goes.
    custom = make_session().with_spec(workspace={"subPath": "shared/ws"})
    cmd = build_store_cleanup_job(custom.ref(), custom.spec(), SETTINGS)["spec"]["template"][
        "spec"
    ]["containers"][0]["command"]
    assert cmd[4:] == [
        "/var/lib/berth/shared/store/ns/demo",
        "/var/lib/berth/shared/workspaces/ns/demo",
    ]


def test_session_image_and_pull_secrets_default_to_the_operators_and_are_overridden() -> None:
    from berth_operator.builders.session_pod import build_session_pod

    settings = OperatorSettings(
        images=ImageSettings(session="img:1", pull_secrets=["reg-a", "reg-b"])
    )
    s = make_session()
    pod = build_session_pod(s.ref(), s.spec(), settings, epoch=1, resume_run_id=None, reason="x")
    assert pod["spec"]["containers"][0]["image"] == "img:1"
    assert pod["spec"]["imagePullSecrets"] == [{"name": "reg-a"}, {"name": "reg-b"}]
    own = make_session().with_spec(
        image="registry.example:5000/team/agent-go:1.22", imagePullSecrets=[{"name": "team"}]
    )
    pod = build_session_pod(
        own.ref(), own.spec(), settings, epoch=1, resume_run_id=None, reason="x"
    )
    assert pod["spec"]["containers"][0]["image"] == "registry.example:5000/team/agent-go:1.22"
    assert pod["spec"]["imagePullSecrets"] == [{"name": "team"}]
    none = make_session().with_spec(imagePullSecrets=[])  # an explicit empty list: none
    pod = build_session_pod(
        none.ref(), none.spec(), settings, epoch=1, resume_run_id=None, reason="x"
    )
    assert "imagePullSecrets" not in pod["spec"]
    plain = build_session_pod(s.ref(), s.spec(), SETTINGS, epoch=1, resume_run_id=None, reason="x")
    assert "imagePullSecrets" not in plain["spec"]


def test_settings_read_pull_secrets_comma_separated(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("BERTH_IMAGE_PULL_SECRETS", "reg-a, reg-b,")
    assert OperatorSettings.from_env().images.pull_secrets == ["reg-a", "reg-b"]


def test_llm_provider_settings_reach_the_options_and_the_ca_bundle_is_mounted() -> None:
    from berth_operator.builders.session_pod import build_options, build_session_pod

    s = make_session().with_llm(
        baseURL="https://llm.internal.example/v1",
        timeoutSeconds=90,
        maxRetries=4,
        organization="org-1",
        project="proj-1",
        headers={"X-Tenant": "acme"},
        caBundle={"name": "corp-ca", "key": "bundle.pem"},
    )
    llm = build_options(s.ref(), s.spec(), SETTINGS).llm
    assert (llm.timeout_seconds, llm.max_retries, llm.organization, llm.project) == (
        90,
        4,
        "org-1",
        "proj-1",
    )
    assert llm.headers == {"X-Tenant": "acme"}
    assert llm.ca_file == "/var/run/berth/llm-ca/ca.crt"
    pod = build_session_pod(s.ref(), s.spec(), SETTINGS, epoch=1, resume_run_id=None, reason="x")
    volumes = {v["name"]: v for v in pod["spec"]["volumes"]}
    assert volumes["llm-ca"]["configMap"] == {
        "name": "corp-ca",
        "items": [{"key": "bundle.pem", "path": "ca.crt"}],
    }
    mounts = {m["name"]: m for m in pod["spec"]["containers"][0]["volumeMounts"]}
    assert mounts["llm-ca"] == {
        "name": "llm-ca",
        "mountPath": "/var/run/berth/llm-ca",
        "readOnly": True,
    }
    plain = build_options(make_session().ref(), make_session().spec(), SETTINGS).llm
    assert plain.max_retries == 2 and plain.ca_file is None  # the openai client's default
