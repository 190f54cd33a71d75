"""The operator side of docs/architecture.md §11 (pure builders and decisions): what a session
or worker pod can see and do, the Secrets the operator makes, LLM Secret admission and the
workspace subPath rules. Each attack test builds what an attacker would ask for and shows what
the operator actually produces."""

from __future__ import annotations

import base64
import dataclasses
import json
from typing import Any

import pytest
from berth_operator.api.agentsession import WorkspaceSpec
from berth_operator.api.conditions import get_condition
from berth_operator.api.laneworker import LaneWorkerSpec
from berth_operator.api.sessionwarmpool import WarmPodTemplate
from berth_operator.builders.laneworker import LaneWorkerRef, build_deployment
from berth_operator.builders.names import subpath_problem, workspace_subpath
from berth_operator.builders.secrets import (
    api_token_of,
    build_session_secret,
    build_task_master_secret,
    build_worker_redis_secret,
    credentials_allowed,
    credentials_view,
    decode_data,
    llm_credentials_problem,
    master_of,
    needs_task_master,
    new_api_token,
    session_data,
    session_secret_update,
)
from berth_operator.builders.security import hardened_container_security, with_default_resources
from berth_operator.builders.session_pod import build_session_pod
from berth_operator.builders.warm_pod import build_warm_pod
from berth_operator.errors import SpecError
from berth_operator.reconcile.session import decide
from berth_operator.settings import ImageSettings, OperatorSettings, PodSettings, RedisSettings

from berth_contract.taskauth import derive_session_key
from tests.unit.operator.fixtures import make_session, observation

SETTINGS = OperatorSettings(
    redis=RedisSettings(url="redis://r:6379/0"), images=ImageSettings(session="img:1")
)
DANGEROUS = {
    "privileged": True,
    "allowPrivilegeEscalation": True,
    "capabilities": {"add": ["SYS_ADMIN", "NET_RAW"], "drop": []},
    "seccompProfile": {"type": "Unconfined"},
    "runAsUser": 0,
    "runAsGroup": 0,
    "runAsNonRoot": False,
    "readOnlyRootFilesystem": False,
    "procMount": "Unmasked",
    "appArmorProfile": {"type": "Unconfined"},
}


def pod_of(session: Any) -> dict[str, Any]:
    return build_session_pod(
        session.ref(), session.spec(), SETTINGS, epoch=1, resume_run_id=None, reason="Initial"
    )


def worker_pod(**fields: Any) -> dict[str, Any]:
    dep = build_deployment(
        LaneWorkerRef("team-a", "exec", "uid-1"),
        LaneWorkerSpec.model_validate(fields),
        SETTINGS,
        replicas=1,
    )
    spec: dict[str, Any] = dep["spec"]["template"]["spec"]
    return spec


# --- container hardening -----------------------------------------------------------------------


def test_dangerous_worker_security_context_never_reaches_the_pod() -> None:
    """Attack: a LaneWorker asking for a privileged, root, unconfined container (the CRD's CEL
    refuses it; an object stored before the rules still gets the hardened values)."""
    pod = worker_pod(template={"securityContext": DANGEROUS})
    sc = pod["containers"][0]["securityContext"]
    assert sc == {
        "allowPrivilegeEscalation": False,
        "privileged": False,
        "readOnlyRootFilesystem": True,
        "runAsNonRoot": True,
        "capabilities": {"drop": ["ALL"]},
        "seccompProfile": {"type": "RuntimeDefault"},
    }
    assert pod["automountServiceAccountToken"] is False
    assert pod["securityContext"]["runAsUser"] == 10001
    assert pod["securityContext"]["fsGroup"] == 10001


def test_harmless_overrides_pass() -> None:
    sc = hardened_container_security(
        {"runAsUser": 2000, "runAsGroup": 3000, "seLinuxOptions": {"level": "s0:c1"}}
    )
    assert (sc["runAsUser"], sc["runAsGroup"], sc["seLinuxOptions"]) == (
        2000,
        3000,
        {"level": "s0:c1"},
    )
    assert sc["capabilities"] == {"drop": ["ALL"]}


def test_session_container_is_hardened_and_has_limits() -> None:
    pod = pod_of(make_session())
    c = pod["spec"]["containers"][0]
    assert c["securityContext"] == hardened_container_security()
    assert pod["spec"]["automountServiceAccountToken"] is False
    assert c["resources"]["limits"] == {"cpu": "2", "memory": "4Gi"}
    assert pod["spec"]["securityContext"]["fsGroup"] == 10001


def test_no_berth_process_is_pid_1_of_its_pod() -> None:
    """Session, warm and worker pods share one PID namespace with pause as PID 1: a SIGTERM that
    comes before ``berth-session`` or ``berth-worker`` handles it ends the process (the default
    action) instead of being dropped, as it is for PID 1."""
    template = WarmPodTemplate.model_validate(
        {"llm": {"baseURL": "http://llm:1", "apiKeySecretRef": {"name": "k", "key": "api-key"}}}
    )
    pods = {
        "session": pod_of(make_session())["spec"],
        "warm": build_warm_pod("team-a", "p", "uid-p", template, "h1", SETTINGS)["spec"],
        "worker": worker_pod(),
    }
    assert {kind: spec.get("shareProcessNamespace") for kind, spec in pods.items()} == {
        "session": True,
        "warm": True,
        "worker": True,
    }


@pytest.mark.parametrize(
    ("given", "expected"),
    [
        (
            None,
            {
                "requests": {"cpu": "100m", "memory": "256Mi"},
                "limits": {"cpu": "2", "memory": "4Gi"},
            },
        ),
        (
            {"requests": {"cpu": "4", "memory": "8Gi"}},
            {"requests": {"cpu": "4", "memory": "8Gi"}, "limits": {"cpu": "4", "memory": "8Gi"}},
        ),
        (
            {"limits": {"cpu": "50m", "memory": "128Mi"}},
            {
                "requests": {"cpu": "50m", "memory": "128Mi"},
                "limits": {"cpu": "50m", "memory": "128Mi"},
            },
        ),
        (
            {"limits": {"nvidia.com/gpu": 1}},
            {
                "requests": {"cpu": "100m", "memory": "256Mi"},
                "limits": {"nvidia.com/gpu": 1, "cpu": "2", "memory": "4Gi"},
            },
        ),
    ],
)
def test_default_resources_never_invert_requests_and_limits(
    given: dict[str, Any] | None, expected: dict[str, Any]
) -> None:
    assert with_default_resources(given, SETTINGS) == expected


# --- what a session pod can see ----------------------------------------------------------------


def test_session_pod_mounts_only_its_own_workspace_and_store() -> None:
    """Attack (before): the pod mounted the whole shared volume, so bash reached every other
    session's workspace and every store. Now: two subPath mounts of its own directories."""
    pod = pod_of(make_session().with_spec(workspace={"subPath": "src/app"}))
    c = pod["spec"]["containers"][0]
    shared = [m for m in c["volumeMounts"] if m["name"] == "shared"]
    assert sorted((m["subPath"], m["mountPath"]) for m in shared) == [
        ("store/ns/demo", "/var/lib/berth/store/ns/demo"),
        ("workspaces/ns/demo", "/var/lib/berth/workspace"),
    ]
    env = {e["name"]: e.get("value") for e in c["env"]}
    assert env["BERTH_WORKSPACE"] == "/var/lib/berth/workspace/src/app"
    assert env["BERTH_WORKSPACE_ROOT"] == "/var/lib/berth/workspace"
    assert env["BERTH_STORE_DIR"] == "/var/lib/berth/store"
    assert "BERTH_SHARED_ROOT" not in env


def test_session_pod_reads_credentials_from_files_only() -> None:
    s = make_session().with_llm(apiKeySecretRef={"name": "llm", "key": "token"})
    pod = pod_of(s)
    c = pod["spec"]["containers"][0]
    # The one secret in env is the session role's Redis URL from its own Secret (tools never
    # inherit it: their environment is scrubbed); the LLM key is a file.
    refs = [e for e in c["env"] if "secretKeyRef" in e.get("valueFrom", {})]
    assert refs == [
        {
            "name": "BERTH_REDIS_URL",
            "valueFrom": {"secretKeyRef": {"name": "demo-berth", "key": "redis-url"}},
        }
    ]
    vols = {v["name"]: v for v in pod["spec"]["volumes"]}
    assert vols["session-secret"]["secret"] == {"secretName": "demo-berth", "defaultMode": 0o440}
    assert vols["llm-key"]["secret"] == {
        "secretName": "llm",
        "items": [{"key": "token", "path": "api-key"}],
        "defaultMode": 0o440,
    }
    mounts = {m["name"]: m for m in c["volumeMounts"]}
    assert mounts["session-secret"] == {
        "name": "session-secret",
        "mountPath": "/var/run/berth/session",
        "readOnly": True,
    }
    assert mounts["llm-key"]["mountPath"] == "/var/run/berth/llm" and mounts["llm-key"]["readOnly"]


def test_worker_pod_sees_workspaces_but_never_the_store() -> None:
    pod = worker_pod()
    mounts = pod["containers"][0]["volumeMounts"]
    shared = [m for m in mounts if m["name"] == "shared"]
    assert shared == [
        {"name": "shared", "mountPath": "/var/lib/berth/workspaces", "subPath": "workspaces"}
    ]
    vols = {v["name"]: v for v in pod["volumes"]}
    assert vols["task-key"]["secret"]["secretName"] == "berth-task-key"


# --- workspace subPath -------------------------------------------------------------------------


@pytest.mark.parametrize(
    "bad", ["..", "a/../../b", "/etc", ".", "./x", "a//b", "a/./b", "x\x00y", "../store/ns/other"]
)
def test_subpath_cannot_leave_the_sessions_own_root(bad: str) -> None:
    """The CRD's CEL rules refuse these; an object stored before them is refused here too."""
    assert subpath_problem(bad)
    s = make_session()
    spec = s.spec().model_copy(deep=True)
    spec.workspace = WorkspaceSpec.model_construct(sub_path=bad)  # bypass pydantic's pattern
    with pytest.raises(SpecError, match="subPath"):
        workspace_subpath(s.ref(), spec)


@pytest.mark.parametrize(
    ("sub", "expected"),
    [
        (None, "workspaces/ns/demo"),
        ("src", "workspaces/ns/demo/src"),
        ("src/app/", "workspaces/ns/demo/src/app"),
        ("store/ns/other", "workspaces/ns/demo/store/ns/other"),  # a name, not the store
    ],
)
def test_subpath_is_inside_the_sessions_root(sub: str | None, expected: str) -> None:
    s = make_session() if sub is None else make_session().with_spec(workspace={"subPath": sub})
    assert workspace_subpath(s.ref(), s.spec()) == expected


# --- Secrets -----------------------------------------------------------------------------------


def decoded(secret: dict[str, Any]) -> dict[str, bytes]:
    return {k: base64.b64decode(v) for k, v in secret["data"].items()}


def test_session_secret_carries_token_and_derived_task_key() -> None:
    ref = make_session().ref()
    master = bytes(range(32))
    token = new_api_token()
    assert len(token) == 43 and token != new_api_token()
    secret = build_session_secret(ref, session_data(ref, token, master))
    assert secret["metadata"]["name"] == "demo-berth"
    assert secret["metadata"]["labels"]["berth.dev/session"] == "demo"
    assert secret["metadata"]["ownerReferences"][0]["uid"] == ref.uid
    data = decoded(secret)
    assert data["api-token"] == token.encode()
    assert data["task-key"] == derive_session_key(master, "ns", "demo")
    assert len(data["task-key"]) == 32
    assert api_token_of(secret) == token
    # another session of the namespace gets another key
    assert derive_session_key(master, "ns", "other") != data["task-key"]


def test_session_secret_update_keeps_the_token_and_adds_the_task_key() -> None:
    ref = make_session().ref()
    without = build_session_secret(ref, session_data(ref, "tok", None))
    assert session_secret_update(ref, without, None) is None  # already right
    master = b"m" * 32
    wanted = session_secret_update(ref, without, master)
    assert wanted is not None and wanted["api-token"] == b"tok"
    assert wanted["task-key"] == derive_session_key(master, "ns", "demo")
    empty = {"data": {"api-token": base64.b64encode(b"  ").decode()}}
    fresh = session_secret_update(ref, empty, None)
    assert fresh is not None and len(fresh["api-token"]) == 43


def test_session_secret_carries_options_json_of_the_current_generation() -> None:
    ref = make_session().ref()
    first = build_session_secret(ref, session_data(ref, "tok", None, options=b'{"a": 1}'))
    assert base64.b64decode(first["data"]["options.json"]) == b'{"a": 1}'
    assert session_secret_update(ref, first, None, options=b'{"a": 1}') is None  # unchanged
    assert session_secret_update(ref, first, None) is None  # no options given: kept
    wanted = session_secret_update(ref, first, None, options=b'{"a": 2}')  # a new generation
    assert wanted == {"api-token": b"tok", "options.json": b'{"a": 2}'}


def test_task_master_secret() -> None:
    master = bytes(32)
    secret = build_task_master_secret("team-a", master)
    assert secret["metadata"] == {
        "name": "berth-task-key",
        "namespace": "team-a",
        "labels": {"app.kubernetes.io/managed-by": "berth"},
    }
    assert secret["type"] == "Opaque" and master_of(secret) == master
    assert master_of({"data": {"master": base64.b64encode(b"short").decode()}}) is None
    assert needs_task_master(
        make_session().with_lane("execute", mode="external", laneWorkerRef={"name": "w"}).spec()
    )
    assert not needs_task_master(make_session().with_lane("query", mode="internal").spec())


# --- LLM Secret admission ----------------------------------------------------------------------


def llm_secret(
    labels: dict[str, str] | None, keys: tuple[str, ...] = ("api-key",)
) -> dict[str, Any]:
    return {"metadata": {"name": "llm", "labels": labels or {}}, "data": {k: "eA==" for k in keys}}


LLM = make_session().with_llm(
    baseURL="https://llm.example/v1", apiKeySecretRef={"name": "llm", "key": "api-key"}
)


@pytest.mark.parametrize(
    ("secret", "allowed", "reason"),
    [
        (llm_secret({"berth.dev/llm-credentials": "true"}), [], None),
        (llm_secret(None), [], "SecretNotAllowed"),  # any Secret of the namespace: refused
        (llm_secret({"berth.dev/llm-credentials": "yes"}), [], "SecretNotAllowed"),
        (None, [], "SecretNotFound"),
        (llm_secret({"berth.dev/llm-credentials": "true"}, ("other",)), [], "SecretNotFound"),
        (
            llm_secret({"berth.dev/llm-credentials": "true"}),
            ["https://llm.example/"],
            None,
        ),
        (
            llm_secret({"berth.dev/llm-credentials": "true"}),
            ["https://api.openai.com/"],
            "BaseURLNotAllowed",
        ),
    ],
)
def test_llm_credentials_admission(
    secret: dict[str, Any] | None, allowed: list[str], reason: str | None
) -> None:
    problem = llm_credentials_problem(LLM.spec(), secret, allowed)
    assert (problem[0] if problem else None) == reason
    if problem:
        assert "eA==" not in problem[1]


@pytest.mark.parametrize(
    "secret",
    [
        llm_secret({"berth.dev/llm-credentials": "true"}),
        llm_secret(None),
        llm_secret({"berth.dev/llm-credentials": "true"}, ("other",)),
    ],
)
@pytest.mark.parametrize("allowed", [[], ["https://api.openai.com/"]])
def test_the_remembered_view_of_an_llm_secret_decides_alike_and_holds_no_value(
    secret: dict[str, Any], allowed: list[str]
) -> None:
    view = credentials_view(secret)
    assert llm_credentials_problem(LLM.spec(), view, allowed) == llm_credentials_problem(
        LLM.spec(), secret, allowed
    )
    assert "eA==" not in json.dumps(view) and set(view["data"]) == set(secret["data"])
    assert credentials_allowed(view) == (
        secret["metadata"]["labels"].get("berth.dev/llm-credentials") == "true"
    )
    assert not credentials_allowed(None)


def test_refused_secret_places_no_pod_and_says_how_to_fix_it_once() -> None:
    problem = llm_credentials_problem(LLM.spec(), llm_secret(None), [])
    assert problem is not None
    obs = dataclasses.replace(observation(LLM), credentials_problem=problem)
    plan = decide(obs, SETTINGS)
    assert plan.create is None
    placed = get_condition(plan.status.conditions, "Placed")
    assert placed is not None and (placed.status, placed.reason) == ("False", "SecretNotAllowed")
    assert "kubectl label secret llm berth.dev/llm-credentials=true" in placed.message
    assert [e.reason for e in plan.events] == ["SecretNotAllowed"]
    assert plan.status.phase == "Pending"
    # the next look with the same problem posts no second Event
    again = observation(LLM.with_status(**plan.status.wire()))
    again_plan = decide(dataclasses.replace(again, credentials_problem=problem), SETTINGS)
    assert again_plan.create is None and again_plan.events == []
    # once labelled, the pod is placed
    fixed = decide(again, SETTINGS)
    assert fixed.create is not None


def test_each_role_gets_its_own_redis_url_and_runtime_class() -> None:
    """Session pods read the session role's URL from their Secret, workers the worker role's from
    the namespace's berth-worker-redis; neither URL is written into a pod spec; runtimeClassName
    follows the operator's settings."""
    settings = OperatorSettings(
        redis=RedisSettings(
            url="redis://shared:6379/0",
            session_url="redis://berth-session:s3cret@r:6379/0",
            worker_url="redis://berth-worker:w0rker@r:6379/0",
        ),
        pods=PodSettings(session_runtime_class="gvisor", worker_runtime_class="kata"),
    )
    session = make_session()
    ref = session.ref()
    data = session_data(ref, "tok", None, settings.redis.for_sessions)
    assert data["redis-url"] == b"redis://berth-session:s3cret@r:6379/0"
    current = build_session_secret(ref, session_data(ref, "tok", None, "redis://old@r/0"))
    wanted = session_secret_update(ref, current, None, settings.redis.for_sessions)
    assert wanted is not None and wanted["redis-url"] == data["redis-url"]  # rotated password
    worker = build_worker_redis_secret("team-a", settings.redis.for_workers)
    assert decode_data(worker) == {"url": b"redis://berth-worker:w0rker@r:6379/0"}
    assert settings.redis.for_operator == "redis://shared:6379/0"  # falls back to redis_url

    pod = build_session_pod(ref, session.spec(), settings, epoch=1, resume_run_id=None, reason="x")
    assert pod["spec"]["runtimeClassName"] == "gvisor"
    assert "s3cret" not in json.dumps(pod)
    lw = build_deployment(
        LaneWorkerRef("team-a", "exec", "uid-2"),
        LaneWorkerSpec.model_validate({}),
        settings,
        replicas=1,
    )
    assert lw["spec"]["template"]["spec"]["runtimeClassName"] == "kata"
    assert "w0rker" not in json.dumps(lw)
