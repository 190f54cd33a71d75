"""BudgetPolicy end to end on the real control plane and nodes: the operator (a subprocess under
its own ServiceAccount) serves the budget service; ten session pods of two tenants run
concurrently against the scripted model and consult it before and after every LLM call.

The small tenant's sessions are denied once its limit is reached (run failed with
``Budget exhausted``, condition BudgetExhausted) with total overshoot of at most one call per
session; the other tenant's sessions all succeed; the policies' status, conditions and Events
show it, and ``kubectl get budgetpolicies`` prints it.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
import yaml

from tests.cluster import DevCluster, host_ip
from tests.integration.operator.harness import (
    SECRET,
    condition,
    free_port,
    kget,
    operator,
    scripted_model,
    session_manifest,
    wait,
)

pytestmark = pytest.mark.integration

ROUNDS = 4
# The guard reserves the request's estimate (messages and tool schemas, ~1.3k tokens here) and
# settles to this usage, so each call can overshoot its reservation by under PER_CALL.
USAGE = {"prompt_tokens": 2000, "completion_tokens": 200}
PER_CALL = 2200
SMALL_LIMIT = 4_000  # below one session's use (5 calls), so every acme session is denied
SCRIPT = {
    "turns": [
        *[{"tool_calls": [{"name": "ls", "arguments": {"path": "."}}], "usage": USAGE}] * ROUNDS,
        {"text": "done", "usage": USAGE},
    ]
}


def policy(name: str, tenant: str, limit: int) -> dict[str, Any]:
    return {
        "apiVersion": "berth.dev/v1alpha1",
        "kind": "BudgetPolicy",
        "metadata": {"name": name},
        "spec": {
            "selector": {"tenantId": tenant},
            "limits": {"totalTokens": limit},
            "softLimitPercent": 50,
        },
    }


@pytest.mark.timeout(900)  # ten pods on two nodes of a shared 2-core machine, image build first
def test_budget_policy_two_tenants_on_the_cluster(dev_cluster: DevCluster) -> None:
    dc = dev_cluster
    dc.kubectl("apply", "-f", "crds/berth.dev_budgetpolicies.yaml")
    dc.kubectl("wait", "--for=condition=Established", "crd/budgetpolicies.berth.dev")
    port = free_port()
    budget_env = {
        "BERTH_BUDGET_ENABLED": "true",
        "BERTH_BUDGET_PORT": str(port),
        "BERTH_BUDGET_URL": f"http://{host_ip()}:{port}",
        "BERTH_HTTP_HOST": "0.0.0.0",  # the budget service must be reachable from pods
    }
    names = [f"acme-{i}" for i in range(5)] + [f"globex-{i}" for i in range(5)]
    with (
        dc.namespace("budget") as ns,
        scripted_model(SCRIPT) as llm,
        operator(dc, ns, **budget_env),
    ):
        docs: list[dict[str, Any]] = [
            SECRET,
            policy("small", "acme", SMALL_LIMIT),
            policy("large", "globex", 1_000_000),
        ]
        for name in names:
            docs.append(
                session_manifest(
                    name,
                    llm.base_url,
                    f"task of {name}",
                    identity={"tenantId": name.split("-")[0]},
                )
            )
        try:
            dc.kubectl("-n", ns, "apply", "-f", "-", input=yaml.safe_dump_all(docs))

            def all_finished() -> dict[str, Any] | None:
                objs = {n: kget(dc, ns, "agentsession", n) or {} for n in names}
                phases = [o.get("status", {}).get("phase") for o in objs.values()]
                return objs if all(p in ("Succeeded", "Failed") for p in phases) else None

            objs = wait("all ten sessions to finish", all_finished, cap=480, every=2)
            for name in names[5:]:
                assert objs[name]["status"]["phase"] == "Succeeded", json.dumps(objs[name])
            for name in names[:5]:
                st = objs[name]["status"]
                cond = condition(objs[name], "BudgetExhausted") or {}
                assert st["phase"] == "Failed" and cond.get("status") == "True", json.dumps(st)
                assert "BudgetPolicy small" in cond.get("message", ""), json.dumps(st)

            def reported(name: str, denied: int) -> dict[str, Any] | None:
                obj = kget(dc, ns, "budgetpolicy", name) or {}
                st = obj.get("status") or {}
                return obj if st.get("sessionsDenied") == denied else None

            def consumed(obj: dict[str, Any]) -> int:
                resources = (obj.get("status") or {}).get("resources") or []
                return int({r["name"]: r for r in resources}["totalTokens"]["consumed"])

            def settled_large() -> dict[str, Any] | None:
                # status is refreshed every 10 s: wait for the refresh after the last settlement
                obj = reported("large", 0)
                return obj if obj and consumed(obj) == 5 * (ROUNDS + 1) * PER_CALL else None

            small = wait("small's status", lambda: reported("small", 5), cap=60)
            large = wait("large's status with every call settled", settled_large, cap=60)
            used = {r["name"]: r for r in small["status"]["resources"]}["totalTokens"]
            assert used["consumed"] <= SMALL_LIMIT + 5 * PER_CALL, used
            assert used["reserved"] == 0, used
            assert condition(small, "Exhausted")["status"] == "True"
            assert condition(small, "SoftLimitReached")["status"] == "True"
            assert condition(large, "Exhausted")["status"] == "False"
            big = {r["name"]: r for r in large["status"]["resources"]}["totalTokens"]
            assert big["consumed"] == 5 * (ROUNDS + 1) * PER_CALL, big

            events = dc.kubectl(
                "-n",
                ns,
                "get",
                "events",
                "--field-selector",
                "involvedObject.kind=BudgetPolicy,involvedObject.name=small",
                "-o",
                "json",
            ).stdout
            reasons = {e["reason"] for e in json.loads(events)["items"]}
            assert {"BudgetSoftLimitReached", "BudgetExhausted"} <= reasons, reasons

            table = dc.kubectl("-n", ns, "get", "budgetpolicies").stdout
            print(table)
            header, *rows = table.splitlines()
            assert header.split()[:6] == [
                "NAME",
                "TENANT",
                "PERIOD",
                "USED%",
                "EXHAUSTED",
                "DENIED",
            ]
            assert any(
                r.split()[:2] == ["small", "acme"] and r.split()[4:6] == ["True", "5"] for r in rows
            )
        finally:
            dc.kubectl(
                "-n",
                ns,
                "delete",
                "budgetpolicies",
                "--all",
                "--wait=true",
                "--timeout=60s",
                check=False,
                timeout=90,
            )


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ({"limits": {}}, "limits needs at least one of"),
        ({"limits": {"totalTokens": 1}, "windowSeconds": 600}, "only valid when period is Window"),
        ({"limits": {"totalTokens": 1}, "period": "Window"}, "windowSeconds is required"),
        ({"limits": {"costMicroUSD": 5}}, "limits.costMicroUSD needs prices"),
        ({"limits": {"totalTokens": 0}}, "should be greater than or equal to 1"),
        ({"limits": {"totalTokens": 1}, "failurePolicy": "Maybe"}, "Unsupported value"),
    ],
)
def test_budget_policy_bad_manifests_rejected_at_apply(
    dev_cluster: DevCluster, spec: dict[str, Any], message: str
) -> None:
    dc = dev_cluster
    dc.kubectl("apply", "-f", "crds/berth.dev_budgetpolicies.yaml")
    dc.kubectl("wait", "--for=condition=Established", "crd/budgetpolicies.berth.dev")
    doc = policy("bad", "acme", 1)
    doc["spec"] = {"selector": {"tenantId": "acme"}, **spec}
    res = dc.kubectl(
        "-n",
        "default",
        "apply",
        "--dry-run=server",
        "-f",
        "-",
        input=yaml.safe_dump(doc),
        check=False,
    )
    assert res.returncode != 0 and message in res.stderr, res.stderr
