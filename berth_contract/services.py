"""The operator's HTTP services that session pods call (docs/architecture.md §5): the budget
service (BudgetPolicies) and the front door (peer invocation).

A session authenticates with ``Authorization: Bearer <its API token>`` and names itself with
:data:`SESSION_UID_HEADER`; the service checks the token against that session's own, so a
session can speak only for itself.
"""

from __future__ import annotations

from typing import Final

SESSION_UID_HEADER: Final = "X-Berth-Session-Uid"
"""The calling session's ``metadata.uid``."""
BUDGET_CHECK_PATH: Final = "/v1/budget/check"
"""``POST {"estimatedTokens": int}`` before an LLM call: reserve, or refuse with the reason."""
BUDGET_RECORD_PATH: Final = "/v1/budget/record"
"""``POST {"reservations": [...], "usage": {...}}`` after it: settle what was used."""
