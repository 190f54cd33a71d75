"""Adopt or create: the decision chooses the warm pods a placement tries (``choose_adoption``),
and ``decide`` carries the choice in the pod it plans (``CreatePod.adopt``), so the handler
only makes the calls."""

from __future__ import annotations

from dataclasses import replace

import pytest
from berth_operator.api.sessionwarmpool import WarmPodTemplate, session_template
from berth_operator.reconcile.session import decide
from berth_operator.reconcile.warmpool import WarmOffer, choose_adoption
from berth_operator.settings import OperatorSettings

from tests.unit.operator.api.test_warmpool import LLM, pod, spec
from tests.unit.operator.fixtures import make_session, observation

TEMPLATE = WarmPodTemplate.model_validate({"llm": LLM})
OFFER = WarmOffer("p", template=TEMPLATE, template_hash="h1", pods=(pod("a"), pod("b")))
CHOICE = {"disrupted": (), "avoid_nodes": (), "default_image": "img", "default_deadline": 120}


@pytest.mark.parametrize(
    ("offer", "session", "outcome", "names"),
    [
        (OFFER, spec(), "", ["a", "b"]),
        (WarmOffer("p"), spec(), "no_pool", []),
        (OFFER, spec(image="other:1"), "template_mismatch", []),
        (replace(OFFER, claimed=frozenset({"a", "b"})), spec(), "no_pod", []),
        (replace(OFFER, template_hash="h2"), spec(), "no_pod", []),
        (replace(OFFER, claimed=frozenset({"a"})), spec(), "", ["b"]),
    ],
    ids=["adopt", "no-pool", "mismatch", "all-claimed", "old-template", "one-claimed"],
)
def test_choose_adoption(offer: WarmOffer, session: object, outcome: str, names: list[str]) -> None:
    got = choose_adoption(offer, session, **CHOICE)  # type: ignore[arg-type]
    assert got.pool == "p"
    assert (got.outcome, [p.name for p in got.candidates]) == (outcome, names)
    assert bool(got.why) == (outcome == "template_mismatch")


def test_a_pod_on_the_node_to_avoid_or_a_drained_node_is_not_chosen() -> None:
    offer = replace(OFFER, pods=(pod("a", node_name="node-a"), pod("b", node_name="node-b")))
    choice = {**CHOICE, "avoid_nodes": ("node-a",)}
    assert [p.name for p in choose_adoption(offer, spec(), **choice).candidates] == ["b"]  # type: ignore[arg-type]
    choice = {**CHOICE, "disrupted": ("node-b",)}
    assert [p.name for p in choose_adoption(offer, spec(), **choice).candidates] == ["a"]  # type: ignore[arg-type]


def test_decide_carries_the_adoption_in_the_pod_it_places() -> None:
    session = make_session().with_spec(warmPoolRef={"name": "p"})
    obs = observation(session)
    offer = WarmOffer("p", session_template(obs.spec), "h1", pods=(pod("a"), pod("x", ready=False)))
    plan = decide(replace(obs, warm=offer), OperatorSettings())
    assert plan.create is not None and plan.create.adopt is not None
    assert [p.name for p in plan.create.adopt.candidates] == ["a"]
    mismatch = replace(offer, template=TEMPLATE.model_copy(update={"image": "other:1"}))
    plan = decide(replace(obs, warm=mismatch), OperatorSettings())
    assert plan.create is not None and plan.create.adopt is not None
    assert plan.create.adopt.outcome == "template_mismatch" and not plan.create.adopt.candidates


def test_decide_plans_no_adoption_for_a_session_without_a_pool() -> None:
    plan = decide(observation(make_session()), OperatorSettings())
    assert plan.create is not None and plan.create.adopt is None
