"""A session pod that could not save its work (full or failing store volume) is not a failed
run: the session says why (``StoreFull`` / ``StoreUnavailable``), waits, and is placed again
without consuming a retry, resuming its last run."""

from __future__ import annotations

import pytest
from berth_operator.api.conditions import get_condition
from berth_operator.reconcile.plan import Plan
from berth_operator.reconcile.session import decide
from berth_operator.reconcile.store_wait import STORE_RETRY_SECONDS
from berth_operator.settings import OperatorSettings, PlacementSettings

from tests.unit.operator.fixtures import make_pod, make_session, observation

SETTINGS = OperatorSettings(
    placement=PlacementSettings(
        max_placement_retries=2, backoff_base_seconds=2, backoff_cap_seconds=5
    )
)
WHY = "run 'run-1' finished but its end could not be saved: [Errno 28] No space left on device"


def ended(code: str | None, restarts: int = 0) -> Plan:
    session = make_session().with_status(
        epoch=3, podName="demo-e3", podUid="pod-uid-3", runId="run-1", restarts=restarts
    )
    msg = {"outcome": "failed", "runId": "run-1", "reason": WHY}
    if code is not None:
        msg["code"] = code
    return decide(observation(session, make_pod(3).on("proc-a").terminated(1, msg)), SETTINGS)


@pytest.mark.parametrize("code", ["StoreFull", "StoreUnavailable"])
def test_a_store_failure_names_itself_and_waits_without_consuming_a_retry(code: str) -> None:
    plan = ended(code, restarts=2)  # a plain failure here would be RetriesExhausted
    assert plan.status.phase == "Resuming"
    assert plan.status.restarts == 2
    ready = get_condition(plan.status.conditions, "Ready")
    degraded = get_condition(plan.status.conditions, "Degraded")
    assert ready is not None and degraded is not None
    assert (ready.reason, degraded.reason, degraded.status) == (code, code, "True")
    assert WHY in degraded.message
    assert [(e.type, e.reason) for e in plan.events] == [("Warning", code)]
    assert plan.create is None
    assert plan.requeue_after == STORE_RETRY_SECONDS
    failed = get_condition(plan.status.conditions, "Failed")
    assert failed is not None and failed.status == "False"


def test_the_same_failure_without_the_code_is_an_ordinary_failure() -> None:
    plan = ended(None, restarts=2)
    assert plan.status.phase == "Failed"


def test_after_the_wait_the_session_resumes_its_run_on_a_new_epoch() -> None:
    first = ended("StoreFull")
    waiting = make_session().with_status(**first.status.wire())
    early = decide(observation(waiting, now=STORE_RETRY_SECONDS - 1), SETTINGS)
    assert early.create is None
    late = decide(observation(waiting, now=STORE_RETRY_SECONDS + 1), SETTINGS)
    assert late.create is not None
    assert (late.create.epoch, late.create.reason, late.create.resume_run_id) == (
        4,
        "StoreFull",
        "run-1",
    )
    # a second attempt that ends the same way emits no second Event
    again = make_session().with_status(**late.status.wire())
    msg = {"outcome": "failed", "runId": "run-1", "reason": WHY, "code": "StoreFull"}
    pod = make_pod(4).on("proc-a").terminated(1, msg)
    second = decide(observation(again, pod, now=STORE_RETRY_SECONDS + 5), SETTINGS)
    assert second.events == []
    assert second.status.phase == "Resuming"
