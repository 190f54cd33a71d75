"""Conversation messages between Berth's form and a3s-code-core 9.x's, or a refusal naming the
field that does not map.

Berth keeps OpenAI chat messages (``{role: system|user|assistant|tool, content, tool_calls,
tool_call_id}``, system message first; docs/architecture.md §10). a3s-code-core 9.x keeps
``Message {role: user|assistant, content: [ContentBlock]}`` with blocks ``text``, ``image``,
``tool_use {id, name, input}`` and ``tool_result {tool_use_id, content, is_error}`` (tool results
travel in a ``user`` message) and the system prompt in the session config. Text, tool calls with
JSON arguments, tool results and reasoning text map both ways; anything else raises
:class:`Unmapped` with the path of the field (``session.messages[3].content[1].type``).
"""

from __future__ import annotations

import json
from typing import Any

from session_runtime.errors import CheckpointError

_BERTH_KEYS = {"role", "content", "tool_calls", "tool_call_id", "reasoning_content"}
_CORE_KEYS = {"role", "content", "reasoning_content", "transcript_visibility"}


class Unmapped(CheckpointError):
    """A checkpoint holds something the other side cannot represent; ``field`` is its path."""

    def __init__(self, field: str, why: str) -> None:
        super().__init__(f"cannot carry {field} across SessionCheckpointExportV1: {why}")
        self.field = field


def _text_of_parts(content: Any, where: str) -> str:
    """Berth message content (a string or OpenAI text parts) as one string."""
    if content is None or isinstance(content, str):
        return content or ""
    if not isinstance(content, list):
        raise Unmapped(where, f"content of type {type(content).__name__}")
    texts = []
    for j, part in enumerate(content):
        if not isinstance(part, dict) or part.get("type") != "text":
            kind = part.get("type") if isinstance(part, dict) else type(part).__name__
            raise Unmapped(f"{where}[{j}].type", f"a {kind!r} part has no 9.x text form")
        texts.append(str(part.get("text", "")))
    return "".join(texts)


def _tool_use(call: Any, where: str) -> dict[str, Any]:
    if not isinstance(call, dict) or not isinstance(call.get("function"), dict):
        raise Unmapped(where, "a tool call without a function")
    fn = call["function"]
    try:
        args = json.loads(fn.get("arguments") or "{}")
    except ValueError as exc:
        raise Unmapped(f"{where}.function.arguments", f"arguments are not JSON ({exc})") from exc
    name = str(fn.get("name"))
    return {"type": "tool_use", "id": str(call.get("id")), "name": name, "input": args}


def _core_tool_result(m: dict[str, Any], at: str, out: list[dict[str, Any]]) -> None:
    """Append Berth tool message ``m`` as a ``tool_result`` block; consecutive results share
    one ``user`` message, as a3s-code-core writes them."""
    block = {
        "type": "tool_result",
        "tool_use_id": str(m.get("tool_call_id")),
        "content": _text_of_parts(m.get("content"), f"{at}.content"),
        "is_error": None,
    }
    if out and out[-1].get("_results"):
        out[-1]["content"].append(block)
    else:
        out.append({"role": "user", "content": [block], "_results": True})


def _core_message(m: dict[str, Any], at: str) -> dict[str, Any]:
    """A Berth user or assistant message as one a3s-code-core message."""
    text = _text_of_parts(m.get("content"), f"{at}.content")
    blocks: list[dict[str, Any]] = [{"type": "text", "text": text}] if text else []
    for j, call in enumerate(m.get("tool_calls") or []):
        blocks.append(_tool_use(call, f"{at}.tool_calls[{j}]"))
    msg: dict[str, Any] = {"role": m["role"], "content": blocks}
    if m.get("tool_calls"):
        msg["transcript_visibility"] = "wire"  # as a3s-code-core marks its own tool-call turns
    if m.get("reasoning_content"):
        msg["reasoning_content"] = m["reasoning_content"]
    return msg


def to_core(messages: list[dict[str, Any]], where: str) -> tuple[str | None, list[dict[str, Any]]]:
    """Berth messages → ``(system prompt, a3s-code-core messages)``; raises :class:`Unmapped`."""
    system: str | None = None
    out: list[dict[str, Any]] = []
    for i, m in enumerate(messages):
        at = f"{where}[{i}]"
        extra = sorted(set(m) - _BERTH_KEYS)
        if extra:
            raise Unmapped(f"{at}.{extra[0]}", "a3s-code-core messages have no such field")
        role = m.get("role")
        if role == "system" and i == 0:
            system = _text_of_parts(m.get("content"), f"{at}.content")
        elif role == "tool":
            _core_tool_result(m, at, out)
        elif role in ("user", "assistant"):
            out.append(_core_message(m, at))
        else:
            raise Unmapped(f"{at}.role", f"role {role!r} has no 9.x form here")
    for msg in out:
        msg.pop("_results", None)
    return system, out


def _result_text(content: Any, where: str) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return _text_of_parts(content, where)
    raise Unmapped(where, f"tool result content of type {type(content).__name__}")


def _berth_result(b: dict[str, Any], at: str) -> dict[str, Any]:
    bad = sorted(set(b) - {"type", "tool_use_id", "content", "is_error"})
    if bad:
        raise Unmapped(f"{at}.{bad[0]}", "Berth tool results carry no such field")
    text = _result_text(b.get("content"), f"{at}.content")
    return {"role": "tool", "tool_call_id": b["tool_use_id"], "content": text}


def _from_core_message(m: dict[str, Any], at: str) -> list[dict[str, Any]]:
    extra = sorted(set(m) - _CORE_KEYS)
    if extra:
        raise Unmapped(f"{at}.{extra[0]}", "Berth's messages have no such field")
    texts: list[str] = []
    calls: list[dict[str, Any]] = []
    out: list[dict[str, Any]] = []
    for j, b in enumerate(m.get("content") or []):
        kind = b.get("type")
        if kind == "text":
            texts.append(str(b.get("text", "")))
        elif kind == "tool_use":
            fn = {"name": b["name"], "arguments": json.dumps(b.get("input", {}))}
            calls.append({"id": b["id"], "type": "function", "function": fn})
        elif kind == "tool_result":
            out.append(_berth_result(b, f"{at}.content[{j}]"))
        else:
            raise Unmapped(f"{at}.content[{j}].type", f"a {kind!r} block has no Berth form")
    if texts or calls or not out:
        content = "".join(texts)
        msg: dict[str, Any] = {"role": m["role"], "content": content or None}
        if m["role"] == "user":
            msg["content"] = content
        if calls:
            msg["tool_calls"] = calls
        if m.get("reasoning_content"):
            msg["reasoning_content"] = m["reasoning_content"]
        out.append(msg)
    return out


def to_berth(
    messages: list[dict[str, Any]], where: str, system: str | None = None
) -> list[dict[str, Any]]:
    """a3s-code-core messages (and the session's system prompt) → Berth messages; raises
    :class:`Unmapped`."""
    out: list[dict[str, Any]] = [{"role": "system", "content": system}] if system else []
    for i, m in enumerate(messages):
        if m.get("role") not in ("user", "assistant"):
            raise Unmapped(f"{where}[{i}].role", f"role {m.get('role')!r}")
        out.extend(_from_core_message(m, f"{where}[{i}]"))
    return out
