"""Pure manifest builders: session Pod, options ConfigMap, store-cleanup Job.

Each builder takes parsed models and settings and returns a plain dict ready for the API; no I/O.
Called by ``berth_operator.handlers`` through the plans of ``berth_operator.reconcile``.
"""
