"""SessionWarmPool: the pool decision, the choice of a warm pod, template matching, the warm pod
and its adoption patch (pure parts)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from berth_operator.api.agentsession import AgentSessionSpec
from berth_operator.api.common import SessionRef
from berth_operator.api.sessionwarmpool import (
    LABEL_WARM_POOL,
    SessionWarmPoolStatus,
    WarmPodTemplate,
    template_hash,
    template_mismatch,
)
from berth_operator.builders.session_pod import build_session_pod
from berth_operator.builders.warm_pod import adopt_body, adoption_patch, build_warm_pod
from berth_operator.handlers import warm_state
from berth_operator.reconcile.warmpool import (
    PoolInput,
    WarmPod,
    choose_warm_pod,
    decide_pool,
    observe_warm_pod,
)
from berth_operator.settings import OperatorSettings

NOW = datetime(2026, 1, 1, tzinfo=UTC)
LLM = {"baseURL": "http://llm:1", "apiKeySecretRef": {"name": "k", "key": "api-key"}}


def pod(name: str, template: str = "h1", **kw: object) -> WarmPod:
    base: dict[str, object] = {
        "uid": f"u-{name}",
        "pool": "p",
        "phase": "Running",
        "ready": True,
        "node_name": "node-a",
        "pod_ip": "10.0.0.1",
        "created_at": NOW,
    }
    base.update(kw)
    return WarmPod(name=name, template=template, **base)  # type: ignore[arg-type]


def inp(pods: tuple[WarmPod, ...], replicas: int = 2, **kw: object) -> PoolInput:
    base: dict[str, object] = {
        "name": "p",
        "generation": 3,
        "replicas": replicas,
        "template_hash": "h1",
        "pods": pods,
        "now": NOW,
        "status": SessionWarmPoolStatus(),
    }
    base.update(kw)
    return PoolInput(**base)  # type: ignore[arg-type]


def test_an_empty_pool_creates_its_replicas() -> None:
    plan = decide_pool(inp((), replicas=3))
    assert plan.create == 3 and plan.delete == []
    assert plan.status.replicas == 3 and plan.status.ready_replicas == 0
    assert plan.status.selector == f"{LABEL_WARM_POOL}=p"
    assert plan.status.observed_generation == 3
    assert plan.status.conditions and plan.status.conditions[0].status == "False"


def test_inflight_creates_count_so_a_stale_cache_never_over_creates() -> None:
    # two created, the cache shows neither: nothing more is created, however often it decides
    for _ in range(5):
        plan = decide_pool(inp((), inflight=frozenset({"a", "b"})))
        assert plan.create == 0
    # the cache shows one of them: the other still counts
    plan = decide_pool(inp((pod("a"),), inflight=frozenset({"a", "b"})))
    assert plan.create == 0


def test_an_adopted_pod_is_refilled_exactly_once() -> None:
    pods = (pod("a"), pod("b"))
    plan = decide_pool(inp(pods, claimed=frozenset({"a"})))
    assert plan.create == 1 and plan.delete == []
    assert plan.status.adopting_replicas == 1
    # the refill was created (in flight) while the cache still shows the claimed pod as warm
    plan = decide_pool(inp(pods, claimed=frozenset({"a"}), inflight=frozenset({"c"})))
    assert plan.create == 0


def test_refills_of_recent_adoptions_wait_while_other_missing_pods_do_not() -> None:
    """A pool of 4 with two pods just taken by adoptions and one missing for another reason
    (deleted): only that one is created now; the two refills come once held no more."""
    pods = (pod("a"), pod("b"), pod("c"))
    plan = decide_pool(inp(pods, replicas=4, claimed=frozenset({"a", "b"}), refills_held=2))
    assert plan.create == 1 and plan.status.replicas == 2
    plan = decide_pool(inp(pods, replicas=4, claimed=frozenset({"a", "b"}), refills_held=0))
    assert plan.create == 3
    # more held than missing (an adoption given back): nothing created, never negative
    assert decide_pool(inp((pod("a"), pod("b")), refills_held=2)).create == 0


def test_taken_pods_hold_their_refills_for_the_delay_only(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    clock = [100.0]
    monkeypatch.setattr(warm_state.time, "monotonic", lambda: clock[0])
    state = warm_state.WarmPoolState()
    key = ("ns", "p")
    assert state.refills_held(key, 2.0) == (0, None)
    assert state.claim(key, "a")
    clock[0] += 0.5
    assert state.claim(key, "b")
    assert state.refills_held(key, 2.0) == (2, 1.5)  # a's refill due in 1.5 s
    clock[0] += 1.6
    assert state.refills_held(key, 2.0) == (1, pytest.approx(0.4))  # b's in 0.4 s
    state.release(key, "b")  # b's adoption did not happen: nothing to refill for it
    assert state.refills_held(key, 2.0) == (0, None)
    assert state.refills_held(key, 0.0) == (0, None)  # no delay: refills at once


def test_pods_of_an_old_template_on_a_drained_node_or_ended_are_deleted() -> None:
    pods = (
        pod("old", template="h0"),
        pod("drained", node_name="node-b"),
        pod("ended", phase="Failed"),
        pod("ok"),
    )
    plan = decide_pool(inp(pods, disrupted=frozenset({"node-b"})))
    assert {name for name, _uid, _why in plan.delete} == {"old", "drained", "ended"}
    assert plan.create == 1  # ok + 1 new = 2


def test_scale_down_removes_not_ready_pods_first() -> None:
    pods = (pod("a"), pod("b", ready=False), pod("c"))
    plan = decide_pool(inp(pods, replicas=2))
    assert [d[0] for d in plan.delete] == ["b"]
    assert plan.status.ready_replicas == 2
    assert plan.status.conditions and plan.status.conditions[0].status == "True"


def test_choose_only_ready_current_pods_off_avoided_and_drained_nodes() -> None:
    pods = [
        pod("newer", created_at=NOW + timedelta(seconds=5)),
        pod("oldest"),
        pod("not-ready", ready=False),
        pod("old-template", template="h0"),
        pod("drained", node_name="node-b"),
        pod("avoided", node_name="node-c"),
        pod("claimed"),
        pod("no-ip", pod_ip=""),
        pod("deleting", deleting=True),
    ]
    got = choose_warm_pod(
        pods, "h1", claimed={"claimed"}, disrupted={"node-b"}, avoid_nodes={"node-c"}
    )
    assert [p.name for p in got] == ["oldest", "newer"]


def test_template_hash_follows_the_template_and_the_default_image() -> None:
    t = WarmPodTemplate.model_validate({"llm": LLM})
    assert template_hash(t, "img:1") == template_hash(t, "img:1")
    assert template_hash(t, "img:1") != template_hash(t, "img:2")
    t2 = WarmPodTemplate.model_validate({"llm": {**LLM, "timeoutSeconds": 5}})
    assert template_hash(t, "img:1") != template_hash(t2, "img:1")


def spec(**kw: object) -> AgentSessionSpec:
    return AgentSessionSpec.model_validate(
        {"prompt": "p", "model": "openai/x", "llm": LLM, "warmPoolRef": {"name": "p"}, **kw}
    )


def test_template_mismatch_names_the_field() -> None:
    t = WarmPodTemplate.model_validate({"llm": LLM})
    assert template_mismatch(spec(), t, "img", 120) == ""
    assert template_mismatch(spec(image="other:1"), t, "img", 120) == "spec.image differs"
    assert "placement" in template_mismatch(
        spec(placement={"nodeSelector": {"a": "b"}}), t, "img", 120
    )
    assert "store" in template_mismatch(spec(store={"claimName": "c"}), t, "img", 120)
    assert "deadline" in template_mismatch(spec(passivation={"deadlineSeconds": 5}), t, "img", 120)
    assert template_mismatch(spec(image="img"), t, "img", 120) == ""  # the default, spelled out


def test_warm_pod_mounts_only_its_namespace_and_is_hardened_like_a_session_pod() -> None:
    settings = OperatorSettings()
    t = WarmPodTemplate.model_validate({"llm": LLM, "placement": {"nodeSelector": {"x": "y"}}})
    body = build_warm_pod("ns", "p", "uid-p", t, "h1", settings)
    c = body["spec"]["containers"][0]
    subpaths = sorted(m["subPath"] for m in c["volumeMounts"] if "subPath" in m)
    assert subpaths == ["store/ns", "workspaces/ns"]
    assert body["metadata"]["labels"][LABEL_WARM_POOL] == "p"
    assert body["metadata"]["ownerReferences"][0]["kind"] == "SessionWarmPool"
    assert body["spec"]["nodeSelector"] == {"x": "y"}
    env = {e["name"]: e.get("value") for e in c["env"]}
    assert "BERTH_SESSION" not in env and env["BERTH_WARM_POOL"] == "p"
    assert not any(
        "api" in (e.get("value") or "").lower()
        and "key" in e["name"].lower()
        and e["name"] != "BERTH_LLM_API_KEY_FILE"
        for e in c["env"]
    )
    ref = SessionRef("ns", "s", "uid-s")
    created = build_session_pod(ref, spec(), settings, epoch=1, resume_run_id=None, reason="x")
    cc = created["spec"]["containers"][0]
    assert c["securityContext"] == cc["securityContext"]
    assert body["spec"]["securityContext"] == created["spec"]["securityContext"]
    assert body["spec"]["automountServiceAccountToken"] is False


def test_adoption_patch_makes_the_pod_a_created_pod_of_the_epoch() -> None:
    settings = OperatorSettings()
    ref = SessionRef("ns", "s", "uid-s")
    created = build_session_pod(
        ref, spec(), settings, epoch=4, resume_run_id="r1", reason="Passivated"
    )
    patch = adoption_patch(ref, spec(), "p", "17", epoch=4, reason="Passivated", resume_run_id="r1")
    meta = patch["metadata"]
    assert meta["uid"] == "17"
    labels = {k: v for k, v in meta["labels"].items() if v is not None}
    assert labels == created["metadata"]["labels"]
    assert meta["labels"][LABEL_WARM_POOL] is None
    assert meta["ownerReferences"] == created["metadata"]["ownerReferences"]
    for key, value in created["metadata"]["annotations"].items():
        if key.startswith("berth.dev/"):
            assert meta["annotations"][key] == value


def test_adopt_body_carries_the_session_and_rejects_nothing_of_a_safe_spec() -> None:
    from berth_operator.builders.session_pod import build_options

    settings = OperatorSettings()
    ref = SessionRef("ns", "s", "uid-s")
    sp = spec(workspace={"subPath": "a/b"})
    body = adopt_body(
        ref,
        sp,
        build_options(ref, sp, settings),
        {"api-token": b"t" * 20, "task-key": b"\x00\x01", "redis-url": b"redis://x"},
        epoch=2,
        resume_run_id="r1",
    )
    assert body["session"] == {"namespace": "ns", "name": "s", "uid": "uid-s"}
    assert body["workspaceSubPath"] == "a/b" and body["epoch"] == 2
    assert body["taskKey"] == "AAE=" and body["redisUrl"] == "redis://x"


def test_observe_warm_pod_reads_readiness_and_labels() -> None:
    body = {
        "metadata": {
            "name": "p-w-1",
            "uid": "u",
            "resourceVersion": "5",
            "labels": {LABEL_WARM_POOL: "p", "berth.dev/warm-template": "h1"},
        },
        "spec": {"nodeName": "node-a"},
        "status": {
            "phase": "Running",
            "podIP": "10.1.1.1",
            "conditions": [{"type": "Ready", "status": "True"}],
        },
    }
    w = observe_warm_pod(body)
    assert (w.pool, w.template, w.ready, w.resource_version, w.pod_ip) == (
        "p",
        "h1",
        True,
        "5",
        "10.1.1.1",
    )


def test_a_pool_whose_pods_cannot_start_says_why_once() -> None:
    stuck = pod("a", ready=False, waiting_reason="ImagePullBackOff", waiting_message="no such host")
    plan = decide_pool(inp((stuck,), replicas=1))
    cond = plan.status.conditions[0] if plan.status.conditions else None
    assert cond is not None and (cond.status, cond.reason) == ("False", "ImagePullBackOff")
    assert plan.warning is not None and plan.warning[0] == "ImagePullBackOff"
    again = decide_pool(inp((stuck,), replicas=1, status=plan.status))
    assert again.warning is None  # the same problem: no second Event
