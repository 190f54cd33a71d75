"""The grep tool's search, run in a child process the caller can kill (stdlib only).

Owned by ``session_runtime.tools``; started by the built-in ``grep`` tool. Python's ``re`` holds
the GIL for a whole match and cannot be interrupted, so a catastrophic pattern run in the server
(even in a thread) stalls its event loop; in a child it costs one process that is killed at the
per-tool timeout. The child inherits only the workspace's directory descriptor (argv[1]), reads
its request as JSON on stdin, confines itself read-only to that descriptor with Landlock when
available, and writes ``{"lines": [...], "notes": [...]}`` as JSON on stdout.

Request keys: ``pattern``, ``ignore_case``, ``path``, ``workspace`` (path, for absolute
arguments), ``glob``, ``context``, ``max_bytes`` (per file), ``max_matches``.
"""

from __future__ import annotations

import contextlib
import fnmatch
import json
import os
import re
import stat
import sys
from typing import Any

from session_runtime.tools import safefs, sandbox
from session_runtime.tools.paths import PathEscapeError

#: Longest matched line reported, in characters (the rest is cut with "...").
MAX_LINE_CHARS = 2000


def _scan(
    text: str, rx: re.Pattern[str], rel: str, ctx: int, out: list[str], max_matches: int
) -> bool:
    """Append the matches of one file to ``out``; return False once ``max_matches`` is hit."""
    lines = text.splitlines()
    for i, line in enumerate(lines):
        if rx.search(line):
            lo, hi = max(i - ctx, 0), min(i + ctx + 1, len(lines))
            for j in range(lo, hi):
                sep = ":" if j == i else "-"
                text = (
                    lines[j]
                    if len(lines[j]) <= MAX_LINE_CHARS
                    else lines[j][:MAX_LINE_CHARS] + "..."
                )
                out.append(f"{rel}{sep}{j + 1}{sep}{text}")
            if len(out) >= max_matches:
                return False
    return True


def _read(fd: int, rel: str, max_bytes: int, notes: list[str]) -> str | None:
    try:
        st = safefs.check_regular(fd, rel)
    except (safefs.UnsafeFileError, OSError) as exc:
        notes.append(f"skipped {exc}")
        return None
    data = safefs.read_capped(fd, max_bytes)
    if st.st_size > max_bytes:
        notes.append(f"{rel}: only the first {max_bytes} of {st.st_size} bytes were searched")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return None  # binary file


def search(ws: safefs.Workspace, req: dict[str, Any]) -> dict[str, Any]:
    """Run one grep request below ``ws`` (see the module doc); pure apart from reading files."""
    flags = re.IGNORECASE if req.get("ignore_case") else 0
    rx = re.compile(str(req["pattern"]), flags)
    ctx, max_bytes = int(req["context"]), int(req["max_bytes"])
    max_matches, file_glob = int(req["max_matches"]), req.get("glob")
    out: list[str] = []
    notes: list[str] = []
    fd, rel = ws.open(req.get("path"), safefs.READ_FLAGS)
    try:
        if not stat.S_ISDIR(os.fstat(fd).st_mode):
            text = _read(fd, rel, max_bytes, notes)
            if text is not None:
                _scan(text, rx, rel, ctx, out, max_matches)
            return {"lines": out, "notes": notes}
        walk = safefs.Walk(fd, rel, skip_dir=lambda n: n.startswith(".git"))
        for path, kind, dir_fd, name in walk:
            if kind != "file" or (file_glob and not fnmatch.fnmatch(name, str(file_glob))):
                continue
            try:
                ffd = os.open(name, safefs.READ_FLAGS | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=dir_fd)
            except OSError:
                continue  # swapped for a link or removed meanwhile
            try:
                text = _read(ffd, path, max_bytes, notes)
            finally:
                os.close(ffd)
            if text is not None and not _scan(text, rx, path, ctx, out, max_matches):
                notes.append("... more matches omitted")
                break
        if walk.stopped:
            notes.append(walk.stopped)
    finally:
        os.close(fd)
    return {"lines": out, "notes": notes}


def main(argv: list[str]) -> int:
    """Child entry: ``argv[0]`` is the workspace descriptor, the request comes on stdin. Writes
    the result, or ``{"error", "refused"?}`` for a bad pattern, refused or missing path, as JSON
    on stdout; always returns 0 (errors are answers, not exit codes)."""
    ws_fd = int(argv[0])
    req = json.loads(sys.stdin.read())
    # The walk below is confined by descriptor anyway; Landlock is a second line.
    with contextlib.suppress(sandbox.SandboxError):
        sandbox.restrict([], [], ro_fds=(ws_fd,))
    try:
        with safefs.Workspace(str(req["workspace"]), fd=ws_fd) as ws:
            result = search(ws, req)
    except re.error as exc:
        result = {"error": f"invalid regular expression: {exc}"}
    except (PathEscapeError, safefs.UnsafeFileError) as exc:
        result = {"error": str(exc), "refused": True}
    except OSError as exc:
        result = {"error": f"{exc.strerror or exc}: {exc.filename or req.get('path')}"}
    sys.stdout.write(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
