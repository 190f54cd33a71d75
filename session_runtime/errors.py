"""Every error ``session_runtime`` raises, in one module (httpx style).

Owned by the runtime core; raised by ``session_runtime.agent``, ``session_runtime.llm``,
``session_runtime.tools`` and ``session_runtime.store``. Callers catch the base class to handle
anything the runtime throws; foreign exceptions (openai, OSError, aiohttp) are translated at the
boundary with ``raise X(...) from exc``.

Hierarchy::

    RuntimeError
    └── SessionRuntimeError               base of everything below
        ├── SessionClosedError            "Session '<id>' is closed" (A3S SessionClosed)
        ├── AgentClosedError              the Agent was closed; no new sessions
        ├── SessionBusyError              "Session '<id>' already has an active operation"
        ├── SessionNotFoundError          resume_session of an unknown id
        ├── BudgetExhaustedError          "Budget exhausted on '<resource>': <reason>"
        ├── RunCancelledError             cancel_run()/close() stopped the run
        ├── RunPassivatedError            passivate() ended the run at a durable boundary
        ├── LimitExceededError            a loop limit stopped the run
        │   ├── MaxToolRoundsError        more than max_tool_rounds rounds in one run
        │   └── ParseRetriesExceededError malformed tool arguments > max_parse_retries times
        ├── LlmError                      the model endpoint failed (not worth retrying)
        │   ├── LlmTransientError         connection error, timeout, 429, 5xx (breaker counts)
        │   └── CircuitOpenError          circuit_breaker_threshold transient failures in a row
        ├── ConfigError                   bad Agent config / model string / provider
        ├── ResumeError                   "resume_run requires a session_store",
        │                                 "no loop checkpoint found for run '<id>'"
        └── StoreError                    a session store could not read or write
            ├── FencedError               a newer epoch owns the session; stop writing
            └── CheckpointError           unusable checkpoint (newer schema, other session)

``BudgetExhaustedError`` keeps the framework's Python behaviour of being a ``RuntimeError`` with the
``Budget exhausted ...`` message; the session stays usable after it.
"""

from __future__ import annotations


class SessionRuntimeError(RuntimeError):
    """Base class of every error raised by ``session_runtime``."""


class SessionClosedError(SessionRuntimeError):
    """An operation on a closed session (A3S: ``Session '<id>' is closed``)."""

    def __init__(self, session_id: str) -> None:
        super().__init__(f"Session '{session_id}' is closed")
        self.session_id = session_id


class AgentClosedError(SessionRuntimeError):
    """``agent.session``/``resume_session`` after ``agent.close()``."""

    def __init__(self) -> None:
        super().__init__("Agent is closed")


class SessionBusyError(SessionRuntimeError):
    """A second send/stream/resume_run while one runs (A3S contract message)."""

    def __init__(self, session_id: str) -> None:
        super().__init__(f"Session '{session_id}' already has an active operation")
        self.session_id = session_id


class SessionNotFoundError(SessionRuntimeError):
    """No live or stored session with this id."""

    def __init__(self, session_id: str) -> None:
        super().__init__(f"Session '{session_id}' not found")
        self.session_id = session_id


class BudgetExhaustedError(SessionRuntimeError):
    """A budget guard denied an LLM call: ``Budget exhausted on '<resource>': <reason>``."""

    def __init__(self, resource: str, reason: str) -> None:
        super().__init__(f"Budget exhausted on '{resource}': {reason}")
        self.resource = resource
        self.reason = reason


class RunCancelledError(SessionRuntimeError):
    """The run was cancelled by ``cancel_run`` or ``close``."""

    def __init__(self, run_id: str) -> None:
        super().__init__(f"Run '{run_id}' was cancelled")
        self.run_id = run_id


class RunPassivatedError(SessionRuntimeError):
    """``passivate()`` ended the run; its state is in the store, ``resume_run`` continues it."""

    def __init__(self, run_id: str, turn: int, outcome: str) -> None:
        super().__init__(f"Run '{run_id}' was passivated at turn {turn} ({outcome})")
        self.run_id = run_id
        self.turn = turn
        self.outcome = outcome


class LimitExceededError(SessionRuntimeError):
    """A loop limit of ``SessionOptions`` ended the run."""


class MaxToolRoundsError(LimitExceededError):
    """The model asked for more than ``max_tool_rounds`` tool rounds in one run."""

    def __init__(self, limit: int) -> None:
        super().__init__(f"Max tool rounds ({limit}) exceeded")
        self.limit = limit


class ParseRetriesExceededError(LimitExceededError):
    """The model sent malformed tool arguments more than ``max_parse_retries`` times."""

    def __init__(self, limit: int, detail: str) -> None:
        super().__init__(f"Malformed tool arguments after {limit} parse retries: {detail}")
        self.limit = limit


class LlmError(SessionRuntimeError):
    """The LLM endpoint failed in a way retrying will not fix (4xx, bad reply)."""


class LlmTransientError(LlmError):
    """A failure worth retrying: connection error, timeout, HTTP 429 or 5xx."""


class CircuitOpenError(LlmError):
    """``circuit_breaker_threshold`` consecutive transient LLM failures; the run stops."""

    def __init__(self, failures: int, last_error: str) -> None:
        super().__init__(
            f"LLM circuit breaker open after {failures} consecutive failures: {last_error}"
        )
        self.failures = failures


class ConfigError(SessionRuntimeError):
    """Invalid agent configuration, model string or provider."""


class ResumeError(SessionRuntimeError):
    """``resume_run`` cannot start (no store, no checkpoint)."""


class StoreError(SessionRuntimeError):
    """A session store failed to read or write (implementations raise this or a subclass)."""


class FencedError(StoreError):
    """A newer placement epoch owns the session; the writer must stop (docs/architecture.md §6)."""


class CheckpointError(StoreError):
    """A checkpoint cannot be used: newer schema version, or it belongs to another session."""


class RunNotDurableError(StoreError):
    """A run finished but its end could not be saved (a full or failing store volume): the
    store still holds the run as unfinished, resumable from its last committed round, so the
    run is not reported completed. The cause (a ``StoreError``) is ``__cause__``."""

    def __init__(self, run_id: str, cause: BaseException) -> None:
        super().__init__(f"run '{run_id}' finished but its end could not be saved: {cause}")
        self.run_id = run_id


__all__ = [
    "AgentClosedError",
    "BudgetExhaustedError",
    "CheckpointError",
    "CircuitOpenError",
    "ConfigError",
    "FencedError",
    "LimitExceededError",
    "LlmError",
    "LlmTransientError",
    "MaxToolRoundsError",
    "ParseRetriesExceededError",
    "ResumeError",
    "RunCancelledError",
    "RunNotDurableError",
    "RunPassivatedError",
    "SessionBusyError",
    "SessionClosedError",
    "SessionNotFoundError",
    "SessionRuntimeError",
    "StoreError",
]
