"""Table tests of the LaneWorker scaling decisions (berth_operator.reconcile.scaling).

Each table row is one case; the expected values come from the issue (ceil(pressure / target)
clamped to [min, max], scale up at once, scale down only after the window, to zero when idle for
the window) and from the HPA stabilization algorithm the module follows.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from berth_operator.api.laneworker import LaneWorkerSpec
from berth_operator.reconcile.scaling import (
    Recommendation,
    Sample,
    decide,
    external_replicas,
    owns_replicas,
    recommend,
    scale_up_due,
    seed_history,
    stabilize,
    wakes_on_arrival,
)

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def spec(**fields: Any) -> LaneWorkerSpec:
    """A LaneWorkerSpec from camelCase fields, ``scaling`` on by default."""
    body: dict[str, Any] = {"minReplicas": 0, "maxReplicas": 10, "scaling": {}}
    body.update(fields)
    return LaneWorkerSpec.model_validate(body)


# --------------------------------------------------------------------------- recommend

RECOMMEND = [
    # pressure, target, min, max, replicas, unclamped, limited
    (0, 1, 0, 10, 0, 0, None),
    (1, 1, 0, 10, 1, 1, None),
    (160, 40, 0, 10, 4, 4, None),
    (161, 40, 0, 10, 5, 5, None),  # ceil, not round
    (39, 40, 0, 10, 1, 1, None),
    (1000, 1, 0, 10, 10, 1000, "max"),
    (0, 5, 2, 10, 2, 0, "min"),
    (-3, 5, 0, 10, 0, 0, None),  # a negative reading counts as 0
    (7, 1, 3, 3, 3, 7, "max"),
    (1, 1, 3, 3, 3, 1, "min"),
]


@pytest.mark.parametrize(("pressure", "target", "lo", "hi", "want", "raw", "limited"), RECOMMEND)
def test_recommend(
    pressure: int, target: int, lo: int, hi: int, want: int, raw: int, limited: str | None
) -> None:
    assert recommend(pressure, target, lo, hi) == Recommendation(want, raw, limited)  # type: ignore[arg-type]


def test_recommend_rejects_zero_target() -> None:
    with pytest.raises(ValueError, match="targetTasksPerReplica"):
        recommend(10, 0, 0, 10)


# --------------------------------------------------------------------------- stabilize

STABILIZE = [
    # name, history [(t, n)], current, recommendation, now, up window, down window, desired, action
    ("up at once", [], 0, 4, 0, 0, 30, 4, "up"),
    ("up ignores older low samples when up window 0", [(-5, 0)], 0, 4, 0, 0, 30, 4, "up"),
    ("up window takes the lowest", [(-5, 2), (-2, 6)], 0, 8, 0, 10, 30, 2, "up"),
    ("up window: old low sample expired", [(-15, 1), (-2, 6)], 0, 8, 0, 10, 30, 6, "up"),
    ("down waits while a high sample is in the window", [(-10, 4)], 4, 0, 0, 0, 30, 4, "none"),
    ("down after the window", [(-31, 4)], 4, 0, 0, 0, 30, 0, "down"),
    ("sample exactly window old still counts", [(-30, 4)], 4, 0, 0, 0, 30, 4, "none"),
    ("down to the highest in the window", [(-40, 8), (-20, 3), (-5, 1)], 8, 0, 0, 0, 30, 3, "down"),
    ("zero down window shrinks at once", [(-1, 5)], 5, 2, 0, 0, 0, 2, "down"),
    ("steady", [(-5, 3)], 3, 3, 0, 0, 30, 3, "none"),
    ("between limits stays", [(-5, 5)], 4, 3, 0, 0, 30, 4, "none"),
]


@pytest.mark.parametrize(
    ("name", "history", "current", "rec", "now", "up", "down", "desired", "action"),
    STABILIZE,
    ids=[row[0] for row in STABILIZE],
)
def test_stabilize(
    name: str,
    history: list[tuple[float, int]],
    current: int,
    rec: int,
    now: float,
    up: int,
    down: int,
    desired: int,
    action: str,
) -> None:
    samples = [Sample(at(t), n) for t, n in history]
    result = stabilize(
        samples, current, rec, at(now), up_window_seconds=up, down_window_seconds=down
    )
    assert (result.desired, result.action) == (desired, action)


def test_a_zero_window_counts_only_the_new_reading_even_at_the_same_instant() -> None:
    """The loop also reads between ticks: an earlier reading with the very same timestamp must
    not hold a scale-up (up window 0) or a scale-down (down window 0) back."""
    up = stabilize([Sample(at(0), 0)], 0, 4, at(0), up_window_seconds=0, down_window_seconds=300)
    assert (up.desired, up.action) == (4, "up")
    down = stabilize([Sample(at(0), 4)], 4, 1, at(0), up_window_seconds=0, down_window_seconds=0)
    assert (down.desired, down.action) == (1, "down")
    held = stabilize([Sample(at(0), 0)], 0, 4, at(0), up_window_seconds=5, down_window_seconds=300)
    assert held.action == "none"  # a window > 0 still counts a sample of the same instant


def test_stabilize_history_is_bounded_and_sorted() -> None:
    samples = [Sample(at(t), 1) for t in (-100, -50, -31, -30, -1)]
    result = stabilize(samples, 1, 1, at(0), up_window_seconds=0, down_window_seconds=30)
    assert [s.at for s in result.history] == [at(-30), at(-1), at(0)]


def test_seed_history_delays_scale_down_after_restart() -> None:
    history = seed_history(5, at(0))
    first = stabilize(history, 5, 0, at(1), up_window_seconds=0, down_window_seconds=30)
    assert first.desired == 5
    later = stabilize(first.history, 5, 0, at(31), up_window_seconds=0, down_window_seconds=30)
    assert later.desired == 0


# --------------------------------------------------------------------------- decide (a burst)


def test_burst_goes_up_at_once_and_to_zero_after_the_idle_window() -> None:
    """The issue's story: 0 → N on the first reading of a burst, back to 0 after the window."""
    lw = spec(
        maxReplicas=8,
        scaling={"targetTasksPerReplica": 40, "scaleDownStabilizationSeconds": 20},
    )
    readings = [  # (t, pressure)
        (0, 0),
        (1, 160),  # burst of 4 x 40
        (2, 150),
        (3, 90),
        (4, 10),
        (5, 0),  # idle from here
        (15, 0),
        (21, 0),  # window [1, 21]: still holds the 4 of t=1
        (23, 0),  # window [3, 23]: highest is 3 (t=3) - shrinks in steps, as the HPA does
        (24, 0),  # window [4, 24]: 1 (t=4)
        (25, 0),  # window [5, 25]: idle for the whole window -> 0
    ]
    current, history, seen = 0, seed_history(0, at(0)), []
    for t, pressure in readings:
        d = decide(lw, pressure=pressure, current=current, history=history, now=at(t))
        history, current = d.history, d.desired
        seen.append(current)
    assert seen == [0, 4, 4, 4, 4, 4, 4, 4, 3, 1, 0]


DECIDE = [
    # name, spec fields, pressure, current, desired, action
    ("unknown pressure keeps replicas", {}, None, 3, 3, "none"),
    ("min raised by an edit applies at once", {"minReplicas": 2}, 0, 0, 2, "up"),
    ("max lowered by an edit applies at once", {"maxReplicas": 2}, 0, 6, 2, "down"),
]


@pytest.mark.parametrize(
    ("name", "fields", "pressure", "current", "desired", "action"),
    DECIDE,
    ids=[row[0] for row in DECIDE],
)
def test_decide(
    name: str,
    fields: dict[str, Any],
    pressure: int | None,
    current: int,
    desired: int,
    action: str,
) -> None:
    lw = spec(**fields)
    history = seed_history(current, at(-1))
    d = decide(lw, pressure=pressure, current=current, history=history, now=at(0))
    assert (d.desired, d.action) == (desired, action)


def test_decide_needs_scaling() -> None:
    with pytest.raises(ValueError, match="scaling"):
        decide(spec(scaling=None), pressure=1, current=0, history=(), now=at(0))


# --------------------------------------------------------------------------- early ticks

SCALE_UP_DUE = [
    # name, spec fields, pressure, current, due
    ("burst beyond the replicas", {"scaling": {"targetTasksPerReplica": 40}}, 160, 1, True),
    ("within the replicas", {"scaling": {"targetTasksPerReplica": 40}}, 40, 1, False),
    ("from zero", {"scaling": {"targetTasksPerReplica": 40}}, 1, 0, True),
    ("fewer tasks: a scale-down waits for its tick", {}, 0, 3, False),
    ("at maxReplicas", {"maxReplicas": 2}, 50, 2, False),
    (
        "scale-up window not yet passed",
        {"scaling": {"scaleUpStabilizationSeconds": 30}},
        5,
        1,
        False,
    ),
    ("no scaling: replicas are external", {"scaling": None}, 50, 0, False),
]


@pytest.mark.parametrize(
    ("name", "fields", "pressure", "current", "due"),
    SCALE_UP_DUE,
    ids=[row[0] for row in SCALE_UP_DUE],
)
def test_scale_up_due_is_the_ticks_own_decision(
    name: str, fields: dict[str, Any], pressure: int, current: int, due: bool
) -> None:
    lw = spec(**fields)
    history = seed_history(current, at(-1))
    assert scale_up_due(lw, pressure=pressure, current=current, history=history, now=at(0)) is due
    if lw.scaling is not None:  # never earlier than decide() itself would scale up
        d = decide(lw, pressure=pressure, current=current, history=history, now=at(0))
        assert (d.action == "up") is due


@pytest.mark.parametrize(
    ("fields", "wakes"),
    [({}, True), ({"scaling": {"source": "prometheus"}}, False), ({"scaling": None}, False)],
)
def test_only_the_broker_source_wakes_on_arrival(fields: dict[str, Any], wakes: bool) -> None:
    assert wakes_on_arrival(spec(**fields)) is wakes


# --------------------------------------------------------------------------- ownership

OWNERSHIP = [
    # name, spec fields, deployment replicas, owns, replicas to write
    ("scaling set: operator owns", {}, 3, True, 3),
    ("no scaling, /scale set", {"scaling": None, "replicas": 4}, 1, False, 4),
    ("no scaling, /scale set to 0", {"scaling": None, "replicas": 0}, 2, False, 0),
    ("no scaling, no /scale, existing: left alone", {"scaling": None}, 7, False, None),
    (
        "no scaling, no /scale, new: minReplicas",
        {"scaling": None, "minReplicas": 1},
        None,
        False,
        1,
    ),
]


@pytest.mark.parametrize(
    ("name", "fields", "dep", "owns", "write"), OWNERSHIP, ids=[r[0] for r in OWNERSHIP]
)
def test_ownership(
    name: str, fields: dict[str, Any], dep: int | None, owns: bool, write: int | None
) -> None:
    lw = spec(**fields)
    assert owns_replicas(lw) is owns
    if not owns:
        assert external_replicas(lw, dep) == write
