"""Tenant budgets shared by many sessions (the cluster's side of the A3S budget-guard seam).

- :mod:`.policy`: what a BudgetPolicy says, which sessions it selects, its period windows, the
  cost of a call (pure).
- :mod:`.ledger`: atomic reserve / settle / release counters in Redis (one Lua script each).
- :mod:`.service`: the budget service's HTTP API (aiohttp), authenticating each session by its
  own API token and taking its tenant from the cluster, never from the request.
- :mod:`.guard`: the session's guard (``check_before_llm`` reserves, ``record_after_llm``
  settles) that consults the service under the policy's failure policy.
"""
