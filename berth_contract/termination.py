"""The one JSON object a session pod leaves behind (docs/architecture.md §5, termination message).

Part of the contract (:mod:`berth_contract`): ``berth-session`` writes it to
``BERTH_TERMINATION_LOG`` on exit; the operator reads it from the pod status
(``state.terminated.message``) to record the run's outcome. Kubernetes keeps at most 4096 bytes of
a termination message, so :func:`render` shrinks ``resultText`` (then ``reason``) until the encoded
object fits; everything else is small and kept verbatim.

Shape (camelCase, compact JSON, UTF-8)::

    {"outcome": "completed" | "passivated" | "failed" | "fenced",
     "runId": str | null,          # the run this process ended on (a resumed run's *new* id)
     "turn": int,                  # completed tool rounds of that run (LoopCheckpoint.turn)
     "usage": {"promptTokens": int, "completionTokens": int, "totalTokens": int},
     "reason": str | null,         # why: passivation reason, error message, or null
     "resultText": str | null,     # the agent's final text, truncated with a trailing "…"
     "resumedFrom": str | null,    # the run ``runId`` resumed (lineage), null for a fresh run
     "code": str}                  # only for a failure the operator reports by name:
                                   # "ToolSandboxUnavailable" (no Landlock, toolSandbox Required),
                                   # "StoreFull" / "StoreUnavailable" (:data:`STORE_CODES`)

Exit codes (:data:`EXIT_CODES`): 0 for ``completed`` and ``passivated``, 1 for ``failed`` (2 when
the failure is bad input: environment or options file), 3 for ``fenced``.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any, Final, Literal, get_args

from pydantic import AliasChoices, BaseModel, ConfigDict, Field, ValidationError

Outcome = Literal["completed", "passivated", "failed", "fenced"]

#: Every outcome, for validation and tables.
OUTCOMES: tuple[Outcome, ...] = get_args(Outcome)

#: Kubernetes truncates termination messages to 4096 bytes (``TerminationMessagePath`` docs).
TERMINATION_MESSAGE_LIMIT = 4096

#: Process exit code per outcome (docs/architecture.md §5: 0 for completed and passivated).
EXIT_CODES: Mapping[Outcome, int] = {"completed": 0, "passivated": 0, "failed": 1, "fenced": 3}

#: Exit code for ``failed`` caused by unusable input (environment, options file).
EXIT_BAD_INPUT = 2

_ELLIPSIS = "…"

STORE_FULL: Final = "StoreFull"
"""Code of a ``failed`` end caused by a store volume out of space or quota (``ENOSPC``,
``EDQUOT``): what the run did is durable up to its last committed round, the rest (also a run's
end) could not be saved. The operator reports it as the session's reason and places the session
again after a delay; the replacement resumes from the last committed round once space is back."""

STORE_UNAVAILABLE: Final = "StoreUnavailable"
"""Code of a ``failed`` end caused by any other failure of the store volume (``EIO``, ``EROFS``,
``ESTALE``, a lost mount, a filesystem that lacks a property the store needs): handled like
:data:`STORE_FULL`."""

#: The codes of a store failure, in the termination message and as the session's reasons.
STORE_CODES: Final = (STORE_FULL, STORE_UNAVAILABLE)


class Usage(BaseModel):
    """Cumulative token usage of a run (carried forward across ``resume_run``); counts of tokens.

    Reads both casings (``prompt_tokens`` and ``promptTokens``); writes camelCase
    (:meth:`to_json`), the shape of the termination message and ``/v1/state``.
    """

    model_config = ConfigDict(extra="ignore", populate_by_name=True, frozen=True)

    prompt_tokens: int = Field(0, validation_alias=AliasChoices("prompt_tokens", "promptTokens"))
    completion_tokens: int = Field(
        0, validation_alias=AliasChoices("completion_tokens", "completionTokens")
    )
    total_tokens: int = Field(0, validation_alias=AliasChoices("total_tokens", "totalTokens"))

    @classmethod
    def from_mapping(cls, usage: Mapping[str, Any] | None) -> Usage:
        """Accept the runtime's snake_case dict (``prompt_tokens``...) or camelCase; junk → 0,
        a missing total → prompt + completion."""
        if not usage:
            return cls()

        def pick(*keys: str) -> int:
            for key in keys:
                value = usage.get(key)
                if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
                    return value
            return 0

        prompt = pick("prompt_tokens", "promptTokens")
        completion = pick("completion_tokens", "completionTokens")
        total = pick("total_tokens", "totalTokens") or prompt + completion
        return cls(prompt_tokens=prompt, completion_tokens=completion, total_tokens=total)

    def to_json(self) -> dict[str, int]:
        """``{"promptTokens", "completionTokens", "totalTokens"}``."""
        return {
            "promptTokens": self.prompt_tokens,
            "completionTokens": self.completion_tokens,
            "totalTokens": self.total_tokens,
        }


class TerminationMessage(BaseModel):
    """What a session process reports when it ends: written by the runtime (:func:`render`),
    read by the operator from ``state.terminated.message`` (:meth:`parse`).

    Reading is lenient (unknown keys ignored, ``resultText``/``text``/``result`` accepted) so an
    older or newer runtime's message still reads; ``turn`` and ``usage`` are None when absent.
    ``bad_input`` is the writer's own and never on the wire; :attr:`exit_code` derives from it.
    """

    model_config = ConfigDict(extra="ignore", populate_by_name=True, frozen=True)

    outcome: Outcome
    """completed, passivated, failed or fenced."""
    run_id: str | None = Field(None, validation_alias=AliasChoices("runId", "run_id"))
    """The run this process ended on (a resumed run's *new* id)."""
    turn: int | None = None
    """Completed tool rounds of that run (``LoopCheckpoint.turn``)."""
    usage: Usage | None = None
    """Cumulative usage."""
    reason: str | None = None
    """Why: passivation reason, error message, or None."""
    result_text: str | None = Field(
        None, validation_alias=AliasChoices("resultText", "text", "result", "result_text")
    )
    """The agent's final text (truncated by :func:`render` to fit the 4096-byte limit)."""
    resumed_from: str | None = Field(
        None, validation_alias=AliasChoices("resumedFrom", "resumed_from")
    )
    """The run ``run_id`` resumed (lineage); None for a fresh run."""
    code: str | None = None
    """For a failure the operator reports by name: ``ToolSandboxUnavailable``, or one of
    :data:`STORE_CODES`."""
    bad_input: bool = Field(False, exclude=True)
    """Writer only: the failure is unusable input (environment, options file) — exit code 2."""

    @property
    def exit_code(self) -> int:
        """0 completed/passivated, 1 failed (2 if bad input), 3 fenced."""
        if self.outcome == "failed" and self.bad_input:
            return EXIT_BAD_INPUT
        return EXIT_CODES[self.outcome]

    def to_json(self) -> dict[str, Any]:
        """The untruncated object (see the module docstring for the shape)."""
        return {
            "outcome": self.outcome,
            "runId": self.run_id,
            "turn": self.turn or 0,
            "usage": (self.usage or Usage()).to_json(),
            "reason": self.reason,
            "resultText": self.result_text,
            "resumedFrom": self.resumed_from,
        } | ({"code": self.code} if self.code else {})

    @classmethod
    def parse(cls, message: str) -> TerminationMessage | None:
        """The message from a pod's ``state.terminated.message``; None when it is empty, not
        JSON or not a termination message (a container that died before writing one)."""
        try:
            return cls.model_validate(json.loads(message)) if message else None
        except (ValueError, ValidationError):
            return None


def _encode(obj: Mapping[str, Any]) -> bytes:
    return json.dumps(obj, ensure_ascii=False, separators=(",", ":")).encode("utf-8")


def _shrink(obj: dict[str, Any], key: str, limit: int) -> None:
    """Cut ``obj[key]`` (a str) to the longest prefix + "…" whose encoding fits ``limit`` bytes."""
    text = obj.get(key)
    if not isinstance(text, str):
        return
    lo, hi = 0, len(text)  # invariant: text[:lo] + "…" fits, except possibly lo == 0
    while lo < hi:
        mid = (lo + hi + 1) // 2
        obj[key] = text[:mid] + _ELLIPSIS
        if len(_encode(obj)) <= limit:
            lo = mid
        else:
            hi = mid - 1
    obj[key] = text[:lo] + _ELLIPSIS


def render(message: TerminationMessage, limit: int = TERMINATION_MESSAGE_LIMIT) -> str:
    """Encode ``message`` as compact JSON of at most ``limit`` UTF-8 bytes.

    ``resultText`` is truncated first; if the rest alone is still too big (a huge error message),
    ``reason`` is truncated too. A truncated string ends with "…". The result always parses.
    """
    obj = message.to_json()
    if len(_encode(obj)) > limit:
        _shrink(obj, "resultText", limit)
    if len(_encode(obj)) > limit:
        obj["resultText"] = None
        _shrink(obj, "reason", limit)
    return _encode(obj).decode("utf-8")


def validate(obj: Mapping[str, Any]) -> list[str]:
    """Problems with a parsed termination object (empty list = valid). Used by tests and tools."""
    problems: list[str] = []
    if obj.get("outcome") not in OUTCOMES:
        problems.append(f"outcome {obj.get('outcome')!r} not in {OUTCOMES}")
    if not isinstance(obj.get("turn"), int):
        problems.append("turn is not an int")
    usage = obj.get("usage")
    if not isinstance(usage, dict) or set(usage) != {
        "promptTokens",
        "completionTokens",
        "totalTokens",
    }:
        problems.append("usage must have exactly promptTokens, completionTokens, totalTokens")
    for key in ("runId", "reason", "resultText"):
        if key not in obj or not (obj[key] is None or isinstance(obj[key], str)):
            problems.append(f"{key} must be present and a string or null")
    return problems
