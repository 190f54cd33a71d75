"""A burst of sessions decided from the same view of a pool: each adoption skips the pods that
others claimed since its decision, so every session that found a pod free gets one (none falls
back to a cold create while the pool still has pods)."""

from __future__ import annotations

import asyncio
from dataclasses import replace
from typing import Any

import pytest
from berth_operator.api.constants import SECRET_API_TOKEN_KEY
from berth_operator.handlers import sessionwarmpool
from berth_operator.reconcile.plan import CreatePod
from berth_operator.reconcile.warmpool import Adoption, WarmPod

from tests.unit.operator.fixtures import make_session, observation, warm_pool_context

POOL = tuple(
    WarmPod(
        name=f"pool-w-{i}",
        uid=f"warm-uid-{i}",
        pool="pool",
        template="h1",
        phase="Running",
        node_name="node-b",
        pod_ip=f"10.0.0.{i}",
        ready=True,
    )
    for i in range(10)
)


class Calls:
    """The runtime's adopt call (answered after a turn of the loop) and the relabel PATCH."""

    def __init__(self) -> None:
        self.adopted: list[str] = []
        self.relabelled: list[str] = []

    async def adopt(self, ip: str, body: dict[str, Any], token: str) -> None:
        await asyncio.sleep(0)
        self.adopted.append(ip)

    async def adopt_pod(self, namespace: str, name: str, patch: Any) -> None:
        self.relabelled.append(name)


async def test_sessions_decided_together_adopt_distinct_pods(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    calls = Calls()
    ctx = warm_pool_context(calls, monkeypatch)

    async def secret_data(*_: Any) -> dict[str, bytes]:
        return {SECRET_API_TOKEN_KEY: b"session-token"}

    monkeypatch.setattr(sessionwarmpool, "_secret_data", secret_data)
    adopt = Adoption("pool", candidates=POOL)  # every decision saw the whole pool free
    create = CreatePod(epoch=1, reason="Initial", resume_run_id=None, adopt=adopt)
    sessions = []
    for i in range(8):
        obs = observation(make_session(name=f"s{i}").with_spec(warmPoolRef={"name": "pool"}))
        sessions.append(replace(obs, ref=replace(obs.ref, uid=f"uid-{i}")))

    got = await asyncio.gather(
        *(sessionwarmpool.adopt_for_session(ctx, obs, create) for obs in sessions)
    )

    assert got == [True] * 8
    assert sorted(calls.relabelled) == sorted(p.name for p in POOL[:8])
