"""The crash campaign's checker and scenario generator catch what they claim to catch."""

from __future__ import annotations

from pathlib import Path

from tests.chaos import invariants
from tests.chaos.ledger import Entry, parse_line, tool_command
from tests.chaos.scenario import FAULT_KINDS, LANE_ONLY, generate


def entry(kind: str, call: str, attempt: int, seq: int) -> Entry:
    return Entry(kind, call, attempt, attempt, 100 + seq, seq)


def test_a_call_started_twice_is_a_violation(tmp_path: Path) -> None:
    ledger = [entry("S", "s-0-0", 1, 0), entry("E", "s-0-0", 1, 1), entry("S", "s-0-0", 2, 2)]
    [v] = invariants.after_attempt(tmp_path, "s", ledger)
    assert v.kind == "twice" and "[(1, 1), (2, 2)]" in v.detail
    assert invariants.after_attempt(tmp_path, "s", ledger[:2]) == []


def test_a_session_the_store_does_not_hold_is_not_terminal(tmp_path: Path) -> None:
    found, _ = invariants.after_session(tmp_path, "s", [entry("S", "s-0-0", 1, 0)], "done")
    assert [v.kind for v in found] == ["not_terminal"]


def test_ledger_lines_round_trip_through_the_command_format() -> None:
    command = tool_command(4242, "s-1-0", 3, 7, 10)
    assert "/dev/tcp/127.0.0.1/4242" in command and command.endswith("echo done:s-1-0")
    assert parse_line("S s-1-0 3 7 991", 5) == Entry("S", "s-1-0", 3, 7, 991, 5)
    assert parse_line("garbage", 0) is None


def test_scenarios_are_a_function_of_their_seed() -> None:
    assert generate(77) == generate(77)
    kinds = {k for seed in range(300) for k in generate(seed).fault_kinds()}
    assert kinds == set(FAULT_KINDS)  # every kind is drawn
    for seed in range(300):
        sc = generate(seed)
        assert sc.lanes or not (set(sc.fault_kinds()) & LANE_ONLY)
