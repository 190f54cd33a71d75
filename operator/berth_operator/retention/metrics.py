"""Prometheus metrics of retention (``berth_operator_retention_*``, the default registry).

=============================================== ======= =========================================
``berth_operator_retention_actions_total{action}`` counter ``planned`` (a suspended cleanup Job
                                                        made), ``removed`` (resumed: the store
                                                        and workspace are deleted), ``kept``
                                                        (cancelled: the session was re-created
                                                        or runs again), ``forgotten`` (a done
                                                        Job of a gone session deleted)
``berth_operator_retention_pending``            gauge   suspended cleanup Jobs at the last sweep
=============================================== ======= =========================================
"""

from __future__ import annotations

from typing import Final

from prometheus_client import Counter, Gauge

ACTIONS: Final = ("planned", "removed", "kept", "forgotten")

RETENTION_ACTIONS = Counter(
    "berth_operator_retention_actions",
    "Retention actions on sessions' stores and workspaces, by action.",
    ["action"],
)
RETENTION_PENDING = Gauge(
    "berth_operator_retention_pending",
    "Store-cleanup Jobs waiting for their retention period (suspended) at the last sweep.",
)
for _action in ACTIONS:
    RETENTION_ACTIONS.labels(action=_action)
