"""A session deleted and re-applied under the same name: its first pod's name (``<name>-e1``)
may still be held by the deleted object's pod while garbage collection removes it. The create's
AlreadyExists must not count that foreign pod as this session's pod in flight (which waited out
``placement.inflight_ttl_seconds``, 60 s, in Pending): the create is placed again after the
placement backoff, with the wait named in Ready, and succeeds once the old pod is gone."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from berth_operator.api.conditions import Reason, get_condition
from berth_operator.errors import AlreadyExists
from berth_operator.handlers import session_apply
from berth_operator.handlers.context import OperatorContext
from berth_operator.reconcile.plan import CreateFailure, Observation
from berth_operator.reconcile.session import decide
from berth_operator.settings import OperatorSettings, PlacementSettings

from tests.unit.operator.fixtures import fresh_live, make_session, observation

SETTINGS = OperatorSettings(placement=PlacementSettings(backoff_base_seconds=2))


class Kube:
    """An apiserver where pod ``demo-e1`` of a deleted object (uid ``old-uid``) lives on for
    ``lingering`` create attempts, then is gone."""

    def __init__(self, lingering: int) -> None:
        self.lingering = lingering
        self.attempts = 0
        self.created: list[str] = []
        self.status_writes = 0

    async def replace_session_status(self, body: dict[str, Any]) -> dict[str, Any]:
        self.status_writes += 1
        rv = str(self.status_writes + 1)
        return {**body, "metadata": {**body["metadata"], "resourceVersion": rv}}

    async def list_pods(self, namespace: str, selector: str) -> list[dict[str, Any]]:
        return []  # selected by this object's uid: the old pod is not among them

    async def get_pod(self, namespace: str, name: str) -> dict[str, Any] | None:
        if self.attempts > self.lingering:
            return None
        labels = {"berth.dev/session-uid": "old-uid"}
        return {"metadata": {"name": name, "namespace": namespace, "labels": labels}}

    async def create_pod(self, body: dict[str, Any]) -> None:
        self.attempts += 1
        if self.attempts <= self.lingering:
            raise AlreadyExists(f"pods {body['metadata']['name']!r} already exists", status=409)
        self.created.append(body["metadata"]["name"])


def _observe(body: dict[str, Any], failed: CreateFailure | None, now: datetime) -> Observation:
    session = make_session()
    session.body = body
    return replace(observation(session), create_failure=failed, now=now)


async def test_a_recreated_session_waits_for_the_old_pod_by_name_not_for_60_s(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    kube = Kube(lingering=2)
    monkeypatch.setattr(session_apply, "post_events", lambda body, plan: None)
    ctx = OperatorContext(settings=SETTINGS, kube=kube, runtime=None)  # type: ignore[arg-type]
    body = make_session().obj()
    uid = body["metadata"]["uid"]
    waits: list[str] = []
    for n in range(6):
        failed = ctx.memory(uid).create_failure
        now = datetime.now(UTC) + timedelta(seconds=10 * (n + 1))  # past each backoff
        obs = _observe(body, failed, now)
        plan = decide(obs, SETTINGS)
        ready = get_condition(plan.status.conditions, "Ready")
        if ready is not None and ready.reason == Reason.POD_CREATE_FAILED:
            waits.append(ready.message)
        await session_apply.apply_plan(ctx, body, obs, plan, live=fresh_live())
        body = {**body, "status": plan.status.model_dump(by_alias=True, exclude_none=True)}
        assert ctx.memory(uid).inflight is None or kube.created  # never a foreign pod in flight
        if kube.created:
            break
    assert kube.created == ["demo-e1"]
    assert waits, "the wait was never named"
    assert "earlier AgentSession demo (uid old-uid) that is being deleted" in waits[0]
