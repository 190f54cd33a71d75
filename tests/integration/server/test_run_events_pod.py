"""``GET /v1/runs/{runId}/events`` of ``berth-session`` as a real process with a file store:
a call still running mid-run, then after a passivation and a resume on a new epoch, the new pod
answers for its own run (its call, the live conversation, a leaked credential masked) and for
the run of the pod before it (no calls: its events ended with that pod; its conversation from
the run's last checkpoint in the store). See tests/integration/server/harness.py.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from berth_contract.runview import RunEvents, run_events_path
from tests.integration.server.harness import bash, blocking_bash, pod_world, wait_for

pytestmark = pytest.mark.timeout(120)

LEAK = "ghp_" + "abcdefghijABCDEFGHIJ0123456789"
SCRIPT = {
    "turns": [
        {"tool_calls": [blocking_bash("c1.txt")]},
        {"tool_calls": [bash(f"echo GITHUB_TOKEN={LEAK} >> c2.txt; cat c2.txt")]},
        {"text": "finished"},
    ]
}


def test_a_runs_calls_and_conversation_across_a_passivation(tmp_path: Path) -> None:
    with pod_world(tmp_path, SCRIPT, keepAlive=True) as world:
        first = world.start(epoch=1, tag="a")
        first.wait_ready()
        wait_for("the first tool to start", lambda: world.lines("c1.txt"))
        run_1 = first.state()["runId"]
        status, body = first.request("GET", run_events_path(run_1))
        assert status == 200, body
        mid = RunEvents.model_validate(body)
        assert [(c.name, c.lane, c.outcome) for c in mid.tool_calls] == [
            ("bash", "execute", "running")
        ]
        deadline = int(time.time() * 1000) + 60_000
        status, _ = first.request(
            "POST", "/v1/passivate", {"reason": "node_drain", "deadlineMs": deadline}
        )
        assert status == 202
        world.touch("go")
        assert first.wait_exit() == 0, first.stderr()

        second = world.start(epoch=2, resume_run_id=run_1, tag="b")
        second.wait_ready()
        idle = second.wait_state(lambda s: s["state"] == "idle", "idle after the resumed run")
        run_2 = idle["runId"] or second.state()["runId"]
        status, body = second.request("GET", run_events_path(run_2))
        assert status == 200, body
        now = RunEvents.model_validate(body)
        assert [(c.name, c.lane, c.outcome, c.exit_code) for c in now.tool_calls] == [
            ("bash", "execute", "ok", 0)
        ]
        assert LEAK not in str(body) and "GITHUB_TOKEN=[REDACTED]" in str(body)
        assert now.conversation[-1].content == "finished"

        status, body = second.request("GET", run_events_path(run_1))
        assert status == 200, body
        before = RunEvents.model_validate(body)
        assert before.tool_calls == [] and before.events_retained == 0
        asked = [c.arguments for m in before.conversation for c in m.tool_calls]
        assert len(asked) == 1 and "echo ran >> c1.txt" in asked[0]
        assert [m.role for m in before.conversation][-1] == "tool"  # the round it committed
        assert before.messages_total < now.messages_total
        assert second.request("GET", "/v1/runs/..%2Fx/events")[0] == 400
