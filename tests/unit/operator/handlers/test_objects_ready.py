"""A session's ``<name>-berth`` Secret and PDB are waited for by its first pod of a generation;
a later pod of that generation (a resume) is placed without waiting for them, and they are
written again after that pod's placement (an adopted pod: once its runtime answers; a created
one: once created), so one deleted meanwhile comes back."""

from __future__ import annotations

import asyncio
from dataclasses import replace
from typing import Any

import pytest
from berth_operator.errors import KubeError
from berth_operator.handlers import session_apply, session_placement
from berth_operator.handlers.context import OperatorContext
from berth_operator.reconcile.plan import CreatePod, Plan
from berth_operator.settings import OperatorSettings

from berth_contract.state import RuntimeState
from tests.unit.operator.fixtures import fresh_live, make_session, observation


class Objects:
    """The Secret calls of one session and the namespace PDB's: each call is counted, waits
    for ``gate`` while it is clear, and a Secret call raises ``error`` when set."""

    def __init__(self) -> None:
        self.secret_calls = 0
        self.pdb_calls = 0
        self.done: set[str] = set()
        self.gate = asyncio.Event()
        self.gate.set()
        self.error: Exception | None = None

    async def ensure_session_secret(self, ref: Any, master: Any, redis: str, **_: Any) -> str:
        self.secret_calls += 1
        await self.gate.wait()
        if self.error is not None:
            raise self.error
        return "token"

    async def ensure_namespace(self, namespace: str, owner: Any) -> None:
        self.pdb_calls += 1
        await self.gate.wait()
        self.done.add(namespace)


class Kube:
    """The pod calls of ``_create``: the guard's LIST finds nothing; creates are recorded."""

    def __init__(self) -> None:
        self.created: list[str] = []

    async def list_pods(self, namespace: str, selector: str) -> list[dict[str, Any]]:
        return []

    async def create_pod(self, body: dict[str, Any]) -> None:
        self.created.append(body["metadata"]["name"])


def context(objects: Objects, kube: Kube | None = None) -> OperatorContext:
    return OperatorContext(
        settings=OperatorSettings(),
        kube=kube,  # type: ignore[arg-type]
        runtime=None,  # type: ignore[arg-type]
        secrets=objects,  # type: ignore[arg-type]
        disruption=objects,  # type: ignore[arg-type]
    )


async def settle(ctx: OperatorContext) -> None:
    """Let the background tasks ``ctx.spawn`` started run to their end."""
    while ctx.background:
        await asyncio.gather(*ctx.background)


async def test_a_later_pod_of_the_generation_does_not_wait_for_its_objects() -> None:
    objects = Objects()
    ctx = context(objects)
    obs = observation(make_session().with_status(epoch=1, podName="demo-e1"))
    await session_placement.prepare_pod(ctx, obs)  # the first pod: written, and waited for
    assert (objects.secret_calls, objects.pdb_calls) == (1, 1)
    assert ctx.memory(obs.ref.uid).objects_ready == 1

    objects.gate.clear()  # the apiserver is slow to answer now
    await asyncio.wait_for(session_placement.prepare_pod(ctx, obs), timeout=5)
    # returned without their answers, and without writing them beside the placement
    await asyncio.sleep(0)
    assert (objects.secret_calls, objects.pdb_calls) == (1, 1)
    assert ctx.memory(obs.ref.uid).objects_recheck

    # a pass that finds the pod still starting (no runtime answer) writes nothing yet
    await session_apply.apply_plan(
        ctx, make_session().obj(), obs, Plan(obs.status), live=fresh_live()
    )
    assert (objects.secret_calls, objects.pdb_calls) == (1, 1)

    # the first pass that finds the pod's runtime answering writes them again, once
    running = observation(
        make_session().with_status(epoch=1, podName="demo-e1"), state={"state": "running"}
    )
    await session_apply.apply_plan(
        ctx, make_session().obj(), running, Plan(running.status), live=fresh_live()
    )
    for _ in range(10):  # the spawned rewrite reaches both calls (it waits at the gate)
        await asyncio.sleep(0)
    assert (objects.secret_calls, objects.pdb_calls) == (2, 1)
    assert not any(m.objects_recheck for _, m in ctx.memory)
    objects.gate.set()
    await settle(ctx)
    await session_apply.apply_plan(
        ctx, make_session().obj(), running, Plan(running.status), live=fresh_live()
    )
    assert (objects.secret_calls, objects.pdb_calls) == (2, 1)


async def test_a_created_pod_has_its_objects_written_again_once_created() -> None:
    """A created pod mounts the Secret: a deleted one must come back without waiting for the
    pod to run (it would never run)."""
    objects, kube = Objects(), Kube()
    ctx = context(objects, kube)
    obs = observation(make_session().with_status(epoch=1, podName="demo-e1"))
    await session_placement.prepare_pod(ctx, obs)
    await session_placement.prepare_pod(ctx, obs)  # the replacement: not waited for
    assert (objects.secret_calls, objects.pdb_calls) == (1, 1)
    create = CreatePod(epoch=2, reason="Passivated", resume_run_id="run-1")
    await session_placement.create_pod(ctx, obs, create)
    await settle(ctx)
    assert kube.created == ["demo-e2"]
    assert (objects.secret_calls, objects.pdb_calls) == (2, 1)
    assert not any(m.objects_recheck for _, m in ctx.memory)


async def test_a_new_generation_waits_for_its_objects() -> None:
    objects = Objects()
    ctx = context(objects)
    session = make_session().with_status(epoch=1, podName="demo-e1")
    await session_placement.prepare_pod(ctx, observation(session))
    session.body["metadata"]["generation"] = 2  # the spec changed: options.json changes
    objects.gate.clear()
    waiting = asyncio.create_task(session_placement.prepare_pod(ctx, observation(session)))
    await asyncio.sleep(0.05)
    assert not waiting.done()  # the pod waits for the Secret of its generation
    objects.gate.set()
    await waiting
    assert ctx.memory("uid-1234567890").objects_ready == 2


async def test_a_failed_rewrite_makes_the_next_pod_wait_again(
    caplog: pytest.LogCaptureFixture,
) -> None:
    objects = Objects()
    ctx = context(objects)
    obs = observation(make_session().with_status(epoch=1, podName="demo-e1"))
    await session_placement.prepare_pod(ctx, obs)
    objects.error = KubeError("replace secret ns/demo-berth: 500 Internal Server Error")
    await session_placement.prepare_pod(ctx, obs)  # not waited for: the failure comes after
    running = replace(obs, state=RuntimeState.model_validate({"state": "running"}))
    await session_apply.apply_plan(
        ctx, make_session().obj(), running, Plan(running.status), live=fresh_live()
    )
    await settle(ctx)
    assert all(m.objects_ready is None for _, m in ctx.memory)
    assert "session Secret not written" in caplog.text
    with pytest.raises(KubeError):  # the next pod waits, and sees the error
        await session_placement.prepare_pod(ctx, obs)


async def test_the_namespace_budget_is_written_once_for_all_its_sessions() -> None:
    """One PodDisruptionBudget per namespace: the second session's pod writes its own Secret
    but no PDB."""
    objects = Objects()
    ctx = context(objects)
    two = make_session("two")
    two.body["metadata"]["uid"] = "uid-two"
    await session_placement.prepare_pod(ctx, observation(make_session("one")))
    await session_placement.prepare_pod(ctx, observation(two))
    assert (objects.secret_calls, objects.pdb_calls) == (2, 1)


def test_forgetting_a_session_forgets_its_objects() -> None:
    ctx = context(Objects())
    ctx.memory("uid-1").objects_ready = 3
    ctx.memory("uid-1").objects_recheck = True
    ctx.forget("uid-1")
    assert all(m.objects_ready is None for _, m in ctx.memory)
    assert not any(m.objects_recheck for _, m in ctx.memory)
