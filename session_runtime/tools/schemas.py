"""OpenAI tool definitions of the built-in tools (argument names from docs/architecture.md §10
"Tools").

Owned by ``session_runtime.tools``; the agent loop sends :func:`tool_definitions` with every LLM
request. Every schema sets ``additionalProperties: false`` as the framework does.
"""

from __future__ import annotations

from typing import Any


def _fn(name: str, description: str, props: dict[str, Any], required: list[str]) -> dict[str, Any]:
    return {
        "type": "function",
        "function": {
            "name": name,
            "description": description,
            "parameters": {
                "type": "object",
                "properties": props,
                "required": required,
                "additionalProperties": False,
            },
        },
    }


_S = {"type": "string"}
_I = {"type": "integer"}

TOOL_DEFINITIONS: list[dict[str, Any]] = [
    _fn(
        "read",
        "Read a text file of the workspace. Returns numbered lines.",
        {
            "file_path": _S,
            "offset": {**_I, "description": "first line, 1-based"},
            "limit": {**_I, "description": "number of lines (default 2000)"},
        },
        ["file_path"],
    ),
    _fn(
        "write",
        "Create or overwrite a file of the workspace.",
        {"file_path": _S, "content": _S},
        ["file_path", "content"],
    ),
    _fn(
        "edit",
        "Replace an exact string in a file. old_string must be unique unless replace_all.",
        {"file_path": _S, "old_string": _S, "new_string": _S, "replace_all": {"type": "boolean"}},
        ["file_path", "old_string", "new_string"],
    ),
    _fn(
        "patch",
        "Apply a unified diff (with @@ hunks) to one file of the workspace.",
        {"file_path": _S, "diff": _S},
        ["file_path", "diff"],
    ),
    _fn(
        "bash",
        "Run a shell command in the workspace. Returns output and exit code.",
        {"command": _S, "timeout": {**_I, "description": "milliseconds (default 120000)"}},
        ["command"],
    ),
    _fn(
        "glob",
        "Find files matching a glob pattern (e.g. **/*.py).",
        {"pattern": _S, "path": _S},
        ["pattern"],
    ),
    _fn(
        "grep",
        "Search file contents with a regular expression.",
        {
            "pattern": _S,
            "path": _S,
            "glob": _S,
            "context": _I,
            "-i": {"type": "boolean"},
        },
        ["pattern"],
    ),
    _fn("ls", "List a directory of the workspace.", {"path": _S}, []),
]


def tool_definitions() -> list[dict[str, Any]]:
    """The OpenAI ``tools`` list for the built-in tools (a fresh copy)."""
    return [dict(t) for t in TOOL_DEFINITIONS]


BUILTIN_TOOL_NAMES: frozenset[str] = frozenset(str(t["function"]["name"]) for t in TOOL_DEFINITIONS)
