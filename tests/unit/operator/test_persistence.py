"""kopf's diff-base storage as the operator configures it: none on AgentSessions (one PATCH less
per session, nothing reads it), kopf's own on LaneWorkers (their on.update handlers diff it)."""

from __future__ import annotations

import json

import berth_operator.main  # noqa: F401  (registers every handler)
import kopf
from berth_operator.api.constants import DIFFBASE_KEY, GROUP
from berth_operator.persistence import WITHOUT_DIFFBASE, SelectiveDiffBaseStorage

KOPF_REGISTRY = kopf.get_default_registry()
"""Taken at import: a control-plane test swaps kopf's default registry while it runs."""

STORAGE = SelectiveDiffBaseStorage(
    without={(GROUP, "AgentSession")}, prefix="berth.dev", key=DIFFBASE_KEY
)
ESSENCE = {"spec": {"prompt": "hi"}}
STORED = {f"berth.dev/{DIFFBASE_KEY}": json.dumps(ESSENCE)}


def _body(kind: str) -> kopf.Body:
    return kopf.Body(
        {
            "apiVersion": f"{GROUP}/v1alpha1",
            "kind": kind,
            "metadata": {"name": "x", "namespace": "team", "annotations": dict(STORED)},
        }
    )


def test_agentsessions_get_no_diff_base_and_an_old_one_is_not_read() -> None:
    patch = kopf.Patch()
    STORAGE.store(body=_body("AgentSession"), patch=patch, essence=kopf.BodyEssence(ESSENCE))
    assert not patch  # nothing to PATCH
    assert STORAGE.fetch(body=_body("AgentSession")) is None


def test_agentsessions_are_not_copied_into_an_essence_nobody_compares() -> None:
    body = _body("AgentSession")
    assert STORAGE.build(body=body) == {}
    lane = STORAGE.build(body=kopf.Body({**body, "kind": "LaneWorker", "spec": {"lanes": 2}}))
    assert lane["spec"] == {"lanes": 2}


def test_laneworkers_keep_kopfs_diff_base() -> None:
    patch = kopf.Patch()
    STORAGE.store(body=_body("LaneWorker"), patch=patch, essence=kopf.BodyEssence(ESSENCE))
    stored = patch["metadata"]["annotations"][f"berth.dev/{DIFFBASE_KEY}"]
    assert json.loads(stored) == ESSENCE
    assert STORAGE.fetch(body=_body("LaneWorker")) == ESSENCE


def test_a_kind_of_another_group_is_not_mistaken_for_ours() -> None:
    body = kopf.Body({"apiVersion": "example.com/v1", "kind": "AgentSession", "metadata": {}})
    patch = kopf.Patch()
    STORAGE.store(body=body, patch=patch, essence=kopf.BodyEssence(ESSENCE))
    assert patch


def test_the_kinds_without_a_diff_base_are_exactly_those_no_handler_diffs() -> None:
    """Every kind the operator watches is either in WITHOUT_DIFFBASE (no essence is built or
    stored: a deep copy per watch event saved) or has an on.create/on.update/on.resume handler,
    which compares the essence with the stored diff-base — never both."""
    registry = KOPF_REGISTRY
    plurals = {
        "AgentSession": "agentsessions",
        "SessionWarmPool": "sessionwarmpools",
        "BudgetPolicy": "budgetpolicies",
        "LaneWorker": "laneworkers",
        "Pod": "pods",
        "Node": "nodes",
    }
    diffed = {
        h.selector.any_name
        for h in registry._changing.get_all_handlers()
        if h.reason != kopf.Reason.DELETE and h.selector is not None
    }
    watched = {
        h.selector.any_name
        for reg in (registry._changing, registry._watching, registry._indexing, registry._spawning)
        for h in reg.get_all_handlers()
        if h.selector is not None
    }
    skipped = {plurals[kind] for _, kind in WITHOUT_DIFFBASE}
    assert diffed == {"laneworkers"}
    assert not diffed & skipped
    assert watched - diffed == skipped


def test_a_pods_event_builds_no_essence() -> None:
    configured = SelectiveDiffBaseStorage(without=WITHOUT_DIFFBASE, prefix="berth.dev", key="x")
    pod = kopf.Body({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}, "spec": {}})
    assert configured.build(body=pod) == {}
    assert configured.fetch(body=pod) is None
