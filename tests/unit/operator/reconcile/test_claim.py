"""The shared claim of a session's namespace: created by the operator when managed, reported
(StoreReady=False, ClaimMissing, an Event, nothing placed) when it is the user's and missing."""

from __future__ import annotations

from typing import Any

import pytest
from berth_operator.api.conditions import get_condition
from berth_operator.builders.claim import build_shared_claim, claim_name, claim_status
from berth_operator.reconcile.plan import Plan
from berth_operator.reconcile.session import decide
from berth_operator.settings import OperatorSettings, SharedClaimSettings

from tests.unit.operator.fixtures import make_session, observation

SETTINGS = OperatorSettings(claims=SharedClaimSettings(storage_class="fast-rwx", size="5Gi"))


def cond(plan: Plan, type_: str) -> tuple[str, str] | None:
    c = get_condition(plan.status.conditions, type_)
    return (c.status, c.reason) if c else None


def test_the_claim_body_is_rwx_labelled_and_has_no_owner() -> None:
    body = build_shared_claim("team-b", "berth-shared", SETTINGS)
    assert body["metadata"]["namespace"] == "team-b"
    assert "ownerReferences" not in body["metadata"]  # garbage collection never removes it
    assert body["metadata"]["labels"]["app.kubernetes.io/managed-by"] == "berth-operator"
    assert body["spec"] == {
        "accessModes": ["ReadWriteMany"],
        "resources": {"requests": {"storage": "5Gi"}},
        "storageClassName": "fast-rwx",
    }
    assert "storageClassName" not in build_shared_claim("n", "c", OperatorSettings())["spec"]


def test_the_claim_name_comes_from_the_spec_or_the_default() -> None:
    assert claim_name(make_session().spec(), SETTINGS) == "berth-shared"
    spec = make_session().with_spec(store={"claimName": "mine"}).spec()
    assert claim_name(spec, SETTINGS) == "mine"


@pytest.mark.parametrize(
    ("claim", "managed", "expected"),
    [
        ({"status": {"phase": "Bound"}}, False, (True, "ClaimBound")),
        ({"status": {"phase": "Pending"}, "spec": {}}, True, (False, "ClaimPending")),
        ({"status": {"phase": "Lost"}}, True, (False, "ClaimLost")),
        (None, True, (False, "ClaimCreating")),
        (None, False, (False, "ClaimMissing")),
    ],
)
def test_claim_status(claim: dict[str, Any] | None, managed: bool, expected: tuple) -> None:  # type: ignore[type-arg]
    ready, reason, message = claim_status("ns", "berth-shared", claim, managed)
    assert (ready, reason) == expected
    assert "ns/berth-shared" in message


def test_a_missing_user_claim_blocks_placement_with_a_condition_and_one_event() -> None:
    status = claim_status("ns", "berth-shared", None, managed=False)
    plan = decide(observation(make_session(), claim=status), SETTINGS)
    assert plan.create is None
    assert cond(plan, "StoreReady") == ("False", "ClaimMissing")
    assert cond(plan, "Ready") == ("False", "ClaimMissing")
    ready = get_condition(plan.status.conditions, "Ready")
    assert ready is not None and "create a ReadWriteMany claim" in ready.message
    assert [(e.type, e.reason) for e in plan.events] == [("Warning", "ClaimMissing")]
    again = decide(
        observation(make_session().with_status(**plan.status.wire()), claim=status), SETTINGS
    )
    assert again.create is None and again.events == []
    # the user creates it: the session is placed
    bound = claim_status("ns", "berth-shared", {"status": {"phase": "Bound"}}, managed=False)
    placed = decide(
        observation(make_session().with_status(**again.status.wire()), claim=bound), SETTINGS
    )
    assert placed.create is not None
    assert cond(placed, "StoreReady") == ("True", "ClaimBound")


def test_a_pending_or_managed_claim_does_not_block_placement() -> None:
    for status in (
        claim_status("ns", "berth-shared", None, managed=True),
        claim_status("ns", "berth-shared", {"status": {"phase": "Pending"}}, managed=True),
    ):
        plan = decide(observation(make_session(), claim=status), SETTINGS)
        assert plan.create is not None
        assert cond(plan, "StoreReady") == ("False", status[1])


def test_store_ready_is_confirmed_once_the_pod_is_scheduled() -> None:
    from tests.unit.operator.fixtures import make_node, make_pod

    pending = claim_status("ns", "berth-shared", {"status": {"phase": "Pending"}}, managed=True)
    placed = decide(observation(make_session(), claim=pending), SETTINGS)
    assert cond(placed, "StoreReady") == ("False", "ClaimPending")
    session = make_session().with_status(**placed.status.wire())
    pod = make_pod(1).on("proc-a").running()
    plan = decide(observation(session, pod, nodes=(make_node("proc-a"),)), SETTINGS)
    assert cond(plan, "StoreReady") == ("True", "ClaimBound")
