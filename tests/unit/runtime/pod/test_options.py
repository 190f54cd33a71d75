"""Table tests for berth_contract.options (the operator's options JSON)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from berth_contract.options import OptionsError, load_options, parse_options

MINIMAL: dict[str, Any] = {"prompt": "fix the bug", "model": "openai/gpt-4o-mini"}


def test_minimal_defaults() -> None:
    opts = parse_options(MINIMAL)
    assert opts.keep_alive is False
    assert opts.passivation.deadline_seconds == 120
    assert opts.lanes == {}
    assert opts.budget.enabled is False
    assert opts.limits.max_tool_rounds is None


def test_full_camel_case() -> None:
    opts = parse_options(
        MINIMAL
        | {
            "llm": {"baseUrl": "http://127.0.0.1:9/v1"},
            "identity": {"tenantId": "t1", "principal": "alice", "correlationId": "c"},
            "limits": {"maxToolRounds": 5, "toolTimeoutSeconds": 30, "autoCompactThreshold": "75%"},
            "retention": {"maxRunsRetained": 3},
            "budget": {"maxTotalTokens": 1000, "softLimitPercent": 80},
            "lanes": {"execute": {"mode": "external", "laneWorker": {"name": "pool"}}},
            "passivation": {"deadlineSeconds": 30},
            "keepAlive": True,
            "somethingNewer": {"ignored": True},
        }
    )
    assert opts.llm.base_url == "http://127.0.0.1:9/v1"
    assert opts.identity.tenant_id == "t1"
    assert opts.limits.auto_compact_threshold == pytest.approx(0.75)
    assert opts.budget.enabled
    assert opts.lanes["execute"].stream_for("team-a") == "berth:team-a:lw:{pool}:tasks"
    assert opts.keep_alive is True
    assert opts.passivation.deadline_seconds == 30


def test_snake_case_is_accepted_too() -> None:
    opts = parse_options(MINIMAL | {"keep_alive": True, "limits": {"max_tool_rounds": 2}})
    assert opts.keep_alive and opts.limits.max_tool_rounds == 2


@pytest.mark.parametrize(
    ("lane", "stream"),
    [
        ({"mode": "internal", "laneWorker": {"name": "p"}}, None),
        ({"mode": "hybrid", "laneWorker": {"name": "p"}}, "berth:ns:lw:{p}:tasks"),
        ({"mode": "external", "laneWorker": {"name": "p", "taskStream": "c:s"}}, "c:s"),
    ],
)
def test_lane_streams(lane: dict[str, Any], stream: str | None) -> None:
    assert (
        parse_options(MINIMAL | {"lanes": {"execute": lane}}).lanes["execute"].stream_for("ns")
        == stream
    )


@pytest.mark.parametrize(
    ("data", "fragment"),
    [
        ({"model": "openai/x"}, "prompt"),
        ({"prompt": "p", "model": "no-provider"}, "model"),
        (MINIMAL | {"limits": {"maxToolRounds": 0}}, "limits.maxToolRounds"),
        (MINIMAL | {"limits": {"autoCompactThreshold": "150%"}}, "autoCompactThreshold"),
        (MINIMAL | {"limits": {"autoCompactThreshold": "lots"}}, "autoCompactThreshold"),
        (MINIMAL | {"budget": {"softLimitPercent": 101}}, "budget.softLimitPercent"),
        (MINIMAL | {"lanes": {"execute": {"mode": "external"}}}, "names no laneWorker"),
        (MINIMAL | {"lanes": {"turbo": {}}}, "lanes.turbo"),
        (MINIMAL | {"keepAlive": "maybe"}, "keepAlive"),
        (MINIMAL | {"schemaVersion": 2}, "schemaVersion"),
    ],
)
def test_invalid_options(data: dict[str, Any], fragment: str) -> None:
    with pytest.raises(OptionsError) as info:
        parse_options(data)
    assert fragment in str(info.value)


@pytest.mark.parametrize(
    ("content", "fragment"),
    [
        (None, "cannot read options file"),
        (b"{not json", "is not valid JSON"),
        (b"\xff\xfe", "is not UTF-8"),
        (b"[1, 2]", "must hold a JSON object"),
    ],
)
def test_unusable_files(tmp_path: Path, content: bytes | None, fragment: str) -> None:
    path = tmp_path / "options.json"
    if content is not None:
        path.write_bytes(content)
    with pytest.raises(OptionsError) as info:
        load_options(path)
    assert fragment in str(info.value)


def test_load_good_file(tmp_path: Path) -> None:
    path = tmp_path / "options.json"
    path.write_text(json.dumps(MINIMAL))
    assert load_options(path).prompt == "fix the bug"


def test_every_limit_has_one_mapping_to_the_session_options() -> None:
    """A limit added to spec.limits without a mapping (or mapped to a SessionOptions field that
    does not exist) fails here instead of being dropped silently."""
    import dataclasses

    from berth_contract.options import LIMITS_TO_SESSION_OPTIONS, LimitsOptions
    from session_runtime.agent.options import SessionOptions

    assert set(LIMITS_TO_SESSION_OPTIONS) == set(LimitsOptions.model_fields)
    session_fields = {f.name for f in dataclasses.fields(SessionOptions)}
    assert {target for target, _ in LIMITS_TO_SESSION_OPTIONS.values()} <= session_fields
    limits = LimitsOptions(max_tool_rounds=7, tool_timeout_seconds=30)
    assert limits.session_options() == {"max_tool_rounds": 7, "tool_timeout_ms": 30_000}
