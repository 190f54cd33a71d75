"""Fluent test builders for AgentSession, Pod and Node bodies (make_session().with_x(...).obj())."""

from __future__ import annotations

import copy
import json
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

from berth_operator.api.agentsession import AgentSessionSpec, AgentSessionStatus
from berth_operator.api.common import SessionRef
from berth_operator.handlers.context import OperatorContext
from berth_operator.handlers.session_body import SessionBody
from berth_operator.handlers.session_workers import LiveSession
from berth_operator.reconcile.observe import ObservedNode, ObservedPod, observe_node, observe_pod
from berth_operator.reconcile.passivation import Reservation
from berth_operator.reconcile.plan import Observation

from berth_contract.state import RuntimeState

T0 = datetime(2026, 1, 1, 12, 0, 0, tzinfo=UTC)


def ts(seconds: float = 0) -> str:
    return (T0 + timedelta(seconds=seconds)).isoformat().replace("+00:00", "Z")


class SessionBuilder:
    def __init__(self, name: str = "demo", namespace: str = "ns") -> None:
        self.body: dict[str, Any] = {
            "apiVersion": "berth.dev/v1alpha1",
            "kind": "AgentSession",
            "metadata": {
                "name": name,
                "namespace": namespace,
                "uid": "uid-1234567890",
                "generation": 1,
                "annotations": {},
            },
            "spec": {"prompt": "do it", "model": "openai/gpt-4o-mini"},
            "status": {},
        }

    def with_spec(self, **fields: Any) -> SessionBuilder:
        self.body["spec"].update(fields)
        return self

    def with_budget(self, **budget: Any) -> SessionBuilder:
        return self.with_spec(budget=budget)

    def with_llm(self, **llm: Any) -> SessionBuilder:
        return self.with_spec(llm=llm)

    def with_lane(self, lane: str, **cfg: Any) -> SessionBuilder:
        self.body["spec"].setdefault("lanes", {})[lane] = cfg
        return self

    def with_status(self, **fields: Any) -> SessionBuilder:
        self.body["status"].update(fields)
        return self

    def with_condition(self, type_: str, status: str, reason: str = "X") -> SessionBuilder:
        conds = self.body["status"].setdefault("conditions", [])
        conds.append(
            {
                "type": type_,
                "status": status,
                "reason": reason,
                "message": "",
                "lastTransitionTime": ts(-100),
            }
        )
        return self

    def obj(self) -> dict[str, Any]:
        return copy.deepcopy(self.body)

    def ref(self) -> SessionRef:
        m = self.body["metadata"]
        return SessionRef(m["namespace"], m["name"], m["uid"], m["generation"])

    def spec(self) -> AgentSessionSpec:
        return AgentSessionSpec.model_validate(self.body["spec"])

    def status(self) -> AgentSessionStatus:
        return AgentSessionStatus.model_validate(self.body["status"])


def make_session(name: str = "demo", namespace: str = "ns") -> SessionBuilder:
    return SessionBuilder(name, namespace)


class PodBuilder:
    def __init__(self, session: str, epoch: int) -> None:
        self.body: dict[str, Any] = {
            "metadata": {
                "name": f"{session}-e{epoch}",
                "uid": f"pod-uid-{epoch}",
                "labels": {"berth.dev/epoch": str(epoch), "berth.dev/session": session},
                "annotations": {},
                "creationTimestamp": ts(-60),
            },
            "spec": {},
            "status": {"phase": "Pending"},
        }

    def on(self, node: str) -> PodBuilder:
        self.body["spec"]["nodeName"] = node
        self.body["status"].setdefault("conditions", []).append(
            {"type": "PodScheduled", "status": "True"}
        )
        return self

    def running(self, ready: bool = True, started: float = -60) -> PodBuilder:
        st = self.body["status"]
        st.update(phase="Running", podIP="127.0.1.5", startTime=ts(started))
        st.setdefault("conditions", []).append(
            {"type": "Ready", "status": "True" if ready else "False"}
        )
        return self

    def adopted(self, pool: str = "pool") -> PodBuilder:
        self.body["metadata"]["annotations"]["berth.dev/adopted-from-pool"] = pool
        return self

    def resuming(self, run_id: str) -> PodBuilder:
        self.body["metadata"]["annotations"]["berth.dev/resume-run-id"] = run_id
        return self

    def terminated(
        self, exit_code: int, message: dict[str, Any] | str | None = None, reason: str | None = None
    ) -> PodBuilder:
        msg = json.dumps(message) if isinstance(message, dict) else (message or "")
        self.body["status"]["phase"] = "Succeeded" if exit_code == 0 else "Failed"
        self.body["status"]["containerStatuses"] = [
            {
                "name": "session",
                "state": {
                    "terminated": {
                        "exitCode": exit_code,
                        "message": msg,
                        "reason": reason or ("Error" if exit_code else "Completed"),
                    }
                },
            }
        ]
        return self

    def waiting(self, reason: str, message: str) -> PodBuilder:
        self.body["status"]["containerStatuses"] = [
            {"name": "session", "state": {"waiting": {"reason": reason, "message": message}}}
        ]
        return self

    def evicted(self) -> PodBuilder:
        self.body["status"].update(phase="Failed", reason="Evicted", message="low on memory")
        return self

    def deleting(self) -> PodBuilder:
        self.body["metadata"]["deletionTimestamp"] = ts(-1)
        return self

    def obj(self) -> dict[str, Any]:
        return copy.deepcopy(self.body)

    def observed(self) -> ObservedPod:
        return observe_pod(self.body)


def make_pod(epoch: int = 1, session: str = "demo") -> PodBuilder:
    return PodBuilder(session, epoch)


def make_node(name: str, ready: str = "True", since: float = -600) -> ObservedNode:
    return observe_node(
        {
            "status": {
                "conditions": [{"type": "Ready", "status": ready, "lastTransitionTime": ts(since)}]
            },
            "spec": {},
        },
        name,
    )


def observation(
    session: SessionBuilder,
    *pods: PodBuilder,
    nodes: tuple[ObservedNode, ...] = (),
    state: dict[str, Any] | None = None,
    inflight: str | None = None,
    now: float = 0,
    missing: tuple[str, ...] = (),
    claim: tuple[bool, str, str] | None = None,
) -> Observation:
    return Observation(
        ref=session.ref(),
        spec=session.spec(),
        status=session.status(),
        pods=tuple(p.observed() for p in pods),
        nodes={n.name: n for n in nodes},
        inflight=inflight,
        state=RuntimeState.model_validate(state) if state is not None else None,
        missing_laneworkers=missing,
        claim=claim,
        now=T0 + timedelta(seconds=now),
    )


def ours(obs: Observation) -> Observation:
    """``obs`` as the process that stored its passivation request sees it: holding the epoch
    that request reserved for the replacement (``reconcile.passivation.reservation``)."""
    rec = obs.status.passivation
    assert rec is not None, "no passivation request in status"
    return replace(obs, reserved_epoch=Reservation(rec.epoch + 1, rec.requested_at))


def fresh_live() -> LiveSession:
    """What a session's reconcile keeps between passes, for a session seen for the first time
    (no status write yet, so nothing waits in the coalescing window)."""
    return LiveSession(SessionBody(), dict)


def warm_pool_context(calls: Any, monkeypatch: Any, pool: str = "pool") -> OperatorContext:
    """An operator context whose apiserver, runtime and warm-pod API are ``calls``, with the
    adoption token of ``ns/<pool>`` known (what ``adopt_for_session`` needs)."""
    from berth_operator.handlers import sessionwarmpool
    from berth_operator.settings import OperatorSettings

    ctx = OperatorContext(settings=OperatorSettings(), kube=calls, runtime=calls, secrets=object())
    ctx.warm.tokens[("ns", pool)] = "pool-token"
    monkeypatch.setattr(sessionwarmpool, "_api", lambda _: calls)
    return ctx
