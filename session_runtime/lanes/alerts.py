"""Depth alerts and pressure/idle signals (pure, edge-triggered decisions).

Owned by ``session_runtime.lanes``; called by the queue whenever a lane's depth changes.
A3S contract: ``queue_alert`` when pending commands exceed 50 (warning) / 100 (critical);
``pressure`` when a lane's pending count reaches ``pressure_threshold``; ``idle`` when a lane
becomes empty. Berth emits each signal once per crossing (edge, not level), so a deep queue does
not flood the event stream.
"""

from __future__ import annotations

from typing import Literal

AlertLevel = Literal["warning", "critical"]
_RANK: dict[AlertLevel | None, int] = {None: 0, "warning": 1, "critical": 2}


def alert_level(depth: int, warning: int, critical: int) -> AlertLevel | None:
    """Level for a queue-wide pending ``depth`` (alerts fire when depth exceeds a threshold)."""
    if depth > critical:
        return "critical"
    if depth > warning:
        return "warning"
    return None


def alert_to_emit(previous: AlertLevel | None, current: AlertLevel | None) -> AlertLevel | None:
    """Emit an alert only when the level rises (falling back re-arms it silently)."""
    return current if _RANK[current] > _RANK[previous] else None


def pressure_edge(was_under_pressure: bool, pending: int, threshold: int | None) -> bool | None:
    """True: emit ``pressure`` now; False: pressure ended (re-arm); None: nothing changed."""
    if threshold is None:
        return None
    now = pending >= threshold
    if now == was_under_pressure:
        return None
    return now


def idle_edge(was_busy: bool, pending: int, active: int) -> bool:
    """True when a lane that had work has just become empty (emit ``idle``)."""
    return was_busy and pending == 0 and active == 0
