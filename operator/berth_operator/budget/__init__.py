"""Tenant budgets shared by many sessions: the cluster's side of the A3S budget-guard seam, run by
the operator's leader (the session's side is ``session_runtime.budget.guard``).

- :mod:`.policy`: what a BudgetPolicy says, which sessions it selects, its period windows, the
  cost of a call (pure).
- :mod:`.ledger`: atomic reserve / settle / release counters in Redis (one Lua script each).
- :mod:`.directory`: which policies select which session, kept by the BudgetPolicy handlers.
- :mod:`.service`: the budget service's HTTP API (aiohttp, paths in
  :mod:`berth_contract.services`), authenticating each session by its own API token and taking
  its tenant from the cluster, never from the request.
"""
