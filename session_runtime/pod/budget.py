"""The session pod's budget guard: ``spec.budget`` alone, or wrapped by the cluster's guard.

With ``BERTH_BUDGET_URL`` set (the operator runs the budget service), the session's own guard
(``spec.budget``, metered) becomes the inner guard of
:class:`~session_runtime.budget.guard.ClusterBudgetGuard`, which consults
the service with this session's uid and API token (the token the operator issued in the
session's Secret; the service checks it, so the session can speak only for itself).
"""

from __future__ import annotations

from typing import cast

from session_runtime.agent.budget import BudgetGuard
from session_runtime.pod.config import PodConfig, read_secret_file


def session_guard(cfg: PodConfig, own: BudgetGuard) -> BudgetGuard:
    """``own`` when no budget service is configured, else the cluster guard around it.
    Raises PodConfigError when the API token file cannot be read."""
    if not cfg.budget_url or cfg.api_token_file is None:
        return own
    # Imported here: the cluster guard brings the budget service's client and Redis ledger
    # types (~35 ms of a session process' start-up), which a session without it never needs.
    from session_runtime.budget.guard import ClusterBudgetGuard

    token = read_secret_file(cfg.api_token_file, "BERTH_API_TOKEN_FILE").decode()
    guard = ClusterBudgetGuard(
        cfg.budget_url,
        cfg.session_uid,
        token,
        failure_policy=cfg.budget_failure_policy,
        timeout_ms=cfg.budget_timeout_ms,
        inner=own,
    )
    return cast(BudgetGuard, guard)  # async methods: the protocol allows sync or async
