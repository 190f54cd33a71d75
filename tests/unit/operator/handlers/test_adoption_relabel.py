"""A warm pod that took a session's epoch but could not be relabelled is deleted, and the
session goes on to its next epoch at once rather than waiting for a pod that will never show."""

from __future__ import annotations

from typing import Any

import pytest
from berth_operator.errors import KubeError
from berth_operator.handlers import sessionwarmpool
from berth_operator.reconcile.plan import CreatePod
from berth_operator.reconcile.warmpool import Adoption, WarmPod

from tests.unit.operator.fixtures import make_session, observation, warm_pool_context

KEY = ("ns", "pool")
POD = WarmPod(
    name="pool-w-abcde",
    uid="warm-uid",
    pool="pool",
    template="h1",
    phase="Running",
    node_name="node-b",
    pod_ip="10.0.0.9",
    ready=True,
)


class Calls:
    """The runtime's adopt call, the relabel PATCH (refused), and pod deletes."""

    def __init__(self) -> None:
        self.adopted: list[str] = []
        self.deleted: list[tuple[str, bool]] = []

    async def adopt(self, ip: str, body: dict[str, Any], token: str) -> None:
        self.adopted.append(ip)

    async def adopt_pod(self, namespace: str, name: str, patch: Any) -> None:
        raise KubeError(f"patch pod {namespace}/{name}: 404 Not Found")

    async def delete_pod(self, namespace: str, name: str, **options: Any) -> None:
        self.deleted.append((name, options.get("force", False)))


async def test_a_refused_relabel_gives_the_epoch_up_and_wakes_the_session(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    calls = Calls()
    ctx = warm_pool_context(calls, monkeypatch)
    session = make_session().with_spec(warmPoolRef={"name": "pool"})
    obs = observation(session.with_status(epoch=2, podName="demo-e2"))
    ctx.memory(obs.ref.uid).token = "session-token"
    woken: list[str] = []
    monkeypatch.setattr(ctx, "wake_session", woken.append)

    adopt = Adoption("pool", candidates=(POD,))
    create = CreatePod(epoch=2, reason="Passivated", resume_run_id="run-1", adopt=adopt)
    adopted = await sessionwarmpool.adopt_for_session(ctx, obs, create)

    assert adopted  # the caller must not create epoch 2's pod: that epoch was handed out
    assert calls.adopted == ["10.0.0.9"]
    assert calls.deleted == [("pool-w-abcde", True)]
    assert ctx.memory(obs.ref.uid).inflight is None  # nothing will show under demo-e2
    assert woken == [obs.ref.uid]
