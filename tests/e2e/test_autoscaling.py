"""LaneWorker autoscaling on queue pressure, end to end.

Real pieces: the control plane, ``berth-operator`` (as a subprocess watching the test's
namespace, authenticated as its ServiceAccount with ``config/rbac``), ``berth-worker`` pods run
by the process-node agent from the operator's Deployment, Redis, and Debian's Prometheus scraping
pods (through hack/prom_targets.py's file_sd targets).

"Sessions" are session-simulator pods (``tests/e2e/autoscaling_support.py``) that publish
execute-lane tasks with the session runtime's own ``RedisTaskTransport``, as session pods do; the
operator's AgentSession placement is being built concurrently, and a simulator lets the test
start four bursts at the same instant. The busy-pod test publishes from the test process with the
same transport.

Measured, not asserted: reaction times (printed, and in ``bench/scaling.py``). Asserted:
correctness (all tasks answered, no "worker lost", peak replicas = ceil(160 / 40), back to 0,
never 0 while tasks were outstanding, idle pods removed before busy ones, the prometheus source
reaching the same decisions as the broker source). Waits are bounded only to turn a hang into a
failure; the one time bound (10 polling intervals) is a guard against "never scaled", not a
performance claim.
"""

from __future__ import annotations

import asyncio
import base64
import json
import math
import tempfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from berth_operator.reconcile.scaling import recommend
from redis.exceptions import ResponseError

from berth_contract import names
from tests.cluster import ROOT, DevCluster
from tests.e2e.autoscaling_support import (
    SIM_METRIC,
    Harness,
    Sampler,
    compress,
    first,
    laneworker_manifest,
    wait,
)
from tests.integration.operator.harness import OperatorProcess, install_crds, operator_kubeconfig

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(600)]

SESSIONS = 4
TASKS_PER_SESSION = 40
TARGET = 40
POLL = 1
DOWN_WINDOW = 8
SCRAPE_INTERVAL = 5  # hack/cluster-up.sh: global scrape_interval


@pytest.fixture
def harness(dev_cluster: DevCluster, request: pytest.FixtureRequest) -> Iterator[Harness]:
    """A namespace with the shared PVC, the CRDs, and one operator watching it."""
    install_crds(dev_cluster)
    with (
        dev_cluster.namespace("as") as ns,
        tempfile.TemporaryDirectory(prefix="berth-as-") as tmp,
    ):
        # The operator runs as its ServiceAccount, so config/rbac is enforced by the apiserver.
        op = OperatorProcess(
            dev_cluster,
            ns,
            operator_kubeconfig(dev_cluster, Path(tmp)),
            Path(tmp),
            BERTH_LEADER_ELECTION="false",
            BERTH_DEFAULT_CLAIM_NAME="berth-shared",
        )
        op.start()
        failed_before = request.session.testsfailed
        try:
            yield Harness(dev_cluster, ns, str(ROOT))
        finally:
            op.stop_all()
            if request.session.testsfailed > failed_before:
                print(op.logs())


def broker_total(client: Any, stream: str) -> int:
    """lag + pending of group ``workers`` (the broker source's reading), read synchronously."""
    try:
        groups = client.xinfo_groups(stream)
    except ResponseError:
        return 0
    for group in groups:
        name = group["name"].decode() if isinstance(group["name"], bytes) else group["name"]
        if name == "workers":
            return int(group.get("lag") or 0) + int(group["pending"])
    return int(client.xlen(stream))


def prom_total(harness: Harness, query: str) -> int:
    return sum(math.ceil(float(s["value"][1])) for s in harness.prometheus_query(query))


def live(snapshot: Any) -> set[str]:
    """Names of the pods of a sample that are not terminating."""
    return {n for n, p in snapshot.pods.items() if not p["terminating"]}


def first_time(series: list[tuple[float, int]], pred: Any, after: float = 0.0) -> float:
    return next(t for t, v in series if t >= after and pred(v))


def scaling(source: str = "broker", **extra: Any) -> dict[str, Any]:
    return {
        "targetTasksPerReplica": TARGET,
        "pollingIntervalSeconds": POLL,
        "scaleDownStabilizationSeconds": DOWN_WINDOW,
        "source": source,
        **extra,
    }


def test_bursts_scale_from_zero_and_back_with_broker_and_prometheus(harness: Harness) -> None:
    """Four sessions x 40 tasks on two pools at once: source broker and source prometheus."""
    ns = harness.namespace
    prom_query = f'sum({SIM_METRIC}{{namespace="{ns}",laneworker="lwp"}})'
    harness.apply(laneworker_manifest("lwb", scaling=scaling()))
    harness.apply(
        laneworker_manifest(
            "lwp",
            scaling=scaling(
                "prometheus",
                prometheus={"url": harness.cluster.env["PROMETHEUS_URL"], "query": prom_query},
            ),
        )
    )
    for lw in ("lwb", "lwp"):
        harness.wait_pool_idle(lw)
    sims = {
        lw: harness.start_sims(lw, "b1", count=SESSIONS, tasks=TASKS_PER_SESSION)
        for lw in ("lwb", "lwp")
    }
    harness.wait_sims_ready(sims["lwb"] + sims["lwp"])
    # The sessions exist before they issue bursts: wait until Prometheus scrapes all four.
    wait(
        "Prometheus scraping the four lwp sessions",
        lambda: (
            len(harness.prometheus_query(f'{SIM_METRIC}{{namespace="{ns}",laneworker="lwp"}}'))
            == SESSIONS
        ),
        every=1,
    )
    # Both sources read side by side for lwp's burst, to compare the decisions they lead to.
    probes = {
        "broker": lambda: broker_total(harness.redis, names.task_stream(ns, "lwp")),
        "prometheus": lambda: prom_total(harness, prom_query),
    }
    with Sampler(harness.api, ns, ["lwb", "lwp"], probes=probes) as sampler:
        t_go = harness.go("lwb", "b1")
        harness.go("lwp", "b1")
        results = {lw: harness.results(lw, "b1", SESSIONS) for lw in ("lwb", "lwp")}
        for lw in ("lwb", "lwp"):
            harness.wait_pool_zero(lw, cap=DOWN_WINDOW * 20 + 60)
        time.sleep(0.5)
    harness.delete_sims("lwb")
    harness.delete_sims("lwp")

    peak = math.ceil(SESSIONS * TASKS_PER_SESSION / TARGET)
    report: dict[str, Any] = {}
    for lw in ("lwb", "lwp"):
        summary = results[lw]
        assert sum(r["ok"] for r in summary) == SESSIONS * TASKS_PER_SESSION, summary
        assert sum(r["worker_lost"] for r in summary) == 0, summary
        assert sum(r["failed"] for r in summary) == 0, summary
        samples = sampler.of(lw)
        values = compress([s.spec_replicas for s in samples])
        assert max(values) == peak, values
        assert values[0] == 0 and values[-1] == 0, values
        t_last_done = max(r["t_done"] for r in summary)
        scaled = first(samples, lambda s: s.spec_replicas > 0, after=t_go)
        at_peak = first(samples, lambda s: s.spec_replicas == peak, after=t_go)
        ready = first(samples, lambda s: s.ready_replicas >= peak, after=t_go)
        assert scaled is not None and at_peak is not None and ready is not None
        # Never at zero while any task was outstanding.
        outstanding = [s for s in samples if scaled.t <= s.t <= t_last_done]
        assert all(s.spec_replicas > 0 for s in outstanding), values
        zero = first(samples, lambda s: s.spec_replicas == 0, after=scaled.t)
        assert zero is not None
        guard = 10 * (POLL if lw == "lwb" else max(POLL, SCRAPE_INTERVAL))
        assert scaled.t - t_go < guard, "never scaled up (guard, not a performance claim)"
        report[lw] = {
            "replicas (compressed)": values,
            "burst -> first scale-up (s)": round(scaled.t - t_go, 2),
            "burst -> N replicas set (s)": round(at_peak.t - t_go, 2),
            "burst -> N replicas set (polling intervals)": round((at_peak.t - t_go) / POLL, 2),
            "burst -> all Ready (s)": round(ready.t - t_go, 2),
            "last task done -> 0 replicas (s)": round(zero.t - t_last_done, 2),
            "tasks ok": sum(r["ok"] for r in summary),
            "worker lost": sum(r["worker_lost"] for r in summary),
        }
    # Same decisions: the same burst gives the same peak and the same return to 0 on both pools,
    # and on lwp's burst the decision function gives the same peak from either source.
    assert max(report["lwb"]["replicas (compressed)"]) == max(
        report["lwp"]["replicas (compressed)"]
    )
    rec = {
        name: [
            (t, recommend(v, TARGET, 0, 6).replicas)
            for t, v in sampler.probed[name]
            if v is not None
        ]
        for name in ("broker", "prometheus")
    }
    assert max(r for _, r in rec["broker"]) == max(r for _, r in rec["prometheus"]) == peak, rec
    b_up = first_time(rec["broker"], lambda r: r > 0)
    p_up = first_time(rec["prometheus"], lambda r: r > 0)
    b_zero = first_time(rec["broker"], lambda r: r == 0, after=b_up)
    p_zero = first_time(rec["prometheus"], lambda r: r == 0, after=p_up)
    report["lwp decisions, broker vs prometheus"] = {
        "broker recommendations": compress([r for _, r in rec["broker"]]),
        "prometheus recommendations": compress([r for _, r in rec["prometheus"]]),
        "prometheus lag on the way up (s)": round(p_up - b_up, 2),
        "prometheus lag on the way down (s)": round(p_zero - b_zero, 2),
    }
    print("\nautoscaling e2e:", json.dumps(report, indent=2))


class TaskPublisher:
    """Publishes execute-lane tasks to LaneWorker ``lw`` from the test process, signed as session
    "tester" with the key derived from the namespace's master (as a session pod does, with the
    session runtime's own ``RedisTaskTransport``); its workspace is on the shared volume."""

    def __init__(self, harness: Harness, lw: str) -> None:
        ns = harness.namespace
        self.harness, self.lw = harness, lw
        self.workspace = harness.cluster.claim_dir(ns) / "workspaces" / ns / "tester"
        harness.cluster.make_dirs(self.workspace)
        self.uid = f"tester-{uuid.uuid4().hex[:6]}"
        secret = json.loads(
            harness.cluster.kubectl(
                "-n", ns, "get", "secret", "berth-task-key", "-o", "json"
            ).stdout
        )
        self.master = base64.b64decode(secret["data"]["master"])

    async def publish(self, commands: list[tuple[str, str]]) -> None:
        """One task per ``(call id, bash command)``, in order."""
        from redis.asyncio import Redis

        from berth_contract.taskauth import derive_session_key
        from session_runtime.lanes.external import ExternalTask
        from session_runtime.tools.base import ToolContext
        from session_runtime.transport import RedisTaskTransport

        ns = self.harness.namespace
        client: Redis[Any] = Redis.from_url(self.harness.redis_url)
        transport = RedisTaskTransport(
            client,
            namespace=ns,
            session_name="tester",
            session_uid=self.uid,
            epoch=1,
            lane_workers={"execute": self.lw},
            shared_root=str(self.workspace),
            task_key=derive_session_key(self.master, ns, "tester"),
        )
        ctx = ToolContext(
            session_id=f"{ns}/tester", workspace=str(self.workspace), run_id="r", turn=1
        )
        for call_id, command in commands:
            task = ExternalTask(
                task_id=call_id,
                session_id=f"{ns}/tester",
                lane="execute",
                command_type="bash",
                payload={"command": command},
                timeout_ms=300_000,
                created_ms=int(time.time() * 1000),
                tool_call_id=call_id,
            )
            await transport.publish(task, ctx)
        await client.aclose()  # type: ignore[attr-defined]


def test_burst_scales_up_as_it_lands_not_at_the_next_tick(harness: Harness) -> None:
    """With the broker source the scaling loop also wakes when tasks land: a pool polled every
    600 s scales up for a burst long before its next tick (the guard below is a tenth of the
    interval, a bound against "waited for the tick", not a performance claim)."""
    interval = 600
    harness.apply(
        laneworker_manifest(
            "lwe",
            concurrency=1,
            max_replicas=3,
            scaling={"targetTasksPerReplica": 1, "pollingIntervalSeconds": interval},
        )
    )
    harness.wait_pool_idle("lwe")  # the first tick has run; the next one is 600 s away
    tester = TaskPublisher(harness, "lwe")
    t_burst = time.time()
    asyncio.run(tester.publish([("e-0", "true"), ("e-1", "true")]))

    def replicas() -> int:
        return int((harness.get("deployment", "lwe-workers") or {})["spec"].get("replicas") or 0)

    wait("lwe scaled up for the burst", lambda: replicas() >= 2, cap=interval / 10)
    took = time.time() - t_burst
    status = (harness.get("laneworker", "lwe") or {}).get("status", {})
    assert status.get("desiredReplicas") == 2, status
    print(f"\nburst -> 2 replicas set, polling every {interval} s: {took:.2f} s")


def test_scale_down_removes_idle_pods_first(harness: Harness) -> None:
    """Older pods go idle while newer ones hold tasks: the scale-down removes the idle ones.

    Without deletion costs the ReplicaSet would remove the most recently ready pods first, i.e.
    exactly the busy ones, so this test fails if the cost annotations are missing or wrong.
    """
    import redis as redis_sync

    ns = harness.namespace
    harness.apply(
        laneworker_manifest(
            "lwd",
            concurrency=1,
            max_replicas=4,
            scaling={
                "targetTasksPerReplica": 1,
                "pollingIntervalSeconds": 1,
                "scaleDownStabilizationSeconds": 4,
            },
        )
    )
    harness.wait_pool_idle("lwd")
    tester = TaskPublisher(harness, "lwd")
    workspace, uid = tester.workspace, tester.uid
    publish = tester.publish

    stream = names.task_stream(ns, "lwd")
    sync = redis_sync.Redis.from_url(harness.redis_url, decode_responses=True)

    def holders() -> dict[str, str]:
        """task_id -> consumer holding it (pending entries)."""
        out: dict[str, str] = {}
        try:
            pending = sync.xpending_range(stream, "workers", min="-", max="+", count=100)
        except ResponseError:  # no group until the first worker starts
            return out
        for entry in pending:
            fields = sync.xrange(stream, entry["message_id"], entry["message_id"])
            if fields:
                out[fields[0][1]["task_id"]] = entry["consumer"]
        return out

    with Sampler(harness.api, ns, ["lwd"]) as sampler:
        # Gated tasks: each runs until the test creates its gate file in the workspace, so which
        # pods are busy does not depend on how fast pods start.
        medium = "while [ ! -f release-medium ]; do sleep 0.2; done"
        long = "while [ ! -f release-long ]; do sleep 0.2; done"
        asyncio.run(publish([("medium-0", medium), ("medium-1", medium)]))
        old = wait(
            "two workers holding the medium tasks", lambda: len(holders()) == 2 and holders()
        )
        asyncio.run(publish([("long-0", long), ("long-1", long)]))
        both = wait(
            "four workers, the new ones holding the long tasks",
            lambda: (h := holders()).get("long-0") and h.get("long-1") and len(h) == 4 and h,
        )
        idle_to_be = {old["medium-0"], old["medium-1"]}
        busy = {both["long-0"], both["long-1"]}
        assert not idle_to_be & busy
        # The medium tasks end, pressure drops to 2, the window passes: 4 -> 2.
        (workspace / "release-medium").touch()
        wait(
            "scale-down to 2",
            lambda: (s := sampler.of("lwd")) and s[-1].spec_replicas == 2,
            cap=120,
        )
        # The pods left once the pool settled at 2 (removed pods may vanish between samples:
        # an idle worker exits at once on SIGTERM, so compare sets rather than catch each one).
        alive = wait(
            "two pods left",
            lambda: len(a := live(sampler.of("lwd")[-1])) == 2 and a,
            cap=60,
        )
        t_settled = time.time()
        # The last sample of all four pods (a sample reads the Deployment, then the pods: the
        # one that still read 4 replicas may already list the removed pods as terminating).
        before = [x for x in sampler.of("lwd") if len(live(x)) == 4][-1]
        removed = live(before) - alive
        (workspace / "release-long").touch()
        replies = wait(
            "replies of all four tasks",
            lambda: len(r := sync.xrange(names.reply_stream(ns, uid))) == 4 and r,
            cap=120,
            every=1,
        )
        harness.wait_pool_zero("lwd", cap=120)
    by_task = {fields["task_id"]: fields for _, fields in replies}
    assert alive == busy and removed == idle_to_be, (alive, removed, idle_to_be, busy)
    # The busy pods were marked high before the scale-down; the idle ones, when a sample caught
    # their annotation before they went, low.
    costs: dict[str, str] = {}
    for snap in sampler.of("lwd"):
        if snap.t > t_settled:  # later scale-downs re-mark the (then idle) long-task pods
            break
        costs.update({n: p["cost"] for n, p in snap.pods.items() if p["cost"] is not None})
    for name in busy:
        assert int(costs[name]) > 0, costs
    for name in idle_to_be & costs.keys():
        assert int(costs[name]) < 0, costs
    for task_id in ("long-0", "long-1", "medium-0", "medium-1"):
        assert by_task[task_id]["success"] == "true", by_task[task_id]
    assert {by_task["long-0"]["worker"], by_task["long-1"]["worker"]} == busy
    print(
        "\nscale-down with busy pods:",
        json.dumps(
            {
                "idle (removed)": sorted(removed),
                "busy (kept)": sorted(busy),
                "replicas": compress([s.spec_replicas for s in sampler.of("lwd")]),
            }
        ),
    )


def test_scale_subresource_drives_replicas_when_scaling_is_omitted(harness: Harness) -> None:
    """Without ``scaling`` the operator follows ``/scale`` (kubectl scale, HPA, KEDA) and does not
    touch the count itself, even with a backlog on the stream."""
    harness.apply(laneworker_manifest("lwx", scaling=None))
    wait("Deployment of lwx", lambda: harness.get("deployment", "lwx-workers"))
    harness.cluster.kubectl("-n", harness.namespace, "scale", "laneworker/lwx", "--replicas=2")
    wait(
        "Deployment follows /scale",
        lambda: (
            (harness.get("deployment", "lwx-workers") or {}).get("spec", {}).get("replicas") == 2
        ),
    )
    wait(
        "status.replicas (read by /scale) reaches 2",
        lambda: (harness.get("laneworker", "lwx") or {}).get("status", {}).get("replicas") == 2,
        cap=120,
    )
    scale = json.loads(
        harness.cluster.kubectl(
            "get",
            "--raw",
            f"/apis/berth.dev/v1alpha1/namespaces/{harness.namespace}/laneworkers/lwx/scale",
        ).stdout
    )
    assert scale["spec"]["replicas"] == 2 and scale["status"]["replicas"] == 2
    assert "berth.dev/laneworker=lwx" in scale["status"]["selector"]
    status = (harness.get("laneworker", "lwx") or {}).get("status", {})
    assert status.get("desiredReplicas") == 2, status
    cond = harness.condition("lwx", "ScalingActive")
    assert cond is not None and cond["reason"] == "ScalingDisabled"
    # An edit of the spec replaces the pod template (and only it: replicas stay where /scale put
    # them, the Deployment controller's own annotations stay).
    harness.cluster.kubectl(
        "-n", harness.namespace, "patch", "laneworker", "lwx", "--type=merge",
        "-p", '{"spec": {"concurrency": 3}}',
    )  # fmt: skip

    def concurrency() -> str | None:
        dep = harness.get("deployment", "lwx-workers") or {}
        env = dep["spec"]["template"]["spec"]["containers"][0]["env"]
        return next((e.get("value") for e in env if e["name"] == "BERTH_WORKER_CONCURRENCY"), None)

    wait("template follows the spec", lambda: concurrency() == "3")
    dep = harness.get("deployment", "lwx-workers") or {}
    assert dep["spec"]["replicas"] == 2
    assert "deployment.kubernetes.io/revision" in dep["metadata"]["annotations"]
    harness.cluster.kubectl("-n", harness.namespace, "scale", "laneworker/lwx", "--replicas=0")
    harness.wait_pool_zero("lwx", cap=120)
