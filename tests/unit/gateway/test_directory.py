"""The front door's view of a watched AgentSession, and the directory's two indexes."""

from __future__ import annotations

from datetime import UTC, datetime

from berth_operator.gateway.directory import GatewayDirectory, view_of
from berth_operator.gateway.routing import SessionView

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
