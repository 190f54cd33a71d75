"""Pure building blocks of the ``berth-session`` entrypoint (``session_runtime.server``).

Owned by the session-pod entrypoint; nothing here does I/O beyond reading one file or env mapping
it is handed, so each part is table-tested on its own:

- :mod:`session_runtime.pod.config`: environment (docs/architecture.md §5) → :class:`PodConfig`;
- :mod:`session_runtime.pod.options`: the operator's options ConfigMap JSON → :class:`PodOptions`;
- :mod:`session_runtime.pod.termination`: the one JSON object written to the termination log;
- :mod:`session_runtime.pod.state`: runtime ``Session.state()`` → ``GET /v1/state`` body and the
  server's lifecycle phases;
"""
