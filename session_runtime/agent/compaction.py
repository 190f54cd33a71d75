"""Token estimate and auto-compaction of the conversation (pure functions).

Owned by ``session_runtime.agent``; the loop calls :func:`estimate_tokens` before every LLM call
(for the budget guard and the compaction trigger) and :func:`compact_messages` when
``auto_compact`` is on and the estimate exceeds ``auto_compact_threshold`` of the context window.

Estimate (docs/architecture.md §10 "Budget guard"): about 4 bytes of JSON per token over the system
prompt, the messages and the tool definitions.

Compaction (Berth's deterministic variant, so replays stay byte-identical): keep the system
message and the most recent messages that fit in half the threshold budget, starting at a safe
boundary (a user message or an assistant message, never an orphan tool result); replace what lies
between with one user message carrying a digest of the removed messages.
"""

from __future__ import annotations

import json
import math
from typing import Any

DIGEST_LINE_CHARS = 160
DIGEST_MAX_CHARS = 4000


def estimate_tokens(
    messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None = None
) -> int:
    """About 4 bytes per token over messages (system prompt included) and tool definitions."""
    size = len(json.dumps(messages, ensure_ascii=False, separators=(",", ":")).encode())
    if tools:
        size += len(json.dumps(tools, ensure_ascii=False, separators=(",", ":")).encode())
    return math.ceil(size / 4)


def should_compact(estimated: int, context_window: int, threshold: float) -> bool:
    """True when ``estimated`` tokens exceed ``threshold`` (0..1] of ``context_window``."""
    return estimated > context_window * threshold


def _digest_line(msg: dict[str, Any]) -> str:
    role = msg.get("role", "?")
    if role == "assistant" and msg.get("tool_calls"):
        names = ", ".join(
            f"{c['function']['name']}({c['function'].get('arguments', '')})"
            for c in msg["tool_calls"]
        )
        line = f"assistant called {names}"
    else:
        content = msg.get("content")
        text = content if isinstance(content, str) else json.dumps(content)
        line = f"{role}: {text}"
    line = " ".join(line.split())
    return line[:DIGEST_LINE_CHARS] + ("..." if len(line) > DIGEST_LINE_CHARS else "")


def _safe_start(messages: list[dict[str, Any]], index: int) -> int:
    """The first index >= ``index`` whose message does not depend on an earlier one."""
    while index < len(messages) and messages[index].get("role") == "tool":
        index += 1
    return index


def compact_messages(
    messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None, target_tokens: int
) -> tuple[list[dict[str, Any]], int]:
    """Compact ``messages`` (``messages[0]`` is the system message) toward ``target_tokens``.

    Returns (new messages, number of messages removed); (messages, 0) when nothing can go.
    """
    if len(messages) < 3:
        return messages, 0
    budget = max(target_tokens - estimate_tokens(messages[:1], tools), 0)
    start = len(messages)
    used = 0
    while start > 1:
        cost = estimate_tokens([messages[start - 1]])
        if used + cost > budget:
            break
        used += cost
        start -= 1
    start = _safe_start(messages, max(start, 2))
    if start >= len(messages):
        # Even the newest message is too big: keep from the last safe boundary anyway.
        start = len(messages) - 1
        while start > 1 and messages[start].get("role") == "tool":
            start -= 1
    removed = messages[1:start]
    if not removed:
        return messages, 0
    lines: list[str] = []
    total = 0
    for msg in removed:
        line = "- " + _digest_line(msg)
        if total + len(line) > DIGEST_MAX_CHARS:
            lines.append(f"- ... ({len(removed) - len(lines)} more messages)")
            break
        lines.append(line)
        total += len(line)
    note = {
        "role": "user",
        "content": (
            f"[Context compacted: {len(removed)} earlier messages were removed to fit the "
            "context window. Digest of what they contained:]\n" + "\n".join(lines)
        ),
    }
    return [messages[0], note, *messages[start:]], len(removed)
