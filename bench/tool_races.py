"""Benchmark: symlink-swap races against the file tools (check-then-open escapes).

    .venv/bin/python bench/tool_races.py [--attempts 1000] [--tools read,grep,write,...]

An attacker process (standing in for the agent's own bash) swaps, as fast as it can and atomically
(``renameat2(RENAME_EXCHANGE)``), a real directory ``x`` of the workspace with a symlink to an
outside directory holding ``secret.txt``/``target.txt``/``edit.txt``, and a regular file ``env``
with a symlink to ``/proc/self/environ``, while this process runs
each tool ``--attempts`` times through :func:`session_runtime.tools.run_tool`, the entry point the
session and the LaneWorkers use. An *escape* is: outside content in the output (read, grep,
environ) or an outside file changed (write, edit, patch; it is restored after each escape).

Printed: escapes per tool out of attempts, calls that succeeded inside the workspace (the
rest were refused), and calls per second. Run it against another checkout
with ``PYTHONPATH=<checkout> .venv/bin/python bench/tool_races.py`` to compare versions (the
module path in use is printed first). Timing is printed, never asserted.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from session_runtime import tools as tools_pkg
from session_runtime.tools import run_tool

ATTACKER = r"""
import ctypes, os, sys
libc = ctypes.CDLL(None, use_errno=True)
ws = sys.argv[1].encode()
AT_FDCWD, RENAME_EXCHANGE, SYS_renameat2 = -100, 2, 316
pairs = [(ws + b"/x", ws + b"/x.alt"), (ws + b"/env", ws + b"/env.alt")]
while True:
    for a, b in pairs:
        libc.syscall(SYS_renameat2, AT_FDCWD, a, AT_FDCWD, b, RENAME_EXCHANGE)
"""

INSIDE = {"secret.txt": "inside\n", "target.txt": "inside\n", "edit.txt": "TOP inside\n"}
OUTSIDE = {"secret.txt": "TOP SECRET\n", "target.txt": "outside\n", "edit.txt": "TOP SECRET\n"}
PATCH = "@@ -1,1 +1,1 @@\n-TOP SECRET\n+PATCHED\n"


def setup(root: Path) -> tuple[Path, Path]:
    ws, outside = root / "ws", root / "outside"
    (ws / "x").mkdir(parents=True)
    outside.mkdir()
    for name, text in INSIDE.items():
        (ws / "x" / name).write_text(text)
    for name, text in OUTSIDE.items():
        (outside / name).write_text(text)
    os.symlink(outside, ws / "x.alt")
    (ws / "env").write_text("inside\n")
    os.symlink("/proc/self/environ", ws / "env.alt")
    return ws, outside


def reset_inside(inside_fd: int, name: str) -> None:
    """Restore an inside file through a descriptor of the (moving) inside directory."""
    fd = os.open(name, os.O_WRONLY | os.O_TRUNC | os.O_NOFOLLOW, dir_fd=inside_fd)
    with os.fdopen(fd, "w") as fh:
        fh.write(INSIDE[name])


def escaped(tool: str, output: str, outside: Path) -> bool:
    """True if this call got through; restores the outside files it changed."""
    if tool in ("read", "grep"):
        return "TOP SECRET" in output
    if tool == "environ":
        return "PATH=" in output
    changed = False
    for name, text in OUTSIDE.items():
        if (outside / name).read_text() != text:
            (outside / name).write_text(text)
            changed = True
    return changed


CALLS = {
    "read": ("read", {"file_path": "x/secret.txt"}),
    "grep": ("grep", {"pattern": "SECRET", "path": "x"}),
    "write": ("write", {"file_path": "x/target.txt", "content": "pwned\n"}),
    "edit": ("edit", {"file_path": "x/edit.txt", "old_string": "TOP", "new_string": "OWNED"}),
    "patch": ("patch", {"file_path": "x/edit.txt", "diff": PATCH}),
    "environ": ("read", {"file_path": "env"}),
}


async def race(
    ws: Path, outside: Path, inside_fd: int, tool: str, attempts: int
) -> tuple[int, int, float]:
    name, args = CALLS[tool]
    escapes = ok = 0
    t0 = time.monotonic()
    for i in range(attempts):
        res = await run_tool(name, args, str(ws), f"c{i}")
        if escaped(tool, res.output, outside):
            escapes += 1
        elif not res.is_error:
            ok += 1
        if tool in ("edit", "patch"):
            reset_inside(inside_fd, "edit.txt")
    return escapes, ok, time.monotonic() - t0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--attempts", type=int, default=1000)
    ap.add_argument("--tools", default="read,grep,write,edit,patch,environ")
    args = ap.parse_args()
    print(f"tools module: {os.path.dirname(tools_pkg.__file__)}")
    with tempfile.TemporaryDirectory() as tmp:
        ws, outside = setup(Path(tmp))
        inside_fd = os.open(ws / "x", os.O_RDONLY | os.O_DIRECTORY)
        attacker = subprocess.Popen([sys.executable, "-c", ATTACKER, str(ws), str(outside)])
        try:
            seen: set[bool] = set()
            while len(seen) < 2:  # the attacker is flipping before the first attempt
                seen.add((ws / "x").is_symlink())
            for tool in args.tools.split(","):
                escapes, ok, secs = asyncio.run(race(ws, outside, inside_fd, tool, args.attempts))
                rate = args.attempts / secs
                print(
                    f"{tool:8s} escapes {escapes:5d} / {args.attempts}, succeeded inside {ok:5d}"
                    f"  ({rate:7.0f} calls/s)"
                )
        finally:
            attacker.kill()
            attacker.wait()


if __name__ == "__main__":
    main()
