"""``berth-worker``: a LaneWorker pod's process. Runs sessions' execute-lane tools from Redis.

Owned by the lane-queue/transport layer; started by the LaneWorker Deployment the operator owns
(console script ``berth-worker``: ``session_runtime.launch.worker``, then :func:`main`). Talks only
to Redis and the shared volume (docs/architecture.md §2, §4, §7).

Loop: read tasks from ``berth:<ns>:lw:{<laneworker>}:tasks`` as consumer ``POD_NAME`` of group
``workers`` (at most ``BERTH_WORKER_CONCURRENCY`` at once), run each tool with the runtime's own
tool implementations (:func:`session_runtime.tools.run_tool`) in the session's workspace on the
shared volume, then reply to the task's ``reply_to`` stream and ``XACK`` with one script
(:mod:`~session_runtime.worker.scripts`; on Redis Cluster the ``XACK`` follows it).

Rules:

- At most once. A worker refreshes a liveness key (TTL ``BERTH_WORKER_HEARTBEAT_SECONDS``); every
  worker scans the group's pending entries and claims (``XCLAIM`` with a min-idle time, so only
  one claimer wins) the tasks of a consumer whose key is gone, or of one that holds a task far past
  its deadline, and answers them ``success=false`` "worker lost". Such a task is never re-run.
  (§7 names XAUTOCLAIM; claiming entry by entry after checking the owner's liveness keeps a live,
  busy worker's tasks where they are.)
- Deadline: a task not started before ``deadline_ms`` is answered "deadline passed"; a running
  tool is stopped at ``min(deadline, BERTH_TASK_TIMEOUT_SECONDS)`` and answered ``success=false``.
  A tool that ran and failed is ``success=true`` with the failure in ``output``.
- Bound to its session (docs/architecture.md §11): a task must carry a MAC under the key of the
  session it names (derived from the namespace master in ``BERTH_TASK_MASTER_KEY_FILE``; see
  :mod:`berth_contract.taskauth`), name a session of this worker's namespace and reply to
  that session's own stream. Anything else — forged, unsigned, oversized — is dead-lettered,
  acknowledged and counted in ``berth_worker_tasks_rejected_total{reason}``; it is never run and
  never answered. The workspace is built, never taken from the message:
  ``<BERTH_WORKSPACES_ROOT>/<namespace>/<session>/<relative workspace>`` (no ``..``, no absolute
  path, no symlinked directory), so a task can only touch its own session's files; replies are
  signed with the same session key.
- A task id runs once: before running, the worker sets ``berth:<ns>:task:{<uid>}:<task_id>``
  (``SET NX``, in the claim script); a redelivery finds it and is acknowledged without running
  or answering. The answer script marks it ``replied``: a task gets one reply, whoever answers.
- Bad input: a signed message that does not parse is moved to ``berth:<ns>:lw:{<lw>}:dead`` with a
  reason and acknowledged (and answered with the reason). Nothing a message says crashes the
  worker.
- SIGTERM/SIGINT: read no new task, finish the held ones (they end by their deadlines), remove
  the liveness key, leave the consumer group, exit 0. A lost worker is removed from the group by
  the worker that answered its tasks.

Configuration (env, each overridable by ``--flag``): ``BERTH_REDIS_URL``, ``BERTH_NAMESPACE``,
``BERTH_LANEWORKER``, ``POD_NAME``, ``POD_IP``, ``BERTH_WORKER_CONCURRENCY`` (default 1),
``BERTH_WORKSPACES_ROOT`` (the ``workspaces`` directory of the shared volume),
``BERTH_TASK_MASTER_KEY_FILE``, ``BERTH_TASK_TIMEOUT_SECONDS`` (default 600),
``BERTH_METRICS_PORT`` (default 9090, 0 = no metrics server; bound on ``POD_IP`` or 127.0.0.1;
it answers once the worker has joined its consumer group, and is the readiness probe's),
``BERTH_WORKER_HEARTBEAT_SECONDS`` (default 10), ``BERTH_RECLAIM_INTERVAL_SECONDS`` (default 2),
``BERTH_REPLY_TTL_SECONDS`` (default 604800: a reply stream expires a week after its last reply).

Metrics: ``berth_worker_tasks_total{lane,outcome}`` (outcome: ok, tool_error, timeout, expired,
refused, malformed, lost, error), ``berth_worker_task_duration_seconds{lane}``,
``berth_worker_busy`` (tasks running), ``berth_worker_capacity`` (concurrency).

Modules, one job each:

- :mod:`~session_runtime.worker.tasks`: the task checks (size limit, rejections, the session's
  own workspace), the outcome labels and the reply to a task;
- :mod:`~session_runtime.worker.settings`: :class:`WorkerSettings`, from env and ``--flags``;
- :mod:`~session_runtime.worker.metrics`: :class:`WorkerMetrics`, the ``berth_worker_*`` metrics;
- :mod:`~session_runtime.worker.lane`: :class:`LaneWorker`, the Redis stream consumer;
- :mod:`~session_runtime.worker.entry`: the process: the ``/metrics`` server, ``serve`` and
  :func:`main`.
"""

from __future__ import annotations

from session_runtime.worker.entry import main

__all__ = ["main"]
