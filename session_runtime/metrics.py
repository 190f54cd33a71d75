"""Prometheus metrics of a session pod (``berth_session_*``), served on ``GET /metrics``.

Owned by the ``berth-session`` entrypoint (``session_runtime.server``), which feeds them from the
session's hook events, its ``state()`` and a timing wrapper around the session store. Each
:class:`SessionMetrics` has its own ``CollectorRegistry`` (nothing goes to the global default
registry), so every test builds a fresh, isolated set.

Sources: rounds and checkpoint timings from the store wrapper (one observation per
``commit_round``), tokens from the budget guard's ``record_after_llm`` (one per LLM call), tool
calls from ``tool_end`` hook events, passivations and state from the server itself.

Metrics (label values come from fixed sets, never session or pod names — CONVENTIONS §8):

=============================================== ========= =========================================
name                                             type      meaning
=============================================== ========= =========================================
``berth_session_rounds_total``                  counter   tool rounds completed by this process
``berth_session_tool_calls_total{lane}``        counter   tool calls finished, ``lane`` in
                                                          :data:`TOOL_LANES`
``berth_session_llm_tokens_total{kind}``        counter   LLM tokens used by this process, ``kind``
                                                          ``prompt`` or ``completion``
``berth_session_checkpoint_write_seconds``      histogram wall seconds of one durable round commit
``berth_session_passivations_total{reason}``    counter   passivation requests accepted, ``reason``
                                                          in :data:`PASSIVATION_REASON_LABELS`
``berth_session_state{state}``                  gauge     1 for the current lifecycle state of the
                                                          pod, 0 for the others (:data:`STATES`)
``berth_session_replies_rejected_total{reason}`` counter   worker replies dropped undelivered:
                                                          ``mac`` (forged/unsigned), ``malformed``
``berth_session_store_bytes``                   gauge     bytes of this session's store directory
``berth_session_store_volume_size_bytes``       gauge     size of the store's filesystem
``berth_session_store_volume_free_bytes``       gauge     bytes an unprivileged writer may still
                                                          use on it (statvfs ``f_bavail``)
=============================================== ========= =========================================

The ``store`` gauges are read at scrape time (:meth:`SessionMetrics.watch_store`); NaN until the
session's store is known and when the volume cannot be read (a stale mount), so an alert on the
free share stays quiet rather than firing on a made-up zero.

Counters count work done *by this process*: a resumed run's carried-forward usage and rounds are
not counted again (Prometheus handles the counter reset of a new pod).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, Final

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.exposition import CONTENT_TYPE_LATEST, generate_latest

from session_runtime.store.health import tree_bytes, volume_usage

#: Lanes a tool call can run in (A3S lane contract; LLM calls are ``generate``, not tool calls).
TOOL_LANES: Final = ("query", "execute")

#: Token kinds of ``berth_session_llm_tokens_total``.
TOKEN_KINDS: Final = ("prompt", "completion")

#: Allowed ``reason`` label values: the contract's passivation reasons, Berth's ``suspend`` and
#: ``sigterm``, and ``other`` for anything else (the free text still goes to the termination log).
PASSIVATION_REASON_LABELS: Final = (
    "node_drain",
    "eviction",
    "idle_reaper",
    "migration",
    "manual",
    "suspend",
    "sigterm",
    "other",
)

#: Lifecycle states of a session pod, in order (``session_runtime.pod.state``).
STATES: Final = (
    "starting",
    "running",
    "idle",
    "passivating",
    "completed",
    "passivated",
    "failed",
    "fenced",
)

#: Prometheus text exposition content type.
CONTENT_TYPE: Final = CONTENT_TYPE_LATEST

# Commit of one round is an fsync'd append (+ occasional snapshot) on a shared volume.
_CHECKPOINT_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0)


def reason_label(reason: str | None) -> str:
    """Map a free-text passivation reason to its label value (unknown → ``other``)."""
    return reason if reason in PASSIVATION_REASON_LABELS else "other"


class SessionMetrics:
    """The ``berth_session_*`` metric objects in a private registry.

    Feed methods ignore odd input (negative or non-int token counts): metrics must not break the
    agent loop. Only :meth:`set_state` raises, for a state outside :data:`STATES` (a bug).
    """

    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        self.rounds_total = Counter(
            "berth_session_rounds",
            "Tool rounds completed (durably committed) by this process.",
            registry=self.registry,
        )
        self.tool_calls_total = Counter(
            "berth_session_tool_calls",
            "Tool calls finished by this process, by lane.",
            ["lane"],
            registry=self.registry,
        )
        self.llm_tokens_total = Counter(
            "berth_session_llm_tokens",
            "LLM tokens used by this process, by kind (prompt, completion).",
            ["kind"],
            registry=self.registry,
        )
        self.checkpoint_write_seconds = Histogram(
            "berth_session_checkpoint_write_seconds",
            "Wall time of one durable round commit to the session store, in seconds.",
            buckets=_CHECKPOINT_BUCKETS,
            registry=self.registry,
        )
        self.passivations_total = Counter(
            "berth_session_passivations",
            "Passivation requests accepted by this process, by reason.",
            ["reason"],
            registry=self.registry,
        )
        self.replies_rejected_total = Counter(
            "berth_session_replies_rejected",
            "Worker replies dropped undelivered (bad or missing MAC, malformed), by reason.",
            ["reason"],
            registry=self.registry,
        )
        self.state = Gauge(
            "berth_session_state",
            "1 for the current lifecycle state of the session pod, 0 for the others.",
            ["state"],
            registry=self.registry,
        )
        self._store_gauges()
        for lane in TOOL_LANES:
            self.tool_calls_total.labels(lane=lane)
        for kind in TOKEN_KINDS:
            self.llm_tokens_total.labels(kind=kind)
        for reason in PASSIVATION_REASON_LABELS:
            self.passivations_total.labels(reason=reason)
        self.set_state("starting")

    def _store_gauges(self) -> None:
        """The ``berth_session_store_*`` gauges, NaN until :meth:`watch_store`."""
        self.store_bytes = Gauge(
            "berth_session_store_bytes",
            "Bytes of this session's store directory (journal, snapshots, lease).",
            registry=self.registry,
        )
        self.store_volume_size_bytes = Gauge(
            "berth_session_store_volume_size_bytes",
            "Size of the filesystem that holds the session's store, in bytes.",
            registry=self.registry,
        )
        self.store_volume_free_bytes = Gauge(
            "berth_session_store_volume_free_bytes",
            "Bytes still usable by the session on the store's filesystem (statvfs f_bavail).",
            registry=self.registry,
        )
        for gauge in (self.store_bytes, self.store_volume_size_bytes, self.store_volume_free_bytes):
            gauge.set(math.nan)

    def set_state(self, state: str) -> None:
        """Make ``state`` (one of :data:`STATES`) the only gauge series at 1."""
        if state not in STATES:
            raise ValueError(f"unknown session state {state!r}; expected one of {STATES}")
        for name in STATES:
            self.state.labels(state=name).set(1 if name == state else 0)

    def observe_llm_usage(self, usage: Mapping[str, Any]) -> None:
        """Count one successful LLM call's ``prompt_tokens`` and ``completion_tokens``.

        Fed per call (the server's budget guard sees every ``record_after_llm``), so a resumed
        run's carried-forward usage is never counted again.
        """
        for kind in TOKEN_KINDS:
            value = usage.get(f"{kind}_tokens")
            if isinstance(value, int) and not isinstance(value, bool) and value > 0:
                self.llm_tokens_total.labels(kind=kind).inc(value)

    def observe_tool_call(self, lane: str) -> None:
        """Count one finished tool call in ``lane`` (anything but ``query`` counts as execute)."""
        self.tool_calls_total.labels(lane="query" if lane == "query" else "execute").inc()

    def observe_passivation(self, reason: str | None) -> None:
        """Count one accepted passivation request."""
        self.passivations_total.labels(reason=reason_label(reason)).inc()

    def observe_rejected_reply(self, reason: str) -> None:
        """Count one reply the transport dropped (``mac`` or ``malformed``)."""
        self.replies_rejected_total.labels(reason=reason if reason == "mac" else "malformed").inc()

    def watch_store(self, session_dir: Path) -> None:
        """Read the ``store`` gauges from ``session_dir`` (the session's store directory) and
        its filesystem at every scrape; a failing read gives NaN (module docstring)."""

        def reading(read: Callable[[], float]) -> Callable[[], float]:
            def safe() -> float:
                try:
                    return read()
                except OSError:
                    return math.nan

            return safe

        self.store_bytes.set_function(reading(lambda: float(tree_bytes(session_dir))))
        self.store_volume_size_bytes.set_function(
            reading(lambda: float(volume_usage(session_dir).size))
        )
        self.store_volume_free_bytes.set_function(
            reading(lambda: float(volume_usage(session_dir).free))
        )

    def render(self) -> bytes:
        """The registry in Prometheus text format (``CONTENT_TYPE``)."""
        return generate_latest(self.registry)
