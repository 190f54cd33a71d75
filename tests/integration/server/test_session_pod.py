"""``berth-session`` as a real process: run, state, passivate, resume, crash, fencing, metrics.

Every test runs the console script with a real environment (docs/architecture.md §5), a file store
and a workspace under ``tmp_path``, and a scripted OpenAI-compatible model over HTTP. Side effects
of ``bash`` tool calls are counted in workspace files, so "no execute tool ran twice" is a line
count. Tools that must still be running when the test acts block until the test creates a file.
"""

from __future__ import annotations

import json
import shutil
import signal
import subprocess
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from berth_contract import names
from berth_contract.termination import validate
from tests.integration.server.harness import (
    bash,
    blocking_bash,
    free_port,
    pod_world,
    session_command,
    wait_for,
)
from tests.unit.runtime.pod.test_early_signals import signalled_while_importing

pytestmark = pytest.mark.timeout(120)

WAIT_THEN_FINISH = {
    "turns": [
        {"tool_calls": [blocking_bash("c1.txt")]},
        {"tool_calls": [bash("echo second >> c2.txt")]},
        {"text": "finished"},
    ]
}


def test_completes_and_writes_the_termination_message(tmp_path: Path) -> None:
    script = {"turns": [{"tool_calls": [bash("echo one >> c.txt")]}, {"text": "done"}]}
    with pod_world(tmp_path, script) as world:
        pod = world.start(epoch=1)
        assert pod.wait_exit() == 0, pod.stderr()
        msg = pod.termination()
        assert validate(msg) == []
        assert msg["outcome"] == "completed"
        assert msg["runId"].startswith("run-")
        assert msg["turn"] == 1
        assert msg["resultText"] == "done"
        assert msg["reason"] is None
        usage = msg["usage"]
        assert usage["totalTokens"] == usage["promptTokens"] + usage["completionTokens"] > 0
        assert world.lines("c.txt") == ["one"]
        assert (world.store / world.namespace / world.name).is_dir()  # store/<ns>/<name>/

        asked = len(world.model_requests())
        again = world.start(epoch=2, tag="b")  # a replacement pod without a resume id
        assert again.wait_exit() == 0, again.stderr()
        repeat = again.termination()
        assert (repeat["outcome"], repeat["runId"], repeat["resultText"]) == (
            "completed",
            msg["runId"],
            "done",
        )
        assert len(world.model_requests()) == asked  # the finished task is not redone
        assert world.lines("c.txt") == ["one"]


def test_a_new_object_of_a_kept_store_runs_its_own_prompt(tmp_path: Path) -> None:
    """Delete an AgentSession (its store kept) and apply a new one of the same name: the new
    object (new uid, placement epochs from 1 again) starts a new run with its own prompt in the
    kept conversation; it never reports the old run's result, and the old object's pods are
    refused from then on."""
    script = {
        "turns": [
            {"tool_calls": [bash("echo one >> c.txt")]},
            {"text": "done"},
            {"tool_calls": [bash("echo two >> c.txt")]},
            {"text": "second answer"},
        ]
    }
    with pod_world(tmp_path, script) as world:
        old_uid = world.uid
        first = world.start(epoch=3)  # the deleted object had reached epoch 3
        assert first.wait_exit() == 0, first.stderr()
        old = first.termination()
        assert (old["outcome"], old["resultText"]) == ("completed", "done")

        new_uid = "9f1c2d3e-0000-4000-8000-000000000002"
        world.uid = new_uid
        world.options["session"]["uid"] = new_uid
        world.options["resultStream"] = names.reply_stream(world.namespace, new_uid)
        world.options["prompt"] = "a completely different task"
        second = world.start(epoch=1, tag="b")
        assert second.wait_exit() == 0, second.stderr()
        msg = second.termination()
        assert msg["outcome"] == "completed"
        assert msg["runId"] != old["runId"]
        assert msg["resultText"] == "second answer"
        assert world.lines("c.txt") == ["one", "two"]
        last = json.dumps(world.model_requests()[-1])
        assert "a completely different task" in last and "Fix the failing test" in last

        asked = len(world.model_requests())
        replacement = world.start(epoch=2, tag="c")  # the new object's next pod: its own result
        assert replacement.wait_exit() == 0, replacement.stderr()
        again = replacement.termination()
        assert (again["outcome"], again["runId"]) == ("completed", msg["runId"])
        assert len(world.model_requests()) == asked

        world.uid = old_uid  # a late pod of the deleted object
        world.options["session"]["uid"] = old_uid
        late = world.start(epoch=4, tag="d")
        assert late.wait_exit() == 3, late.stderr()
        assert late.termination()["outcome"] == "fenced"
        assert world.lines("c.txt") == ["one", "two"]


def test_state_passivate_mid_run_then_resume_on_a_new_epoch(tmp_path: Path) -> None:
    with pod_world(tmp_path, WAIT_THEN_FINISH) as world:
        first = world.start(epoch=1, tag="a")
        first.wait_ready()
        wait_for("the first tool to start", lambda: world.lines("c1.txt"))

        state = first.state()
        assert state["state"] == "running"
        assert state["runId"].startswith("run-")
        assert state["epoch"] == 1
        assert state["session"] == "team-a/fix-bug"
        assert state["identity"]["tenantId"] == "acme"
        assert state["podName"] == "fix-bug-a" and state["nodeName"] == "node-a"
        assert state["passivation"] is None
        assert state["usage"]["totalTokens"] > 0  # the running run's first LLM call counts
        run_id = state["runId"]

        status, body = first.request("POST", "/v1/messages", {"prompt": "more"})
        assert (status, body["error"]) == (409, "not_keep_alive")
        status, body = first.request("POST", "/v1/passivate", {"deadlineMs": 1})
        assert status == 400

        deadline = int(time.time() * 1000) + 60_000
        status, body = first.request(
            "POST", "/v1/passivate", {"reason": "node_drain", "deadlineMs": deadline}
        )
        assert status == 202 and body["state"] == "passivating"
        again_status, again = first.request("POST", "/v1/passivate", {"reason": "eviction"})
        assert again_status == 202
        assert again["passivation"] == body["passivation"]  # idempotent: first request wins
        assert first.state()["passivation"]["reason"] == "node_drain"
        assert first.request("GET", "/v1/outcome")[0] == 204  # still passivating
        assert first.request("GET", "/v1/outcome?waitSeconds=-1")[0] == 400
        answered: list[tuple[int, Any]] = []
        waiter = threading.Thread(
            target=lambda: answered.append(first.request("GET", "/v1/outcome?waitSeconds=9"))
        )
        waiter.start()

        world.touch("go")  # the running tool may finish before the deadline
        assert first.wait_exit() == 0, first.stderr()
        waiter.join(timeout=10)
        msg = first.termination()
        assert answered == [(200, msg)]  # the operator's early word of the pod's end
        assert (msg["outcome"], msg["runId"], msg["reason"]) == ("passivated", run_id, "node_drain")
        assert msg["turn"] == 1 and msg["resumedFrom"] is None
        hook_line = (
            f"passivation_requested reason=node_drain deadline_ms={deadline} run_id={run_id}"
        )
        assert hook_line in first.stderr()  # the session's hooks observed the event
        assert world.lines("c2.txt") == []  # no new LLM call after the request

        second = world.start(epoch=2, resume_run_id=run_id, tag="b")
        assert second.wait_exit() == 0, second.stderr()
        done = second.termination()
        assert done["outcome"] == "completed"
        assert done["resultText"] == "finished"
        assert done["runId"] != run_id and done["turn"] == 2
        assert done["resumedFrom"] == run_id
        assert done["usage"]["totalTokens"] > msg["usage"]["totalTokens"]  # carried forward
        assert world.lines("c1.txt") == ["ran"]  # not run twice
        assert world.lines("c2.txt") == ["second"]


def test_sigterm_passivates(tmp_path: Path) -> None:
    with pod_world(tmp_path, WAIT_THEN_FINISH) as world:
        pod = world.start(epoch=1)
        pod.wait_ready()
        wait_for("the first tool to start", lambda: world.lines("c1.txt"))
        pod.signal(signal.SIGTERM)
        pod.wait_state(lambda s: s["state"] == "passivating", "passivating after SIGTERM")
        world.touch("go")
        assert pod.wait_exit() == 0, pod.stderr()
        msg = pod.termination()
        assert (msg["outcome"], msg["reason"], msg["turn"]) == ("passivated", "sigterm", 1)


@pytest.mark.skipif(shutil.which("unshare") is None, reason="needs unshare(1) (util-linux)")
def test_sigterm_while_the_pod_imports_passivates_before_any_run(tmp_path: Path) -> None:
    """``berth-session`` as PID 1 of its PID namespace (a container's process), signalled while
    it still imports the runtime: it passivates at once, before any run starts, instead of
    dropping the signal (PID 1 has no default action) and running the task."""
    with pod_world(tmp_path, WAIT_THEN_FINISH) as world:
        env = world.env(epoch=1, resume_run_id=None, tag="a")
        code, err = signalled_while_importing(session_command(), env)
        assert code == 0, err[-2000:]
        msg = json.loads(Path(env["BERTH_TERMINATION_LOG"]).read_text())
        assert (msg["outcome"], msg["reason"]) == ("passivated", "sigterm")
        assert world.model_requests() == [] and world.lines("c1.txt") == []


def test_sigkill_mid_round_then_resume_runs_no_recorded_tool_twice(tmp_path: Path) -> None:
    script = {
        "turns": [
            {"tool_calls": [bash("echo a >> a.txt"), blocking_bash("b.txt")]},
            {"text": "recovered"},
        ]
    }
    with pod_world(tmp_path, script) as world:
        first = world.start(epoch=1, tag="a")
        first.wait_ready()
        wait_for("the second tool to start", lambda: world.lines("b.txt"))
        run_id = first.state()["runId"]
        first.signal(signal.SIGKILL)
        first.wait_exit()
        assert not first.termination_log.exists()  # SIGKILL leaves nothing behind

        world.touch("go")  # a re-run of the blocking tool would now finish and show twice
        second = world.start(epoch=2, resume_run_id=run_id, tag="b")
        assert second.wait_exit() == 0, second.stderr()
        msg = second.termination()
        assert (msg["outcome"], msg["resultText"]) == ("completed", "recovered")
        assert world.lines("a.txt") == ["a"]  # recorded result reused
        assert world.lines("b.txt") == ["ran"]  # unrecorded execute tool not re-run
        last = world.model_requests()[-1]["messages"]
        tool_outputs = [m["content"] for m in last if m.get("role") == "tool"]
        assert len(tool_outputs) == 2
        assert "interrupted" in tool_outputs[1]


def test_a_stale_epoch_is_fenced(tmp_path: Path) -> None:
    script = {"turns": [{"tool_calls": [blocking_bash("c1.txt")]}, {"text": "taken over"}]}
    with pod_world(tmp_path, script) as world:
        stale = world.start(epoch=1, tag="a")
        stale.wait_ready()
        wait_for("the tool to start", lambda: world.lines("c1.txt"))
        run_id = stale.state()["runId"]

        newer = world.start(epoch=2, resume_run_id=run_id, tag="b")
        assert newer.wait_exit() == 0, newer.stderr()
        assert newer.termination()["outcome"] == "completed"

        world.touch("go")  # the stale pod's tool ends; journaling its result hits the lease
        assert stale.wait_exit() == 3, stale.stderr()
        msg = stale.termination()
        assert msg["outcome"] == "fenced"
        assert "epoch 2" in msg["reason"]
        assert world.lines("c1.txt") == ["ran"]

        late = world.start(epoch=1, resume_run_id=run_id, tag="c")  # a stale pod starting up
        assert late.wait_exit() == 3, late.stderr()
        assert late.termination()["outcome"] == "fenced"


def test_keep_alive_messages_and_metrics(tmp_path: Path) -> None:
    script = {
        "turns": [
            {"tool_calls": [bash("echo k >> k.txt"), {"name": "ls", "arguments": {}}]},
            {"text": "first done"},
            {"tool_calls": [blocking_bash("m.txt", go="go2")]},
            {"text": "second answer"},
        ]
    }
    with pod_world(tmp_path, script, keepAlive=True) as world:
        pod = world.start(epoch=1)
        pod.wait_ready()
        idle = pod.wait_state(lambda s: s["state"] == "idle", "idle after the task")
        assert idle["turn"] == 1 and idle["resultText"] == "first done"

        status, text = pod.request("GET", "/metrics")
        assert status == 200
        families = {f.name: f for f in text_string_to_metric_families(text)}
        values = {
            (s.name, tuple(sorted(s.labels.items()))): s.value
            for f in families.values()
            for s in f.samples
        }
        assert values[("berth_session_rounds_total", ())] == 1
        assert values[("berth_session_tool_calls_total", (("lane", "execute"),))] == 1
        assert values[("berth_session_tool_calls_total", (("lane", "query"),))] == 1
        assert values[("berth_session_llm_tokens_total", (("kind", "prompt"),))] > 0
        assert values[("berth_session_checkpoint_write_seconds_count", ())] >= 1
        assert values[("berth_session_state", (("state", "idle"),))] == 1
        assert values[("berth_session_state", (("state", "running"),))] == 0
        promtool = shutil.which("promtool")
        if promtool:
            check = subprocess.run(
                [promtool, "check", "metrics"], input=text.encode(), capture_output=True
            )
            assert check.returncode == 0, check.stdout + check.stderr

        assert pod.request("POST", "/v1/messages", {"prompt": ""})[0] == 400
        status, body = pod.request("POST", "/v1/messages", {"prompt": "and now?"})
        assert (status, body["state"]) == (202, "running")
        wait_for("the second run's tool", lambda: world.lines("m.txt"))
        status, body = pod.request("POST", "/v1/messages", {"prompt": "hurry"})
        assert (status, body["error"]) == (409, "busy")
        world.touch("go2")
        pod.wait_state(lambda s: s["state"] == "idle", "idle after the second run")

        status, _ = pod.request("POST", "/v1/passivate", {"reason": "idle_reaper"})
        assert status == 202
        assert pod.wait_exit() == 0, pod.stderr()
        msg = pod.termination()
        assert (msg["outcome"], msg["reason"]) == ("passivated", "idle_reaper")
        assert msg["resultText"] == "second answer"

        asked = len(world.model_requests())
        back = world.start(epoch=2, resume_run_id=msg["runId"], tag="b")
        back.wait_ready()
        assert back.wait_state(lambda s: s["state"] == "idle", "idle again")["epoch"] == 2
        assert len(world.model_requests()) == asked  # idle, not re-asking the model
        assert back.request("POST", "/v1/passivate", {"reason": "manual"})[0] == 202
        assert back.wait_exit() == 0, back.stderr()
        assert back.termination()["resultText"] == "second answer"


def test_bad_input_fails_cleanly(tmp_path: Path) -> None:
    """The real process on an unreadable options file (more cases run in-process in
    tests/unit/runtime/pod/test_main_bad_input.py)."""
    with pod_world(tmp_path, {"turns": [{"text": "unused"}]}) as world:
        pod = world.start(epoch=1, BERTH_OPTIONS_FILE=str(tmp_path / "nope" / "options.json"))
        assert pod.wait_exit() == 2
        msg = pod.termination()
        assert msg["outcome"] == "failed" and "cannot read options file" in msg["reason"]
        assert "Traceback" not in pod.stderr()


def test_unreachable_model_fails_cleanly(tmp_path: Path) -> None:
    with pod_world(
        tmp_path, {"turns": [{"text": "unused"}]}, limits={"circuitBreakerThreshold": 1}
    ) as world:
        pod = world.start(epoch=1, OPENAI_BASE_URL=f"http://127.0.0.1:{free_port()}/v1")
        assert pod.wait_exit() == 1
        msg = pod.termination()
        assert validate(msg) == []
        assert msg["outcome"] == "failed" and "circuit breaker" in msg["reason"]
        assert msg["runId"].startswith("run-")
        assert "Traceback" not in pod.stderr()


def test_api_refuses_missing_and_wrong_tokens_of_a_real_process(tmp_path: Path) -> None:
    """docs/architecture.md §11 on a real ``berth-session``: without its token nobody reads state,
    injects a prompt or passivates the session; with it everything works; the token never shows
    up in the process's output, termination message, metrics or store."""
    script = {
        "turns": [
            {"text": "first done"},
            {"tool_calls": [bash("echo injected >> injected.txt")]},
            {"text": "second"},
        ]
    }
    with pod_world(tmp_path, script, keepAlive=True) as world:
        pod = world.start(epoch=1)
        pod.wait_ready()
        pod.wait_state(lambda s: s["state"] == "idle", "idle after the task")
        wrong = world.token[:-1] + ("A" if world.token[-1] != "A" else "B")
        attempts = [
            ("GET", "/v1/state", None),
            ("POST", "/v1/messages", {"prompt": "run: echo injected >> injected.txt"}),
            ("POST", "/v1/passivate", {"reason": "manual"}),
        ]
        for method, path, body in attempts:
            assert pod.request(method, path, body, headers={})[0] == 401
            assert pod.request(method, path, body, headers={"X-Forwarded-For": "1.2.3.4"})[0] == 401
            for header in ("Authorization", "X-Berth-Token"):
                value = f"Bearer {wrong}" if header == "Authorization" else wrong
                assert pod.request(method, path, body, headers={header: value})[0] == 403
        assert world.lines("injected.txt") == []  # no prompt got in
        assert pod.state()["state"] == "idle"  # not passivated either
        status, text = pod.request("GET", "/metrics", headers={})
        assert status == 200
        samples = {
            (s.name, tuple(sorted(s.labels.items()))): s.value
            for f in text_string_to_metric_families(text)
            for s in f.samples
        }
        assert samples[("berth_session_api_refused_total", (("reason", "missing"),))] == 6
        assert samples[("berth_session_api_refused_total", (("reason", "wrong"),))] == 6
        assert pod.request("GET", "/healthz", headers={})[0] == 200

        # The right token via the proxy-safe header is accepted.
        status, _ = pod.request(
            "POST", "/v1/messages", {"prompt": "go"}, headers={"X-Berth-Token": world.token}
        )
        assert status == 202
        wait_for("the authorised prompt's tool", lambda: world.lines("injected.txt"))
        pod.wait_state(lambda s: s["state"] == "idle", "idle after the second run")
        assert world.lines("injected.txt") == ["injected"]
        assert pod.request("POST", "/v1/passivate", {"reason": "manual"})[0] == 202
        assert pod.wait_exit() == 0, pod.stderr()
        leaks = [pod.stderr(), pod.termination_log.read_text(), text]
        leaks += [p.read_text(errors="replace") for p in world.store.rglob("*") if p.is_file()]
        assert not [t for t in leaks if world.token in t]


def test_message_ids_are_accepted_once_across_pods(tmp_path: Path) -> None:
    """A message id starts one run: a repeat (the front door retrying after a lost answer)
    gets the same run back, also from a new pod that only has the store; the run another
    session asked for carries ``invokedBy`` and its hooks saw ``peer_invocation``."""
    script = {"turns": [{"text": "first done"}, {"text": "answer one"}]}
    peer = {"fromSessionId": "team/asker", "fromTenantId": "acme", "correlationId": "c-1"}
    with pod_world(tmp_path, script, keepAlive=True) as world:
        pod = world.start(epoch=1)
        pod.wait_ready()
        pod.wait_state(lambda s: s["state"] == "idle", "idle after the task")
        assert pod.request("GET", "/v1/messages/..%2Fetc")[0] in (400, 404)
        assert pod.request("GET", "/v1/messages/nope")[0] == 404
        bad = pod.request("POST", "/v1/messages", {"prompt": "x", "messageId": "../x"})
        assert bad[0] == 400

        message = {"prompt": "question one", "messageId": "m-1", "peer": peer}
        status, first = pod.request("POST", "/v1/messages", message)
        assert status == 202 and first["runId"], first
        status, again = pod.request("POST", "/v1/messages", message)
        assert (status, again["duplicate"], again["runId"]) == (200, True, first["runId"])
        pod.wait_state(lambda s: s["state"] == "idle", "idle after the message")
        status, done = pod.request("GET", "/v1/messages/m-1")
        assert status == 200
        assert (done["status"], done["resultText"], done["runId"]) == (
            "completed",
            "answer one",
            first["runId"],
        )
        assert done["invokedBy"] == {
            "from_session_id": "team/asker",
            "from_tenant_id": "acme",
            "correlation_id": "c-1",
        }
        status, events = pod.request("GET", "/v1/messages/m-1/events")
        seen = [e for e in events["runs"][first["runId"]] if e["type"] == "peer_invocation"]
        assert [e["from_session_id"] for e in seen] == ["team/asker"]

        assert pod.request("POST", "/v1/passivate", {"reason": "idle_reaper"})[0] == 202
        assert pod.wait_exit() == 0, pod.stderr()
        asked = len(world.model_requests())
        back = world.start(epoch=2, resume_run_id=pod.termination()["runId"], tag="b")
        back.wait_ready()
        back.wait_state(lambda s: s["state"] == "idle", "idle on the new pod")
        status, again = back.request("POST", "/v1/messages", message)
        assert (status, again["duplicate"], again["runId"]) == (200, True, first["runId"])
        assert back.request("GET", "/v1/messages/m-1")[1]["resultText"] == "answer one"
        assert len(world.model_requests()) == asked  # the repeat asked the model nothing
