"""The session's tool executor from the pod's options: lane queue, and the Redis transport to its
LaneWorkers for external lanes (docs/architecture.md §7).

Owned by the ``berth-session`` entrypoint (``session_runtime.server``), called once per pod while
the session is built.
"""

from __future__ import annotations

from collections.abc import Callable

from berth_contract.options import SessionPodOptions
from session_runtime.errors import ConfigError
from session_runtime.lanes import LaneHandlerConfig, LaneQueue, SessionQueueConfig
from session_runtime.pod.config import PodConfig
from session_runtime.tools.base import Lane
from session_runtime.tools.executor import DirectExecutor


def queue_settings(opts: SessionPodOptions) -> tuple[SessionQueueConfig, dict[Lane, str]]:
    """The lane-queue config of ``opts.lanes`` (mode, timeout in ms, concurrency per lane) and the
    LaneWorker name of every external or hybrid lane. Raises ``ConfigError`` for bad values."""
    config = SessionQueueConfig()
    handlers: dict[Lane, LaneHandlerConfig] = {}
    timeouts: dict[Lane, int] = {}
    workers: dict[Lane, str] = {}
    for lane, lo in opts.lanes.items():
        if lo.max_concurrency is not None:
            setattr(config, f"{lane}_max_concurrency", lo.max_concurrency)
        if lo.timeout_seconds is None:
            handlers[lane] = LaneHandlerConfig(lo.mode)
        else:
            timeouts[lane] = lo.timeout_seconds * 1000
            handlers[lane] = LaneHandlerConfig(lo.mode, timeouts[lane])
        if lo.mode != "internal" and lo.lane_worker is not None:
            workers[lane] = lo.lane_worker.name
    config.lane_handlers, config.lane_timeouts = handlers, timeouts
    config.validate()
    return config, workers


def build_executor(
    cfg: PodConfig, opts: SessionPodOptions, on_rejected: Callable[[str], None] | None = None
) -> LaneQueue | None:
    """The session's tool executor: None (tools run directly) without ``lanes`` in the options;
    otherwise a ``LaneQueue`` (:func:`queue_settings`) with, when any lane is external or hybrid,
    the Redis transport to its LaneWorker (docs/architecture.md §7), signing tasks and checking
    replies with the session's task key (``BERTH_TASK_KEY_FILE``); ``on_rejected`` counts dropped
    replies.

    Raises ``ConfigError`` when a lane needs Redis and ``BERTH_REDIS_URL`` is not set, or the
    task key file is missing or not 32 bytes.
    """
    if not opts.lanes:
        return None
    config, workers = queue_settings(opts)
    transport = None
    if workers:
        if not cfg.redis_url:
            raise ConfigError(
                f"lanes {sorted(workers)} are external but BERTH_REDIS_URL is not set"
            )
        from berth_contract.taskauth import read_key_file
        from session_runtime.transport import RedisTaskTransport  # redis only when needed

        if cfg.task_key_file is None:
            raise ConfigError(
                f"lanes {sorted(workers)} are external but BERTH_TASK_KEY_FILE is not set: tasks "
                "to a LaneWorker must be signed with the session's key"
            )
        try:
            key = read_key_file(cfg.task_key_file)
        except ValueError as exc:
            raise ConfigError(str(exc)) from None
        transport = RedisTaskTransport.from_url(
            cfg.redis_url,
            namespace=cfg.namespace,
            session_name=cfg.name,
            session_uid=cfg.session_uid,
            epoch=cfg.epoch,
            # The stream names the operator rendered into options.json (one source of names:
            # berth_contract.names, which the operator's rendering matches).
            task_streams={
                lane: stream
                for lane in workers
                if (stream := opts.lanes[lane].stream_for(cfg.namespace)) is not None
            },
            reply_stream=opts.result_stream,
            shared_root=_task_root(cfg),
            task_key=key,
            on_rejected=on_rejected,
            labels=opts.identity.model_dump(),
        )
    return LaneQueue(config, runner=DirectExecutor(), transport=transport)


def _task_root(cfg: PodConfig) -> str | None:
    """The directory external tasks' workspaces are relative to: the session's workspace root
    (``BERTH_WORKSPACE_ROOT``, the mount of ``workspaces/<ns>/<name>`` in a pod), else the legacy
    ``BERTH_SHARED_ROOT`` (local runs), else None (absolute paths)."""
    root = cfg.workspace_root or cfg.shared_root
    return None if root is None else str(root)
