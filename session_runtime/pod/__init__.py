"""The ``berth-session`` entrypoint's parts (``session_runtime.server``); the documents it reads
and writes (options, termination message, HTTP bodies) are :mod:`berth_contract`'s.

- :mod:`session_runtime.pod.config`: environment (docs/architecture.md §5) → :class:`PodConfig`;
- :mod:`session_runtime.pod.termination`: writing the termination message on exit;
- :mod:`session_runtime.pod.http`: the HTTP API (aiohttp);
- :mod:`session_runtime.pod.lifecycle`: the session's lifecycle in the pod (build, run, passivate);
- :mod:`session_runtime.pod.warm`: warm mode (a SessionWarmPool's pod, until adopted);
- :mod:`session_runtime.pod.start`, ``wiring``, ``budget``, ``metered``, ``peer``: start plan,
  executor wiring, the budget guard, metered store and guard, the ``call_peer`` tool.
"""
