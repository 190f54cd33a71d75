"""The built-in tools, confined to the workspace: read, write, edit, patch, ls, glob, grep, bash.

Owned by ``session_runtime.tools``; called by the ``DirectExecutor`` (in the session pod) and
by LaneWorkers (``run_tool`` on the model's raw arguments). Argument names follow
RUNTIME-CONTRACT "Tools". A tool's own failure (missing file, edit target not found, non-zero
exit, path escape) is returned as a :class:`ToolResult`, never raised.
"""

from __future__ import annotations

import asyncio
import contextlib
import fnmatch
import os
import re
import signal
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from session_runtime.tools.base import ToolResult
from session_runtime.tools.patch import PatchError, apply_unified_diff
from session_runtime.tools.paths import PathEscapeError, relative_to_workspace, resolve_in_workspace
from session_runtime.tools.schemas import TOOL_DEFINITIONS

#: Largest tool output handed to the model, in characters; the rest is cut with a note.
OUTPUT_CAP_CHARS = 30_000
#: bash default timeout in milliseconds (A3S default).
BASH_DEFAULT_TIMEOUT_MS = 120_000
READ_DEFAULT_LIMIT = 2000
GREP_MAX_MATCHES = 500
GLOB_MAX_RESULTS = 1000


class ToolArgumentError(ValueError):
    """The arguments do not fit the tool's schema."""


_SCHEMAS: dict[str, dict[str, Any]] = {
    str(t["function"]["name"]): t["function"]["parameters"] for t in TOOL_DEFINITIONS
}


def check_arguments(name: str, args: dict[str, Any]) -> None:
    """Raise ToolArgumentError for unknown or missing arguments or a wrong basic type."""
    schema = _SCHEMAS[name]
    props: dict[str, Any] = schema["properties"]
    unknown = sorted(set(args) - set(props))
    if unknown:
        raise ToolArgumentError(f"unknown argument(s) for {name}: {', '.join(unknown)}")
    missing = [k for k in schema["required"] if k not in args]
    if missing:
        raise ToolArgumentError(f"missing required argument(s) for {name}: {', '.join(missing)}")
    kinds = {"string": str, "integer": int, "boolean": bool}
    for key, value in args.items():
        want = kinds[props[key]["type"]]
        if value is None:
            continue
        if not isinstance(value, want) or (want is int and isinstance(value, bool)):
            raise ToolArgumentError(f"argument {key} of {name} must be {props[key]['type']}")


def cap_output(text: str, cap: int = OUTPUT_CAP_CHARS) -> str:
    """Cut ``text`` to ``cap`` characters with a note saying how much was dropped."""
    if len(text) <= cap:
        return text
    return text[:cap] + f"\n... [output truncated: {len(text) - cap} more characters]"


Outcome = tuple[str, int]  # (output, exit_code); exit_code != 0 means the tool failed


def _read(ws: str, a: dict[str, Any]) -> Outcome:
    path = resolve_in_workspace(ws, a["file_path"])
    if os.path.isdir(path):
        return f"{a['file_path']} is a directory", 1
    offset = max(int(a.get("offset") or 1), 1)
    limit = int(a.get("limit") or READ_DEFAULT_LIMIT)
    with open(path, encoding="utf-8", errors="replace") as fh:
        lines = fh.read().splitlines()
    chunk = lines[offset - 1 : offset - 1 + limit]
    return "\n".join(f"{i:6d}\t{line}" for i, line in enumerate(chunk, start=offset)), 0


def _write(ws: str, a: dict[str, Any]) -> Outcome:
    path = resolve_in_workspace(ws, a["file_path"])
    os.makedirs(os.path.dirname(path), exist_ok=True)
    content = str(a["content"])
    with open(path, "w", encoding="utf-8") as fh:
        fh.write(content)
    return f"Wrote {len(content.encode())} bytes to {relative_to_workspace(ws, path)}", 0


def _edit(ws: str, a: dict[str, Any]) -> Outcome:
    path = resolve_in_workspace(ws, a["file_path"])
    with open(path, encoding="utf-8") as fh:
        text = fh.read()
    old, new = str(a["old_string"]), str(a["new_string"])
    if not old:
        return "old_string must not be empty", 1
    count = text.count(old)
    if count == 0:
        return f"old_string not found in {a['file_path']}", 1
    if count > 1 and not a.get("replace_all"):
        return (
            f"old_string occurs {count} times in {a['file_path']}; "
            "make it unique or set replace_all",
            1,
        )
    text = text.replace(old, new) if a.get("replace_all") else text.replace(old, new, 1)
    with open(path, "w", encoding="utf-8") as fh:
        fh.write(text)
    return f"Replaced {count if a.get('replace_all') else 1} occurrence(s) in {a['file_path']}", 0


def _patch(ws: str, a: dict[str, Any]) -> Outcome:
    path = resolve_in_workspace(ws, a["file_path"])
    text = ""
    if os.path.exists(path):
        with open(path, encoding="utf-8") as fh:
            text = fh.read()
    try:
        new, hunks = apply_unified_diff(text, str(a["diff"]))
    except PatchError as exc:
        return f"patch not applied to {a['file_path']}: {exc}", 1
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w", encoding="utf-8") as fh:
        fh.write(new)
    return f"Applied {hunks} hunk(s) to {a['file_path']}", 0


def _ls(ws: str, a: dict[str, Any]) -> Outcome:
    path = resolve_in_workspace(ws, a.get("path"))
    if not os.path.isdir(path):
        return f"{a.get('path')} is not a directory", 1
    names = sorted(e.name + ("/" if e.is_dir() else "") for e in os.scandir(path))
    return "\n".join(names), 0


def _check_pattern(pattern: str) -> None:
    if os.path.isabs(pattern) or ".." in Path(pattern).parts:
        raise PathEscapeError(f"Pattern '{pattern}' leaves the workspace; access refused")


def _inside(ws_real: str, p: Path) -> bool:
    real = os.path.realpath(p)
    return real == ws_real or real.startswith(ws_real + os.sep)


def _glob(ws: str, a: dict[str, Any]) -> Outcome:
    pattern = str(a["pattern"])
    _check_pattern(pattern)
    base = Path(resolve_in_workspace(ws, a.get("path")))
    ws_real = os.path.realpath(ws)
    found = sorted(
        relative_to_workspace(ws, str(p)) for p in base.glob(pattern) if _inside(ws_real, p)
    )
    if len(found) > GLOB_MAX_RESULTS:
        found = [*found[:GLOB_MAX_RESULTS], f"... {len(found) - GLOB_MAX_RESULTS} more"]
    return "\n".join(found) if found else "No files found", 0


def _grep(ws: str, a: dict[str, Any]) -> Outcome:
    flags = re.IGNORECASE if a.get("-i") else 0
    try:
        rx = re.compile(str(a["pattern"]), flags)
    except re.error as exc:
        return f"invalid regular expression: {exc}", 1
    base = resolve_in_workspace(ws, a.get("path"))
    ctx = max(int(a.get("context") or 0), 0)
    file_glob = a.get("glob")
    ws_real = os.path.realpath(ws)
    files: list[str] = []
    if os.path.isfile(base):
        files = [base]
    else:
        for root, dirs, names in os.walk(base):
            dirs[:] = sorted(d for d in dirs if not d.startswith(".git"))
            for n in sorted(names):
                if file_glob and not fnmatch.fnmatch(n, str(file_glob)):
                    continue
                files.append(os.path.join(root, n))
    out: list[str] = []
    for f in files:
        if not _inside(ws_real, Path(f)):
            continue
        try:
            with open(f, encoding="utf-8") as fh:
                lines = fh.read().splitlines()
        except (UnicodeDecodeError, OSError):
            continue
        rel = relative_to_workspace(ws, f)
        for i, line in enumerate(lines):
            if rx.search(line):
                lo, hi = max(i - ctx, 0), min(i + ctx + 1, len(lines))
                for j in range(lo, hi):
                    sep = ":" if j == i else "-"
                    out.append(f"{rel}{sep}{j + 1}{sep}{lines[j]}")
                if len(out) >= GREP_MAX_MATCHES:
                    out.append("... more matches omitted")
                    return "\n".join(out), 0
    return ("\n".join(out), 0) if out else ("No matches", 1)


async def _bash(cwd: str, a: dict[str, Any]) -> Outcome:
    timeout_ms = int(a.get("timeout") or BASH_DEFAULT_TIMEOUT_MS)
    proc = await asyncio.create_subprocess_exec(
        "bash",
        "-c",
        str(a["command"]),
        cwd=cwd,
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
        start_new_session=True,
    )
    try:
        out, _ = await asyncio.wait_for(proc.communicate(), timeout_ms / 1000)
    except TimeoutError:
        _kill_group(proc)
        await proc.wait()
        return f"Command timed out after {timeout_ms} ms", 124
    except asyncio.CancelledError:
        _kill_group(proc)
        await asyncio.shield(proc.wait())
        raise
    text = out.decode("utf-8", errors="replace")
    code = proc.returncode if proc.returncode is not None else -1
    return text, code


def _kill_group(proc: asyncio.subprocess.Process) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)


def _real(path: str) -> str:
    return os.path.realpath(path)


SyncTool = Callable[[str, dict[str, Any]], Outcome]
_SYNC_TOOLS: dict[str, SyncTool] = {
    "read": _read,
    "write": _write,
    "edit": _edit,
    "patch": _patch,
    "ls": _ls,
    "glob": _glob,
    "grep": _grep,
}
_ASYNC_TOOLS: dict[str, Callable[[str, dict[str, Any]], Awaitable[Outcome]]] = {"bash": _bash}


async def run_tool(
    name: str, arguments: dict[str, Any], workspace: str, call_id: str
) -> ToolResult:
    """Run built-in tool ``name`` with the model's ``arguments`` inside ``workspace``.

    Returns a ToolResult (``is_error`` for refusals and failures; bash keeps its exit code and is
    an error only when it could not run or timed out). Cancellation kills a running bash process
    group. Output is capped at :data:`OUTPUT_CAP_CHARS`.
    """

    def result(output: str, code: int, error: bool) -> ToolResult:
        return ToolResult(call_id, name, cap_output(output), exit_code=code, is_error=error)

    if name not in _SYNC_TOOLS and name not in _ASYNC_TOOLS:
        return result(f"Unknown tool '{name}'", 1, True)
    try:
        check_arguments(name, arguments)
        if name in _ASYNC_TOOLS:
            output, code = await _ASYNC_TOOLS[name](_real(workspace), arguments)
            return result(output, code, code == 124)
        output, code = _SYNC_TOOLS[name](workspace, arguments)
        return result(output, code, code != 0 and name != "grep")
    except PathEscapeError as exc:
        return result(f"Error: {exc}", 1, True)
    except ToolArgumentError as exc:
        return result(f"Error: {exc}", 1, True)
    except FileNotFoundError as exc:
        return result(f"Error: file not found: {exc.filename}", 1, True)
    except OSError as exc:
        return result(f"Error: {exc.strerror or exc}", 1, True)
