"""The store gauges of a session pod: this session's store size and the volume's size and free
space, read at scrape time from the real filesystem; NaN before the store is known or when the
volume cannot be read."""

from __future__ import annotations

import math
import os
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

from session_runtime.metrics import SessionMetrics

NAMES = (
    "berth_session_store_bytes",
    "berth_session_store_volume_size_bytes",
    "berth_session_store_volume_free_bytes",
)


def gauges(metrics: SessionMetrics) -> dict[str, float]:
    return {
        s.name: s.value
        for family in text_string_to_metric_families(metrics.render().decode())
        for s in family.samples
        if s.name in NAMES
    }


def test_store_gauges_are_nan_until_the_store_is_known() -> None:
    values = gauges(SessionMetrics())
    assert set(values) == set(NAMES)
    assert all(math.isnan(v) for v in values.values())


def test_store_gauges_follow_the_files_and_the_filesystem(tmp_path: Path) -> None:
    session_dir = tmp_path / "store" / "ns" / "s1"
    session_dir.mkdir(parents=True)
    (session_dir / "journal.rec").write_bytes(b"x" * 1000)
    (session_dir / "snapshots").mkdir()
    (session_dir / "snapshots" / "snap.json").write_bytes(b"y" * 234)
    os.symlink("/etc/passwd", session_dir / "link")  # not the store's bytes
    metrics = SessionMetrics()
    metrics.watch_store(session_dir)
    first = gauges(metrics)
    assert first["berth_session_store_bytes"] == 1234
    st = os.statvfs(session_dir)
    assert first["berth_session_store_volume_size_bytes"] == st.f_blocks * st.f_frsize
    assert 0 < first["berth_session_store_volume_free_bytes"] <= st.f_blocks * st.f_frsize
    (session_dir / "journal.rec").write_bytes(b"x" * 5000)
    assert gauges(metrics)["berth_session_store_bytes"] == 5234  # read again at each scrape


def test_a_vanished_store_reads_as_nan_not_zero(tmp_path: Path) -> None:
    metrics = SessionMetrics()
    metrics.watch_store(tmp_path / "gone")
    values = gauges(metrics)
    assert values["berth_session_store_bytes"] == 0  # an empty walk: nothing stored
    assert math.isnan(values["berth_session_store_volume_free_bytes"])
