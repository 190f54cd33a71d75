"""Workspace confinement: resolve a tool's path argument or refuse it.

Owned by ``session_runtime.tools``; used by the built-in tools here and by LaneWorkers (they
resolve the model's raw arguments against the same workspace). Pure apart from ``realpath``.

Rules (RUNTIME-CONTRACT "Tools"): paths are relative to the workspace; absolute paths inside it
are accepted; anything that resolves outside it — ``..`` segments, an absolute path elsewhere, a
symlink (at any level, including a dangling one) whose target is outside — is refused.
"""

from __future__ import annotations

import os


class PathEscapeError(ValueError):
    """A path argument resolves outside the workspace. The message is shown to the model."""


def resolve_in_workspace(workspace: str, path: str | None) -> str:
    """Return the absolute real path of ``path`` inside ``workspace`` or raise PathEscapeError.

    ``workspace`` must be an absolute directory (it is realpath'ed here too). ``path`` None or
    empty means the workspace itself. Symlinks are followed before the containment check, so a link
    inside the workspace that points outside is refused; the file need not exist (write/glob).
    """
    root = os.path.realpath(workspace)
    raw = "" if path is None else str(path)
    if "\x00" in raw:
        raise PathEscapeError(f"Path {raw!r} contains a NUL byte")
    candidate = raw if os.path.isabs(raw) else os.path.join(root, raw)
    resolved = os.path.realpath(candidate)
    if resolved != root and not resolved.startswith(root + os.sep):
        raise PathEscapeError(
            f"Path '{raw}' resolves outside the workspace ({root}); access refused"
        )
    return resolved


def relative_to_workspace(workspace: str, abs_path: str) -> str:
    """``abs_path`` relative to the (real) workspace, for display to the model."""
    rel = os.path.relpath(abs_path, os.path.realpath(workspace))
    return "." if rel == "." else rel
