"""The front door's pure decisions: who may call whom, and what a delivery loop does next."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from berth_operator.api.agentsession import PeersSpec
from berth_operator.gateway.routing import SessionView, next_step, refuse_message, refuse_peer
from pydantic import ValidationError

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def view(name: str, **kw: object) -> SessionView:
    kw.setdefault("keep_alive", True)
    return SessionView(f"uid-{name}", kw.pop("namespace", "team"), name, **kw)  # type: ignore[arg-type]


def test_peers_allow_by_name_or_by_every_selected_label() -> None:
    by_name = PeersSpec(names=["b"])
    assert by_name.allows("b", {}) and not by_name.allows("c", {})
    by_label = PeersSpec.model_validate({"selector": {"matchLabels": {"role": "x", "tier": "1"}}})
    assert by_label.allows("any", {"role": "x", "tier": "1", "more": "y"})
    assert not by_label.allows("any", {"role": "x"})
    with pytest.raises(ValidationError):  # an empty selector would select everybody
        PeersSpec.model_validate({"selector": {"matchLabels": {}}})


def test_a_message_needs_a_keep_alive_session_that_has_not_ended() -> None:
    assert refuse_message(view("a")) is None
    assert "not keepAlive" in (refuse_message(view("a", keep_alive=False)) or "")
    assert "has ended (Succeeded)" in (refuse_message(view("a", phase="Succeeded")) or "")


def test_peer_calls_stay_in_the_namespace_and_follow_spec_peers() -> None:
    a = view("a", peers=PeersSpec(names=["b"]))
    assert refuse_peer(a, view("b"), [], 3) == (["team/a"], None)
    chain, why = refuse_peer(a, view("b", namespace="other"), [], 3)
    assert chain == [] and "one namespace" in (why or "")
    chain, why = refuse_peer(a, view("c"), [], 3)
    assert chain == [] and why == "spec.peers of team/a does not allow calling team/c"
    chain, why = refuse_peer(view("x"), view("b"), [], 3)  # no spec.peers: nobody
    assert chain == [] and "does not allow" in (why or "")


def test_loops_and_deep_chains_are_refused_with_the_path() -> None:
    b = view("b", peers=PeersSpec(names=["a", "c", "d"]))
    chain, why = refuse_peer(b, view("a"), ["team/a"], 3)
    assert chain == [] and why == "peer call refused: loop team/a → team/b → team/a"
    assert refuse_peer(b, view("c"), ["team/a"], 3) == (["team/a", "team/b"], None)
    chain, why = refuse_peer(b, view("d"), ["team/x", "team/y", "team/z"], 3)
    assert chain == [] and "team/x → team/y → team/z → team/b → team/d" in (why or "")
    assert "deeper than 3" in (why or "")


@pytest.mark.parametrize(
    ("kw", "state", "step"),
    [
        ({"phase": "Running", "pod_ip": "10.0.0.1"}, "queued", "deliver"),
        ({"phase": "Running", "pod_ip": "10.0.0.1"}, "delivered", "poll"),
        ({"phase": "Running"}, "queued", "wait"),  # no address yet
        ({"phase": "Pending"}, "queued", "wait"),
        ({"phase": "Passivated", "at_rest_since": T0}, "queued", "wake"),
        ({"phase": "Passivated", "at_rest_since": T0}, "delivered", "wake"),
        (
            {"phase": "Passivated", "at_rest_since": T0, "wake_requested_at": T0},
            "queued",
            "wait",  # woken already: wait for its pod
        ),
        (
            {
                "phase": "Passivated",
                "at_rest_since": T0,
                "wake_requested_at": T0 - timedelta(seconds=1),
            },
            "queued",
            "wake",  # an old wake, from before it came to rest
        ),
        ({"phase": "Passivated"}, "queued", "wait"),  # a drain: the operator resumes it
        ({"phase": "Failed"}, "queued", "fail"),
        ({"keep_alive": False, "phase": "Running", "pod_ip": "10.0.0.1"}, "queued", "fail"),
    ],
)
def test_next_step(kw: dict[str, object], state: str, step: str) -> None:
    assert next_step(view("a", **kw), state)[0] == step


def test_a_deleted_session_fails_its_messages() -> None:
    assert next_step(None, "queued") == ("fail", "the session was deleted")


def test_crd_validation_needs_names_or_a_selector() -> None:
    rules = PeersSpec.model_json_schema()["x-kubernetes-validations"]
    assert rules == [
        {
            "rule": "size(self.names) > 0 || has(self.selector)",
            "message": "peers needs names or a selector",
        }
    ]
    with pytest.raises(ValidationError):
        PeersSpec(names=["Not_A_Name"])
