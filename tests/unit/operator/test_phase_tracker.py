"""PhaseTracker: the berth_operator_sessions gauge follows each session's last phase."""

from __future__ import annotations

from berth_operator.metrics import PHASES, PhaseTracker
from prometheus_client import REGISTRY


def _gauge(phase: str) -> float | None:
    return REGISTRY.get_sample_value("berth_operator_sessions", {"phase": phase})


def test_a_session_is_counted_once_in_its_last_phase_and_forgotten_on_none() -> None:
    tracker = PhaseTracker()
    tracker.set("a", "Pending")
    tracker.set("b", "Pending")
    assert (tracker.count("Pending"), _gauge("Pending")) == (2, 2.0)
    tracker.set("a", "Running")
    tracker.set("a", "Running")  # the same phase again changes nothing
    assert (tracker.count("Pending"), _gauge("Pending")) == (1, 1.0)
    assert (tracker.count("Running"), _gauge("Running")) == (1, 1.0)
    tracker.set("a", None)
    tracker.set("never-seen", None)
    assert (tracker.count("Running"), _gauge("Running")) == (0, 0.0)
    assert tracker.count("Pending") == 1


def test_a_new_tracker_publishes_zero_for_every_phase() -> None:
    tracker = PhaseTracker()
    tracker.set("x", "Failed")
    PhaseTracker()  # a new leader's tracker starts from nothing
    assert all(_gauge(phase) == 0.0 for phase in PHASES)
