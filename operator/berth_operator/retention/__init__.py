"""Retention of the stores and workspaces of finished, failed and deleted sessions
(docs/sessions.md, "Retention").

- :mod:`.policy`: the policy (``spec.storeRetention``, else the namespace's, else the operator's
  default), pure;
- :mod:`.ledger`: the pending removal of one session, kept as a suspended store-cleanup Job (its
  manifest, and what to do with it at a sweep), pure;
- :mod:`.jobs`: the Job calls the sweep makes (list, resume, delete).

The kopf side (the sweep loop, the hook on a session's deletion, Events, metrics) is
``berth_operator.handlers.retention``.
"""
