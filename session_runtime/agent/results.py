"""Result shapes returned by ``Session.send``/``resume_run`` and ``Session.btw``."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True, slots=True)
class AgentResult:
    """What a run returns (A3S names): final ``text``, token usage of the run (cumulative across
    a resume), ``tool_calls_count``, plus Berth's ``run_id`` and ``turn`` (completed rounds)."""

    text: str
    prompt_tokens: int
    completion_tokens: int
    total_tokens: int
    tool_calls_count: int
    run_id: str
    turn: int

    @property
    def usage(self) -> dict[str, int]:
        """``{prompt_tokens, completion_tokens, total_tokens}``."""
        return {
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": self.completion_tokens,
            "total_tokens": self.total_tokens,
        }


@dataclass(frozen=True, slots=True)
class BtwResult:
    """Answer of a side question (``btw``) and the tokens it used; history is untouched."""

    answer: str
    usage: dict[str, int] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        """JSON-able form."""
        return {"answer": self.answer, "usage": dict(self.usage)}
