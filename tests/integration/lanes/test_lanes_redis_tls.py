"""Lane transport tests of ``test_redis_lanes`` run again against a TLS-only server whose
certificate a private CA signed (with a single AUTH password), the client verifying it through
``ssl_ca_certs``: real ``berth-worker`` processes and the session transport built from that URL."""

from __future__ import annotations

import pytest

from tests.integration.lanes import test_redis_lanes as single

pytestmark = single.pytestmark

test_multi_tool_run_served_by_two_workers = single.test_multi_tool_run_served_by_two_workers
test_killed_worker_task_fails_once_and_other_worker_keeps_serving = (
    single.test_killed_worker_task_fails_once_and_other_worker_keeps_serving
)
test_forged_tasks_never_run_and_a_task_id_runs_once = (
    single.test_forged_tasks_never_run_and_a_task_id_runs_once
)
test_bad_input_is_dead_lettered_or_refused_and_worker_survives = (
    single.test_bad_input_is_dead_lettered_or_refused_and_worker_survives
)


@pytest.fixture(scope="module")
def redis_url(redis_tls_url: str) -> str:
    """The shared server of this mode instead of the module's plain one."""
    return redis_tls_url
