"""The front door's view of a watched AgentSession, the directory's two indexes, and the LIST
that fills it before a new leader's front door opens."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from berth_operator.errors import KubeError
from berth_operator.gateway.directory import GatewayDirectory, view_of
from berth_operator.gateway.routing import SessionView
from berth_operator.handlers.context import GatewayClients
from berth_operator.k8s.client import KubeClient
from berth_operator.runtime_client import RuntimeClient
from berth_operator.settings import OperatorSettings, ScopeSettings

META = {
    "labels": {"role": "expert"},
    "annotations": {"berth.dev/wake-requested-at": "2026-01-01T00:00:05.000+00:00"},
}
SPEC = {
    "keepAlive": True,
    "peers": {"names": ["b"], "maxWaitSeconds": 30},
    "identity": {"tenantId": "acme", "correlationId": "c-1"},
}
STATUS = {
    "phase": "Passivated",
    "podIP": "10.0.0.7",
    "podName": "a-1",
    "atRestSince": "2026-01-01T00:00:00Z",
}


def test_a_watched_session_becomes_a_view() -> None:
    view = view_of("uid-a", "team", "a", META, SPEC, STATUS)
    assert (view.key, view.labels, view.keep_alive, view.phase) == (
        "team/a",
        {"role": "expert"},
        True,
        "Passivated",
    )
    assert (view.tenant_id, view.correlation_id) == ("acme", "c-1")
    assert view.peers is not None and view.peers.allows("b", {})
    assert view.at_rest_since == datetime(2026, 1, 1, tzinfo=UTC)
    assert view.at_rest and view.wake_pending


def test_a_spec_or_status_the_crd_would_refuse_gives_no_peers_and_no_status() -> None:
    view = view_of("uid-a", "team", "a", {}, {"peers": {"names": ["Bad_Name"]}}, {"phase": 7})
    assert view.peers is None and view.phase is None and not view.keep_alive


def test_the_directory_finds_sessions_by_uid_and_name_and_forgets_them() -> None:
    d = GatewayDirectory()
    d.put(SessionView("uid-1", "team", "a"))
    assert d.lookup("team", "a") == d.by_uid("uid-1") == SessionView("uid-1", "team", "a")
    d.put(SessionView("uid-2", "team", "a"))  # deleted and made again under the same name
    d.drop("uid-1")
    assert d.lookup("team", "a") == SessionView("uid-2", "team", "a")
    assert d.by_uid("uid-1") is None
    d.drop("uid-2")
    assert d.lookup("team", "a") is None


def _item(uid: str, name: str, namespace: str = "team") -> dict[str, Any]:
    return {
        "metadata": {"uid": uid, "namespace": namespace, "name": name},
        "spec": {"keepAlive": True},
        "status": {"phase": "Running", "podIP": "10.0.0.9"},
    }


def test_a_list_fills_the_directory_without_replacing_what_the_watch_put() -> None:
    d = GatewayDirectory()
    watched = SessionView("uid-1", "team", "a", phase="Passivated")
    d.put(watched)
    added = d.fill([_item("uid-1", "a"), _item("uid-2", "b"), {"metadata": {"name": "no-uid"}}])
    assert added == 1
    assert d.lookup("team", "a") == watched  # the watch's view is as fresh or fresher
    b = d.lookup("team", "b")
    assert b is not None and (b.uid, b.phase, b.pod_ip, b.keep_alive) == (
        "uid-2",
        "Running",
        "10.0.0.9",
        True,
    )


class _FlakyKube(KubeClient):
    """A KubeClient whose first LIST fails as an unreachable apiserver does."""

    def __init__(self) -> None:  # no API client: list_sessions is the only call made
        self.calls: list[str | None] = []

    async def list_sessions(self, namespace: str | None = None) -> list[dict[str, Any]]:
        self.calls.append(namespace)
        if len(self.calls) == 1:
            raise KubeError("cannot reach the Kubernetes API")
        return [_item(f"uid-{namespace}", f"s-{namespace}", str(namespace))]


async def _no_token(view: SessionView) -> str | None:
    return None


async def _no_wake(view: SessionView) -> None:
    return None


async def test_a_new_leader_primes_its_directory_from_the_watched_namespaces() -> None:
    kube = _FlakyKube()
    settings = OperatorSettings(scope=ScopeSettings(namespaces=["red", "blue"]))
    gateway = GatewayClients.create(
        settings,
        RuntimeClient(1),
        kube,
        _no_token,
        _no_wake,
    )
    try:
        assert await gateway.prime(attempt_for_seconds=10) == 2
    finally:
        await gateway.close()
    assert kube.calls == ["red", "red", "blue"]  # the failed LIST was tried again
    assert gateway.directory.lookup("red", "s-red") == gateway.directory.by_uid("uid-red")
    assert gateway.directory.lookup("blue", "s-blue") is not None
