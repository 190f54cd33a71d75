"""Unit tests of the server's adapters: the metered store and budget guard, the lane settings,
the agent config and the passivation/message state machine before any run starts."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from berth_contract.options import BudgetOptions, SessionPodOptions, parse_options
from session_runtime.errors import ConfigError, FencedError, ResumeError, SessionRuntimeError
from session_runtime.metrics import SessionMetrics
from session_runtime.pod.config import parse_env
from session_runtime.pod.lifecycle import SessionPod, now_ms
from session_runtime.pod.metered import MeteredBudgetGuard, MeteredStore
from session_runtime.pod.wiring import build_executor, queue_settings
from session_runtime.store.base import LoopCheckpoint


def value(metrics: SessionMetrics, name: str, **labels: str) -> float:
    for family in text_string_to_metric_families(metrics.render().decode()):
        for s in family.samples:
            if s.name == name and s.labels == labels:
                return float(s.value)
    raise KeyError(name)


def checkpoint(run_id: str, turn: int) -> LoopCheckpoint:
    return LoopCheckpoint(run_id, "s", turn, [], {"total_tokens": 0}, 0, 0)


class Inner:
    """A store stand-in recording calls; raises FencedError when told to."""

    def __init__(self) -> None:
        self.commits: list[int] = []
        self.fence = False

    def commit_round(self, cp: LoopCheckpoint) -> None:
        if self.fence:
            raise FencedError("epoch 2 owns it")
        self.commits.append(cp.turn)

    def save_session(self, session_id: str, data: dict[str, Any]) -> None:
        if self.fence:
            raise FencedError("epoch 2 owns it")
        self.saved = data

    def load_session(self, session_id: str) -> dict[str, Any] | None:
        return getattr(self, "saved", None)


def test_metered_store_counts_only_new_rounds_and_reports_fencing() -> None:
    metrics = SessionMetrics()
    seen: list[FencedError] = []
    inner = Inner()
    store = MeteredStore(inner, metrics, seen.append)
    store.resume_start_turn = 3  # the first run continues a checkpoint at turn 3
    for turn in (3, 4, 4, 5):  # initial re-commit, two rounds, a passivation re-commit between
        store.commit_round(checkpoint("run-b", turn))
    store.commit_round(checkpoint("run-c", 1))  # a later run (keepAlive) starts from 0
    assert inner.commits == [3, 4, 4, 5, 1]
    assert value(metrics, "berth_session_rounds_total") == 3
    assert value(metrics, "berth_session_checkpoint_write_seconds_count") == 5
    store.save_session("s", {"k": 1})  # the SessionStore methods reach the wrapped store
    assert store.load_session("s") == {"k": 1}
    inner.fence = True
    with pytest.raises(FencedError):
        store.save_session("s", {})
    with pytest.raises(FencedError):
        store.commit_round(checkpoint("run-c", 2))
    assert len(seen) == 2


def test_metered_guard_counts_tokens_and_carries_the_budget() -> None:
    metrics = SessionMetrics()
    guard = MeteredBudgetGuard(BudgetOptions(max_total_tokens=100, max_tool_calls=2), metrics)
    guard.carry(90, 1)
    guard.carry(10, 0)  # carrying never lowers what was consumed
    guard.record_after_llm("s", {"prompt_tokens": 4, "completion_tokens": 2, "total_tokens": 6})
    assert value(metrics, "berth_session_llm_tokens_total", kind="prompt") == 4
    decision = guard.check_before_llm("s", 5)
    assert decision is not None and decision["decision"] == "deny"
    assert (guard.check_before_tool("s", "bash") or {}).get("decision") != "deny"
    denied = guard.check_before_tool("s", "bash")
    assert denied is not None and denied["decision"] == "deny"


def opts(**extra: Any) -> SessionPodOptions:
    return parse_options({"prompt": "p", "model": "openai/m", **extra})


def test_queue_settings_map_lanes() -> None:
    config, workers = queue_settings(
        opts(
            lanes={
                "execute": {
                    "mode": "external",
                    "timeoutSeconds": 30,
                    "maxConcurrency": 5,
                    "laneWorker": {"name": "pool"},
                },
                "query": {"mode": "internal", "maxConcurrency": 8},
            }
        )
    )
    assert workers == {"execute": "pool"}
    assert config.execute_max_concurrency == 5 and config.query_max_concurrency == 8
    assert config.handler("execute").mode == "external"
    assert config.handler("execute").timeout_ms == 30_000
    assert config.lane_timeouts == {"execute": 30_000}
    assert config.handler("query").mode == "internal"


def env(tmp_path: Path, **extra: str) -> dict[str, str]:
    return {
        "BERTH_SESSION": "ns/s",
        "BERTH_SESSION_UID": "u",
        "BERTH_EPOCH": "1",
        "BERTH_STORE_DIR": str(tmp_path / "store"),
        "BERTH_WORKSPACE": str(tmp_path / "ws"),
        "BERTH_OPTIONS_FILE": str(tmp_path / "o.json"),
        "BERTH_API_TOKEN_FILE": str(tmp_path / "api-token"),
        **extra,
    }


def test_build_executor(tmp_path: Path) -> None:
    cfg = parse_env(env(tmp_path))
    assert build_executor(cfg, opts()) is None
    internal = build_executor(cfg, opts(lanes={"execute": {"mode": "internal"}}))
    assert internal is not None
    assert internal.queue_stats()["lanes"]["execute"]["handler_mode"] == "internal"
    external = opts(lanes={"execute": {"mode": "external", "laneWorker": {"name": "pool"}}})
    with pytest.raises(ConfigError, match="BERTH_REDIS_URL is not set"):
        build_executor(cfg, external)


@pytest.mark.parametrize(
    ("llm", "extra_env", "expected"),
    [
        ({}, {}, None),  # the runtime reads OPENAI_BASE_URL / OPENAI_API_KEY itself
        (
            {"baseUrl": "http://127.0.0.1:1/v1"},
            {},
            {"base_url": "http://127.0.0.1:1/v1", "api_key_env": "OPENAI_API_KEY"},
        ),
        (
            {},
            {"OPENAI_BASE_URL": "http://127.0.0.1:2/v1"},
            {"base_url": "http://127.0.0.1:2/v1", "api_key_env": "OPENAI_API_KEY"},
        ),
        ({"apiKeyEnv": "LLM_KEY"}, {}, {"base_url": None, "api_key_env": "LLM_KEY"}),
    ],
)
def test_agent_config(
    tmp_path: Path, llm: dict[str, str], extra_env: dict[str, str], expected: dict[str, Any] | None
) -> None:
    pod = SessionPod(parse_env(env(tmp_path, **extra_env)), opts(llm=llm), SessionMetrics())
    config = pod.agent_config()
    if expected is None:
        assert config is None
    else:
        assert config is not None
        provider = config["providers"]["openai"]
        assert {k: provider[k] for k in expected} == expected
        assert provider["models"] == ["m"] and config["default_model"] == "openai/m"


async def test_requests_before_the_session_exists(tmp_path: Path) -> None:
    """Passivation asked while starting is remembered (start() then ends passivated); messages
    are refused as the session is not keepAlive; the first passivation request wins."""
    metrics = SessionMetrics()
    pod = SessionPod(parse_env(env(tmp_path)), opts(), metrics)
    first = pod.request_passivation("node_drain", 123)
    assert pod.request_passivation("eviction", 456) is first
    assert pod.phase == "starting"
    assert await pod.post_message("hi") == (409, {"error": "not_keep_alive", "state": "starting"})
    assert value(metrics, "berth_session_passivations_total", reason="node_drain") == 1
    assert value(metrics, "berth_session_passivations_total", reason="eviction") == 0
    pod.start()
    message = await pod.wait()
    assert (message.outcome, message.reason, message.exit_code) == ("passivated", "node_drain", 0)
    assert value(metrics, "berth_session_state", state="passivated") == 1


@pytest.mark.parametrize(
    ("error", "outcome", "code"),
    [
        (FencedError("epoch 3 has taken it over"), "fenced", 3),
        (ConfigError("lanes ['execute'] are external but BERTH_REDIS_URL is not set"), "failed", 2),
        (ValueError("workspace is not a directory"), "failed", 2),
        (ResumeError("resume_session requires a session_store"), "failed", 1),
    ],
)
def test_build_failures_map_to_outcomes(
    tmp_path: Path, error: SessionRuntimeError | ValueError, outcome: str, code: int
) -> None:
    pod = SessionPod(parse_env(env(tmp_path)), opts(), SessionMetrics())
    message = pod.build_failed(error)
    assert (message.outcome, message.exit_code, message.reason) == (outcome, code, str(error))


def test_session_guard_wraps_the_own_guard_only_with_a_budget_service(tmp_path: Path) -> None:
    from session_runtime.budget.guard import ClusterBudgetGuard
    from session_runtime.pod.budget import session_guard
    from session_runtime.pod.config import PodConfig

    own = MeteredBudgetGuard(BudgetOptions(), SessionMetrics())
    token = tmp_path / "token"
    token.write_text("t" * 32)
    base = {
        "namespace": "ns",
        "name": "s",
        "session_uid": "u",
        "epoch": 1,
        "store_dir": tmp_path,
        "workspace": tmp_path,
        "options_file": tmp_path / "options.json",
        "api_token_file": token,
    }
    assert session_guard(PodConfig(**base), own) is own  # type: ignore[arg-type]
    cluster = session_guard(PodConfig(**base, budget_url="http://budget:8082"), own)  # type: ignore[arg-type]
    assert isinstance(cluster, ClusterBudgetGuard)
    assert (cluster.url, cluster.session_uid) == ("http://budget:8082", "u")


async def test_settled_only_once_no_task_and_no_session_operation_is_left(
    tmp_path: Path,
) -> None:
    """``SessionPod.settled`` (after ``close``) decides whether the process reports its end
    over ``GET /v1/outcome`` before exiting: not while a run task, or an operation the session
    holds, outlived the close."""
    import asyncio

    pod = SessionPod(parse_env(env(tmp_path)), opts(), SessionMetrics())
    assert pod.settled()  # nothing was ever started
    release = asyncio.Event()

    async def run() -> None:
        await release.wait()

    pod._run_task = asyncio.create_task(run())
    await asyncio.sleep(0)
    assert not pod.settled()
    release.set()
    await pod._run_task
    assert pod.settled()

    class Busy:
        quiescent = False

    pod.session = Busy()
    assert not pod.settled()
    Busy.quiescent = True
    assert pod.settled()


async def test_a_started_run_reports_when_it_started(tmp_path: Path) -> None:
    """``runStartedMs`` of ``GET /v1/state``: None before any run, then the start of the latest
    one (the operator dates a resume by it)."""
    import asyncio
    import contextlib

    pod = SessionPod(parse_env(env(tmp_path)), opts(), SessionMetrics())
    assert pod.state_json()["runStartedMs"] is None
    before = now_ms()
    gate = asyncio.Event()

    async def run() -> None:
        await gate.wait()

    pod._start_run(run)
    started = pod.state_json()["runStartedMs"]
    assert before <= started <= now_ms()
    assert pod.phase == "running"
    assert pod._run_task is not None
    pod._run_task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await pod._run_task
