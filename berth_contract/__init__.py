"""The operator ⇄ runtime contract, one definition on each side of the boundary
(docs/architecture.md §5, §7).

The operator (``berth_operator``) writes these documents and names; the session runtime, the
LaneWorker and the kubectl plugin (``session_runtime``, ``kubectl_berth``) read them. This package
imports neither side (an import-linter contract holds it so) and needs only pydantic:

- :mod:`berth_contract.options`: ``options.json``, the session pod's options;
- :mod:`berth_contract.envvars`: the ``BERTH_*`` variables of session, warm and worker pods;
- :mod:`berth_contract.names`: Redis stream and key names (lane transport, front door, budgets);
- :mod:`berth_contract.redis_url`: which Redis a URL names (one server or a cluster);
- :mod:`berth_contract.state`: the session pod's port, token header and HTTP bodies
  (``/v1/state``, ``/v1/passivate``, ``/v1/messages``);
- :mod:`berth_contract.runview`: ``GET /v1/runs/{runId}/events``, one run's tool calls and
  conversation (the session pod answers, ``kubectl berth ui`` reads);
- :mod:`berth_contract.termination`: the termination message a session pod leaves behind.
"""
