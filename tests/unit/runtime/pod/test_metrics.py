"""Tests for session_runtime.metrics: names, label sets, isolation and valid exposition text."""

from __future__ import annotations

import pytest
from prometheus_client.parser import text_string_to_metric_families

from session_runtime.metrics import STATES, SessionMetrics, reason_label


def samples(metrics: SessionMetrics) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    out = {}
    for family in text_string_to_metric_families(metrics.render().decode()):
        for s in family.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def test_families_and_zero_series_exist_from_the_start() -> None:
    text = SessionMetrics().render().decode()
    families = {
        f.name: f.type
        for f in text_string_to_metric_families(text)
        if not f.name.endswith("_created")
    }
    assert families == {
        "berth_session_rounds": "counter",
        "berth_session_tool_calls": "counter",
        "berth_session_llm_tokens": "counter",
        "berth_session_checkpoint_write_seconds": "histogram",
        "berth_session_passivations": "counter",
        "berth_session_replies_rejected": "counter",
        "berth_session_state": "gauge",
        "berth_session_store_bytes": "gauge",
        "berth_session_store_volume_size_bytes": "gauge",
        "berth_session_store_volume_free_bytes": "gauge",
    }
    s = samples(SessionMetrics())
    assert s[("berth_session_tool_calls_total", (("lane", "execute"),))] == 0
    assert s[("berth_session_state", (("state", "starting"),))] == 1


def test_registries_are_isolated() -> None:
    a, b = SessionMetrics(), SessionMetrics()
    a.rounds_total.inc()
    assert samples(b)[("berth_session_rounds_total", ())] == 0


def test_llm_usage_is_counted_per_call() -> None:
    m = SessionMetrics()
    m.observe_llm_usage({"prompt_tokens": 30, "completion_tokens": 10, "total_tokens": 40})
    m.observe_llm_usage({"prompt_tokens": 5, "completion_tokens": -1, "total_tokens": 4})
    m.observe_llm_usage({"prompt_tokens": True})
    s = samples(m)
    assert s[("berth_session_llm_tokens_total", (("kind", "prompt"),))] == 35
    assert s[("berth_session_llm_tokens_total", (("kind", "completion"),))] == 10


@pytest.mark.parametrize(
    ("reason", "label"),
    [
        ("node_drain", "node_drain"),
        ("sigterm", "sigterm"),
        ("pod/xyz-123", "other"),
        (None, "other"),
    ],
)
def test_reason_labels_are_a_fixed_set(reason: str | None, label: str) -> None:
    assert reason_label(reason) == label
    m = SessionMetrics()
    m.observe_passivation(reason)
    assert samples(m)[("berth_session_passivations_total", (("reason", label),))] == 1


def test_state_gauge_is_one_hot() -> None:
    m = SessionMetrics()
    m.set_state("passivating")
    values = {st: samples(m)[("berth_session_state", (("state", st),))] for st in STATES}
    assert values == {st: (1 if st == "passivating" else 0) for st in STATES}
    with pytest.raises(ValueError, match="unknown session state"):
        m.set_state("sleeping")


def test_tool_calls_and_checkpoint_histogram() -> None:
    m = SessionMetrics()
    m.observe_tool_call("query")
    m.observe_tool_call("execute")
    m.observe_tool_call("bash-ish")
    m.checkpoint_write_seconds.observe(0.003)
    s = samples(m)
    assert s[("berth_session_tool_calls_total", (("lane", "query"),))] == 1
    assert s[("berth_session_tool_calls_total", (("lane", "execute"),))] == 2
    assert s[("berth_session_checkpoint_write_seconds_count", ())] == 1
    assert s[("berth_session_checkpoint_write_seconds_bucket", (("le", "0.005"),))] == 1
