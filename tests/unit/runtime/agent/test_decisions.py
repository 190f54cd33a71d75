"""Pure decisions as tables: circuit breaker, compaction, token estimate, options merge,
argument parsing, hook matching."""

from __future__ import annotations

import json
import math
from typing import Any

import pytest

from session_runtime import SessionOptions
from session_runtime.agent.breaker import MAX_BACKOFF_MS, CircuitBreaker
from session_runtime.agent.compaction import compact_messages, estimate_tokens, should_compact
from session_runtime.agent.hooks import Hook, block_reason
from session_runtime.agent.loop import parse_tool_calls
from session_runtime.agent.options import merge_options
from session_runtime.llm.client import RawToolCall


def test_breaker_backoff_open_cooldown_half_open() -> None:
    b = CircuitBreaker(threshold=3, base_ms=100, cooldown_ms=1000)
    assert b.allows(0.0)
    assert b.record_failure(0.0, "e1") == 100
    assert b.record_failure(0.1, "e2") == 200
    assert b.record_failure(0.3, "e3") is None  # third in a row: open
    assert not b.allows(0.5) and not b.allows(1.29)
    assert b.allows(1.3)  # cooldown over: one trial
    assert b.record_failure(1.3, "e4") is None  # trial failed: open again
    assert not b.allows(1.4)
    b.record_success()
    assert b.allows(1.4) and b.failures == 0
    big = CircuitBreaker(threshold=50, base_ms=1000)
    delays = [big.record_failure(0, "e") for _ in range(10)]
    assert delays[-1] == MAX_BACKOFF_MS


def test_token_estimate_is_bytes_over_four() -> None:
    msgs = [{"role": "user", "content": "é" * 10}]
    tools = [{"type": "function", "function": {"name": "x"}}]
    size = len(json.dumps(msgs, ensure_ascii=False, separators=(",", ":")).encode())
    size += len(json.dumps(tools, separators=(",", ":")).encode())
    assert estimate_tokens(msgs, tools) == math.ceil(size / 4)


@pytest.mark.parametrize(
    ("estimated", "window", "threshold", "expected"),
    [(79, 100, 0.8, False), (80, 100, 0.8, False), (81, 100, 0.8, True), (1, 1, 1.0, False)],
)
def test_should_compact(estimated: int, window: int, threshold: float, expected: bool) -> None:
    assert should_compact(estimated, window, threshold) is expected


def _round(i: int, size: int) -> list[dict[str, Any]]:
    return [
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {"id": f"c{i}", "type": "function", "function": {"name": "read", "arguments": "{}"}}
            ],
        },
        {"role": "tool", "tool_call_id": f"c{i}", "content": "x" * size},
    ]


def test_compaction_keeps_system_recent_and_pairs() -> None:
    msgs: list[dict[str, Any]] = [
        {"role": "system", "content": "sys"},
        {"role": "user", "content": "task"},
    ]
    for i in range(6):
        msgs += _round(i, 400)
    new, removed = compact_messages(msgs, None, target_tokens=300)
    assert new[0] == msgs[0]
    assert removed > 0 and len(new) == len(msgs) - removed + 1
    assert new[1]["role"] == "user" and "Context compacted" in new[1]["content"]
    assert new[2]["role"] != "tool"  # never an orphan tool result
    assert new[-1] == msgs[-1]
    assert estimate_tokens(new) < estimate_tokens(msgs)
    ids = {c["id"] for m in new if m.get("tool_calls") for c in m["tool_calls"]}
    assert all(m["tool_call_id"] in ids for m in new if m["role"] == "tool")


def test_compaction_of_short_history_is_a_no_op() -> None:
    msgs = [{"role": "system", "content": "s"}, {"role": "user", "content": "u"}]
    assert compact_messages(msgs, None, 1) == (msgs, 0)


def test_parse_tool_calls() -> None:
    calls, errors = parse_tool_calls(
        [
            RawToolCall("a", "ls", ""),
            RawToolCall("b", "read", '{"file_path": "x"}'),
            RawToolCall("c", "bash", "{bad"),
            RawToolCall("d", "bash", "[1]"),
        ]
    )
    assert [c.arguments for c in calls] == [{}, {"file_path": "x"}, {}, {}]
    assert sorted(errors) == ["c", "d"]


def test_merge_options_caller_wins() -> None:
    stored = SessionOptions(
        model="openai/a", tenant_id="t-old", principal="p", max_tool_rounds=7
    ).to_persisted()
    merged = merge_options(stored, SessionOptions(tenant_id="t-new", max_parse_retries=5))
    assert (merged.model, merged.tenant_id, merged.principal) == ("openai/a", "t-new", "p")
    assert (merged.max_tool_rounds, merged.max_parse_retries) == (7, 5)
    assert "session_store" not in stored and "budget_guard" not in stored
    json.dumps(stored)  # persisted options are JSON


@pytest.mark.parametrize(
    "bad",
    [
        {"max_tool_rounds": 0},
        {"max_parse_retries": -1},
        {"tool_timeout_ms": 0},
        {"circuit_breaker_threshold": 0},
        {"auto_compact_threshold": 1.5},
        {"max_continuation_turns": -1},
        {"budget_failure_mode": "maybe"},
    ],
)
def test_options_validation(bad: dict[str, Any]) -> None:
    with pytest.raises(ValueError):
        SessionOptions(**bad).validate()


def test_options_defaults_are_the_frameworks() -> None:
    o = SessionOptions()
    assert (
        o.max_tool_rounds,
        o.max_parse_retries,
        o.tool_timeout_ms,
        o.circuit_breaker_threshold,
        o.auto_compact,
        o.auto_compact_threshold,
        o.continuation_enabled,
        o.max_continuation_turns,
    ) == (50, 2, None, 3, False, 0.80, True, 3)


def test_hook_matching_and_block_values() -> None:
    h = Hook("h", "pre_tool_use", print, {"tool": "bash"})
    assert h.matches({"type": "pre_tool_use", "name": "bash"})
    assert not h.matches({"type": "pre_tool_use", "name": "read"})
    assert not h.matches({"type": "tool_end", "name": "bash"})
    assert Hook("all", "*", print).matches({"type": "anything"})
    assert block_reason({"action": "block", "reason": "r"}) == "r"
    assert block_reason({"block": True}) == "blocked"
    assert block_reason({"action": "continue"}) is None and block_reason(None) is None


@pytest.mark.parametrize(
    ("name", "recorded", "recovered", "expected"),
    [
        ("bash", True, True, "journal"),
        ("read", True, False, "journal"),
        ("bash", False, True, "recovered"),
        ("grep", False, True, "recovered"),
        ("grep", False, False, "rerun"),
        ("ls", False, False, "rerun"),
        ("bash", False, False, "interrupted"),
        ("write", False, False, "interrupted"),
        ("edit", False, False, "interrupted"),
    ],
)
def test_pending_call_settlement(name: str, recorded: bool, recovered: bool, expected: str) -> None:
    from session_runtime.agent.resume import decide
    from session_runtime.tools import ToolCall

    assert decide(ToolCall("c", name, {}), recorded, recovered) == expected
