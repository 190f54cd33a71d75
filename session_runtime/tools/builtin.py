"""The built-in tools, confined to the workspace: read, write, edit, patch, ls, glob, grep, bash.

Owned by ``session_runtime.tools``; called by the ``DirectExecutor`` (in the session pod) and
by LaneWorkers (``run_tool`` on the model's raw arguments). Argument names follow
docs/architecture.md §10 "Tools". A tool's own failure (missing file, edit target not found,
non-zero exit, path escape) is returned as a :class:`ToolResult`, never raised.
"""

from __future__ import annotations

import asyncio
import contextlib
import fnmatch
import json
import logging
import os
import signal
import stat
import sys
import tempfile
from collections.abc import Awaitable, Callable
from typing import Any

from session_runtime.tools import safefs, sandbox
from session_runtime.tools.base import ToolResult
from session_runtime.tools.patch import PatchError, apply_unified_diff
from session_runtime.tools.paths import PathEscapeError
from session_runtime.tools.safefs import Workspace
from session_runtime.tools.sandbox import tool_env
from session_runtime.tools.schemas import TOOL_DEFINITIONS

log = logging.getLogger(__name__)

#: Largest tool output handed to the model, in characters; the rest is cut with a note.
OUTPUT_CAP_CHARS = 30_000
#: bash default timeout in milliseconds (A3S default).
BASH_DEFAULT_TIMEOUT_MS = 120_000
READ_DEFAULT_LIMIT = 2000
GREP_MAX_MATCHES = 500
GLOB_MAX_RESULTS = 1000
MAX_GLOB_SEGMENTS = 64
#: Bytes read from one file (read, grep) and largest file edit/patch rewrite; env override.
MAX_FILE_BYTES = 8 * 1024 * 1024
MAX_FILE_BYTES_ENV = "BERTH_TOOL_MAX_FILE_BYTES"
#: Hard bound of one grep (its child process is killed), milliseconds; env override.
GREP_TIMEOUT_MS = 30_000
GREP_TIMEOUT_ENV = "BERTH_TOOL_GREP_TIMEOUT_MS"
#: A file tool's thread is abandoned after this many milliseconds (the per-tool timeout, when
#: set, is usually shorter); env override.
FILE_TOOL_TIMEOUT_MS = 120_000
FILE_TOOL_TIMEOUT_ENV = "BERTH_TOOL_FILE_TIMEOUT_MS"


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


def _limit(env: str, default: int) -> int:
    try:
        return max(int(os.environ.get(env, default)), 1)
    except ValueError:
        return default


def max_file_bytes() -> int:
    """Bytes read from one file by read/grep and largest file edit/patch will rewrite
    (:data:`MAX_FILE_BYTES_ENV`, default :data:`MAX_FILE_BYTES`)."""
    return _limit(MAX_FILE_BYTES_ENV, MAX_FILE_BYTES)


def _read(ws: Workspace, a: dict[str, Any]) -> Outcome:
    fd, rel = ws.open(a["file_path"], safefs.READ_FLAGS)
    cap = max_file_bytes()
    try:
        if stat.S_ISDIR(os.fstat(fd).st_mode):
            return f"{a['file_path']} is a directory", 1
        st = safefs.check_regular(fd, rel)
        data = safefs.read_capped(fd, cap)
    finally:
        os.close(fd)
    offset = max(int(a.get("offset") or 1), 1)
    limit = int(a.get("limit") or READ_DEFAULT_LIMIT)
    lines = data.decode("utf-8", errors="replace").splitlines()
    chunk = lines[offset - 1 : offset - 1 + limit]
    text = "\n".join(f"{i:6d}\t{line}" for i, line in enumerate(chunk, start=offset))
    if st.st_size > cap:
        text += f"\n[{rel} has {st.st_size} bytes; only the first {cap} bytes were read]"
    return text, 0


def _write(ws: Workspace, a: dict[str, Any]) -> Outcome:
    fd, rel = ws.open(a["file_path"], safefs.WRITE_FLAGS, create_dirs=True)
    content = str(a["content"]).encode()
    try:
        safefs.check_regular(fd, rel)
        safefs.rewrite(fd, content)
    finally:
        os.close(fd)
    return f"Wrote {len(content)} bytes to {rel}", 0


def _open_for_rewrite(ws: Workspace, path: str, *, create: bool) -> tuple[int, str, str]:
    """Open ``path`` read-write; return (fd, rel, text). Refuses files over the size limit."""
    flags = safefs.WRITE_FLAGS if create else safefs.WRITE_FLAGS & ~os.O_CREAT
    fd, rel = ws.open(path, flags, create_dirs=create)
    try:
        st = safefs.check_regular(fd, rel)
        cap = max_file_bytes()
        if st.st_size > cap:
            raise safefs.UnsafeFileError(
                f"{rel} has {st.st_size} bytes; files over {cap} bytes are not edited"
            )
        return fd, rel, safefs.read_capped(fd, cap).decode("utf-8")
    except BaseException:
        os.close(fd)
        raise


def _edit(ws: Workspace, a: dict[str, Any]) -> Outcome:
    old, new = str(a["old_string"]), str(a["new_string"])
    if not old:
        return "old_string must not be empty", 1
    fd, _rel, text = _open_for_rewrite(ws, a["file_path"], create=False)
    try:
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
        safefs.rewrite(fd, text.encode())
    finally:
        os.close(fd)
    return f"Replaced {count if a.get('replace_all') else 1} occurrence(s) in {a['file_path']}", 0


def _patch(ws: Workspace, a: dict[str, Any]) -> Outcome:
    try:
        fd, _rel, text = _open_for_rewrite(ws, a["file_path"], create=False)
    except FileNotFoundError:
        fd, text = -1, ""
    try:
        try:
            new, hunks = apply_unified_diff(text, str(a["diff"]))
        except PatchError as exc:
            return f"patch not applied to {a['file_path']}: {exc}", 1
        if fd < 0:  # a new file: created only once the patch applies
            fd, _rel, _ = _open_for_rewrite(ws, a["file_path"], create=True)
        safefs.rewrite(fd, new.encode())
    finally:
        if fd >= 0:
            os.close(fd)
    return f"Applied {hunks} hunk(s) to {a['file_path']}", 0


def _ls(ws: Workspace, a: dict[str, Any]) -> Outcome:
    try:
        fd, _rel = ws.open(a.get("path"), safefs.DIR_FLAGS)
    except NotADirectoryError:
        return f"{a.get('path')} is not a directory", 1
    try:
        with os.scandir(fd) as it:
            names = sorted(
                e.name + ("@" if e.is_symlink() else "/" if e.is_dir(follow_symlinks=False) else "")
                for e in it
            )
    finally:
        os.close(fd)
    return "\n".join(names), 0


def glob_parts(pattern: str) -> list[str]:
    """Split a glob pattern into segments; raises PathEscapeError for absolute/``..``/empty."""
    if not pattern.strip():
        raise ToolArgumentError("glob pattern must not be empty")
    parts = [p for p in pattern.split("/") if p not in ("", ".")]
    if pattern.startswith("/") or ".." in parts or "\x00" in pattern:
        raise PathEscapeError(f"Pattern '{pattern}' leaves the workspace; access refused")
    if len(parts) > MAX_GLOB_SEGMENTS:
        raise ToolArgumentError(f"glob pattern has more than {MAX_GLOB_SEGMENTS} segments")
    return parts or ["*"]


def glob_match(parts: list[str], pat: list[str]) -> bool:
    """True if path ``parts`` match pattern segments ``pat`` (``**`` = any number of segments)."""
    memo: dict[tuple[int, int], bool] = {}

    def m(i: int, j: int) -> bool:
        key = (i, j)
        if key not in memo:
            if j == len(pat):
                memo[key] = i == len(parts)
            elif pat[j] == "**":
                memo[key] = m(i, j + 1) or (i < len(parts) and m(i + 1, j))
            else:
                memo[key] = (
                    i < len(parts) and fnmatch.fnmatchcase(parts[i], pat[j]) and m(i + 1, j + 1)
                )
        return memo[key]

    return m(0, 0)


def _could_descend(parts: list[str], pat: list[str]) -> bool:
    for i, part in enumerate(parts):
        if i >= len(pat):
            return False
        if pat[i] == "**":
            return True
        if not fnmatch.fnmatchcase(part, pat[i]):
            return False
    return len(parts) < len(pat)


def _glob(ws: Workspace, a: dict[str, Any]) -> Outcome:
    pat = glob_parts(str(a["pattern"]))
    fd, rel = ws.open(a.get("path"), safefs.DIR_FLAGS)
    base_len = 0 if rel == "." else len(rel.split("/"))
    found: list[str] = []
    try:
        walk = safefs.Walk(fd, rel, descend=lambda p: _could_descend(p, pat))
        for path, _kind, _dir_fd, _name in walk:
            if glob_match(path.split("/")[base_len:], pat):
                found.append(path)
                if len(found) > GLOB_MAX_RESULTS:
                    break
    finally:
        os.close(fd)
    found.sort()
    if len(found) > GLOB_MAX_RESULTS:
        found = [*found[:GLOB_MAX_RESULTS], f"... more than {GLOB_MAX_RESULTS} files"]
    if walk.stopped:
        found.append(f"[{walk.stopped}]")
    return "\n".join(found) if found else "No files found", 0


#: Runs a stdlib-only module of this package in a fresh ``python -I -S`` without importing the
#: package (stub package modules point at the source directory): ~10 ms instead of ~500 ms.
_CHILD_BOOT = (
    "import runpy, sys, types\n"
    "root = sys.argv.pop(1)\n"
    "for name, sub in (('session_runtime', ''), ('session_runtime.tools', '/tools')):\n"
    "    m = types.ModuleType(name); m.__path__ = [root + sub]; sys.modules[name] = m\n"
    "runpy.run_module(sys.argv.pop(1), run_name='__main__', alter_sys=True)\n"
)
_PKG_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


async def _grep(workspace: str, a: dict[str, Any]) -> Outcome:
    request = {
        "pattern": str(a["pattern"]),
        "ignore_case": bool(a.get("-i")),
        "path": a.get("path"),
        "workspace": workspace,
        "glob": a.get("glob"),
        "context": max(int(a.get("context") or 0), 0),
        "max_bytes": max_file_bytes(),
        "max_matches": GREP_MAX_MATCHES,
    }
    timeout_ms = _limit(GREP_TIMEOUT_ENV, GREP_TIMEOUT_MS)
    ws_fd = os.open(workspace, safefs.DIR_FLAGS | os.O_CLOEXEC)
    with tempfile.TemporaryDirectory(prefix="berth-grep-") as tmp:
        try:
            proc = await asyncio.create_subprocess_exec(
                sys.executable,
                "-I",
                "-S",
                "-c",
                _CHILD_BOOT,
                _PKG_ROOT,
                "session_runtime.tools.grepchild",
                str(ws_fd),
                stdin=asyncio.subprocess.PIPE,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE,
                pass_fds=(ws_fd,),
                env=tool_env(workspace, tmp),
                start_new_session=True,
            )
        finally:
            os.close(ws_fd)
        out, err = await _communicate(proc, json.dumps(request).encode(), timeout_ms)
    if out is None:
        return f"grep timed out after {timeout_ms} ms (is the pattern too costly?)", 124
    try:
        reply = json.loads(out)
    except ValueError:
        return f"grep failed: {err.decode('utf-8', 'replace')[-2000:]}", 2
    if "error" in reply:
        if reply.get("refused"):
            raise PathEscapeError(reply["error"])
        return f"Error: {reply['error']}", 2
    lines = [*reply["lines"], *reply["notes"]]
    return ("\n".join(lines), 0) if reply["lines"] else ("\n".join(["No matches", *lines]), 1)


async def _communicate(
    proc: asyncio.subprocess.Process, data: bytes | None, timeout_ms: int
) -> tuple[bytes | None, bytes]:
    """``communicate`` with a hard timeout: on timeout or cancellation the process group is
    killed. Returns (stdout, stderr), stdout None on timeout."""
    try:
        out, err = await asyncio.wait_for(proc.communicate(data), timeout_ms / 1000)
    except TimeoutError:
        _kill_group(proc)
        await proc.wait()
        return None, b""
    except asyncio.CancelledError:
        _kill_group(proc)
        await asyncio.shield(proc.wait())
        raise
    return out, err or b""


class SandboxRefused(RuntimeError):
    """Landlock is unavailable and ``BERTH_TOOL_SANDBOX`` is ``required``."""


async def _bash(cwd: str, a: dict[str, Any]) -> Outcome:
    timeout_ms = int(a.get("timeout") or BASH_DEFAULT_TIMEOUT_MS)
    best_effort = sandbox.sandbox_mode() == "best-effort"
    if sandbox.landlock_abi() < 1 and not best_effort:
        raise SandboxRefused(
            "bash refused: Landlock is not available on this node and "
            f"{sandbox.SANDBOX_MODE_ENV}=required; tool processes never run unconfined"
        )
    with tempfile.TemporaryDirectory(prefix="berth-tool-") as tmp:
        argv = sandbox.helper_argv(
            ["bash", "-c", str(a["command"])],
            rw=[cwd, tmp, *sandbox.DEVICES_RW],
            ro=[*sandbox.SYSTEM_RO, *sandbox.python_dirs()],
            best_effort=best_effort,
        )
        proc = await asyncio.create_subprocess_exec(
            *argv,
            cwd=cwd,
            env=tool_env(cwd, tmp),
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT,
            start_new_session=True,
        )
        out, _ = await _communicate(proc, None, timeout_ms)
    if out is None:
        return f"Command timed out after {timeout_ms} ms", 124
    text = out.decode("utf-8", errors="replace")
    code = proc.returncode if proc.returncode is not None else -1
    return text, code


def _kill_group(proc: asyncio.subprocess.Process) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)


def _real(path: str) -> str:
    return os.path.realpath(path)


SyncTool = Callable[[Workspace, dict[str, Any]], Outcome]
_SYNC_TOOLS: dict[str, SyncTool] = {
    "read": _read,
    "write": _write,
    "edit": _edit,
    "patch": _patch,
    "ls": _ls,
    "glob": _glob,
}
_ASYNC_TOOLS: dict[str, Callable[[str, dict[str, Any]], Awaitable[Outcome]]] = {
    "bash": _bash,
    "grep": _grep,
}


def _in_workspace(tool: SyncTool, workspace: str, args: dict[str, Any]) -> Outcome:
    with Workspace(workspace) as ws:
        return tool(ws, args)


async def run_tool(
    name: str, arguments: dict[str, Any], workspace: str, call_id: str
) -> ToolResult:
    """Run built-in tool ``name`` with the model's ``arguments`` inside ``workspace``.

    Returns a ToolResult (``is_error`` for refusals and failures; bash keeps its exit code and is
    an error only when it could not run or timed out). Cancellation kills a running bash process
    group (and a grep child). Output is capped at :data:`OUTPUT_CAP_CHARS`. File tools run in a
    thread (the event loop never blocks on a file) and are abandoned after
    :data:`FILE_TOOL_TIMEOUT_MS`; no exception of a tool gets past this function (only
    cancellation does).
    """

    def result(output: str, code: int, error: bool) -> ToolResult:
        return ToolResult(call_id, name, cap_output(output), exit_code=code, is_error=error)

    if name not in _SYNC_TOOLS and name not in _ASYNC_TOOLS:
        return result(f"Unknown tool '{name}'", 1, True)
    try:
        check_arguments(name, arguments)
        if name in _ASYNC_TOOLS:
            output, code = await _ASYNC_TOOLS[name](_real(workspace), arguments)
            return result(output, code, code == 124 or (name == "grep" and code == 2))
        output, code = await asyncio.wait_for(
            asyncio.to_thread(_in_workspace, _SYNC_TOOLS[name], workspace, arguments),
            _limit(FILE_TOOL_TIMEOUT_ENV, FILE_TOOL_TIMEOUT_MS) / 1000,
        )
        return result(output, code, code != 0)
    except (PathEscapeError, ToolArgumentError, safefs.UnsafeFileError, SandboxRefused) as exc:
        return result(f"Error: {exc}", 1, True)
    except TimeoutError:
        return result(f"Error: {name} did not finish in time and was abandoned", 124, True)
    except FileNotFoundError as exc:
        return result(f"Error: file not found: {exc.filename}", 1, True)
    except OSError as exc:
        where = f": {exc.filename}" if exc.filename else ""
        return result(f"Error: {exc.strerror or exc}{where}", 1, True)
    except Exception as exc:  # any other failure is the model's to see, never the run's end
        log.warning("tool %s failed", name, exc_info=True)
        return result(f"Error: {name} failed: {type(exc).__name__}: {exc}", 1, True)
