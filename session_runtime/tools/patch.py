"""Applying a unified diff to a text (the ``patch`` tool; pure, no I/O).

Owned by ``session_runtime.tools``; called by the built-in ``patch`` tool. Accepts the usual
``---``/``+++`` headers (ignored) and ``@@ -a,b +c,d @@`` hunks of context (`` ``), removed
(``-``) and added (``+``) lines. A hunk applies at its stated line, else at the nearest place
where its old lines match exactly; otherwise the whole patch is refused (nothing is written).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

_HUNK = re.compile(r"^@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@")


class PatchError(ValueError):
    """The diff is malformed or a hunk does not match the file."""


@dataclass(slots=True)
class Hunk:
    """One hunk: 1-based ``old_start`` and its old/new line lists."""

    old_start: int
    old: list[str] = field(default_factory=list)
    new: list[str] = field(default_factory=list)


def parse_hunks(diff: str) -> list[Hunk]:  # noqa: C901
    """Parse the hunks of ``diff``. Raises PatchError if there are none or a line is invalid."""
    hunks: list[Hunk] = []
    current: Hunk | None = None
    for line in diff.splitlines():
        m = _HUNK.match(line)
        if m:
            current = Hunk(int(m.group(1)))
            hunks.append(current)
            continue
        if current is None:
            if line.startswith(("---", "+++", "diff ", "index ")) or not line.strip():
                continue
            raise PatchError(f"unexpected line before the first hunk: {line!r}")
        if line.startswith("\\"):
            continue  # "\ No newline at end of file"
        tag, body = (line[0], line[1:]) if line else (" ", "")
        if tag == " ":
            current.old.append(body)
            current.new.append(body)
        elif tag == "-":
            current.old.append(body)
        elif tag == "+":
            current.new.append(body)
        elif line.startswith(("---", "+++", "diff ", "index ")):
            current = None  # the next file's header; multi-file diffs apply to one file here
        else:
            raise PatchError(f"invalid hunk line: {line!r}")
    if not hunks:
        raise PatchError("no @@ hunks found in the diff")
    return hunks


def _find(lines: list[str], block: list[str], expected: int) -> int | None:
    if not block:
        return min(max(expected, 0), len(lines))
    n = len(block)
    candidates = range(0, len(lines) - n + 1)
    for pos in sorted(candidates, key=lambda p: abs(p - expected)):
        if lines[pos : pos + n] == block:
            return pos
    return None


def apply_unified_diff(text: str, diff: str) -> tuple[str, int]:
    """Return (patched text, hunks applied). Raises PatchError if any hunk does not apply."""
    lines = text.splitlines()
    trailing_newline = text.endswith("\n") or not text
    delta = 0
    for i, hunk in enumerate(parse_hunks(diff), start=1):
        expected = max(hunk.old_start - 1, 0) + delta
        pos = _find(lines, hunk.old, expected)
        if pos is None:
            raise PatchError(f"hunk {i} (at line {hunk.old_start}) does not match the file")
        lines[pos : pos + len(hunk.old)] = hunk.new
        delta += len(hunk.new) - len(hunk.old)
    out = "\n".join(lines)
    if trailing_newline and lines:
        out += "\n"
    return out, len(parse_hunks(diff))
