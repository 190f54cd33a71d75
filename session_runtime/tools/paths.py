"""Workspace path arguments: the lexical checks every tool path passes before any file is opened.

Owned by ``session_runtime.tools``; used by :mod:`.safefs` (the race-free opener) and by the
built-in tools. Pure (no I/O apart from ``realpath`` of the workspace itself, which is trusted:
it comes from the runtime's configuration, never from the model).

Rules (docs/architecture.md §10 "Tools", hardened): a path is relative to the workspace; an absolute
path is accepted only when it names the workspace or something below it; ``..`` segments, NUL bytes,
paths longer than :data:`MAX_PATH_BYTES` or deeper than :data:`MAX_COMPONENTS` are refused.
Symlinks are *not* resolved here: :mod:`.safefs` follows them one component at a time below a
directory descriptor of the workspace, so a link swapped in between check and use cannot win.
"""

from __future__ import annotations

import os

#: Longest path argument accepted, in bytes (Linux PATH_MAX).
MAX_PATH_BYTES = 4096
#: Most path segments accepted in one path argument (and symlink expansions of it).
MAX_COMPONENTS = 256


class PathEscapeError(ValueError):
    """A path argument leaves (or could leave) the workspace. The message is shown to the model."""


def _workspace_prefixes(workspace: str) -> list[str]:
    given = os.path.normpath(os.path.abspath(workspace))
    real = os.path.realpath(workspace)
    return [given] if given == real else [given, real]


def workspace_parts(workspace: str, path: str | None) -> list[str]:
    """Split ``path`` into the segments below ``workspace``; ``[]`` is the workspace itself.

    ``None`` and ``""`` mean the workspace. ``.`` and empty segments are dropped. Raises
    PathEscapeError for NUL bytes, ``..``, an absolute path elsewhere, or an over-long path.
    """
    raw = "" if path is None else str(path)
    if "\x00" in raw:
        raise PathEscapeError(f"Path {raw!r} contains a NUL byte; access refused")
    if len(raw.encode("utf-8", "surrogateescape")) > MAX_PATH_BYTES:
        raise PathEscapeError(f"Path is longer than {MAX_PATH_BYTES} bytes; access refused")
    rel = raw
    if raw.startswith("/"):
        norm = "/" + raw.lstrip("/")
        for prefix in _workspace_prefixes(workspace):
            if norm == prefix or norm.startswith(prefix.rstrip("/") + "/"):
                rel = norm[len(prefix) :]
                break
        else:
            raise PathEscapeError(
                f"Path '{raw}' resolves outside the workspace ({workspace}); access refused"
            )
    parts = [p for p in rel.split("/") if p not in ("", ".")]
    if ".." in parts:
        raise PathEscapeError(
            f"Path '{raw}' has a '..' segment, which could lead outside the workspace; refused"
        )
    if len(parts) > MAX_COMPONENTS:
        raise PathEscapeError(
            f"Path has {len(parts)} segments (at most {MAX_COMPONENTS}); access refused"
        )
    return parts


def symlink_parts(workspace: str, target: str) -> tuple[bool, list[str]]:
    """Split a symlink's ``target`` for the confined walk: ``(from_root, segments)``.

    A relative target continues from the link's directory and may use ``..`` (the walk pops its
    own directory stack and refuses to pop past the workspace); an absolute one must name a place
    inside the workspace (then ``from_root`` is True). Raises PathEscapeError otherwise.
    """
    if target.startswith("/"):
        try:
            return True, workspace_parts(workspace, target)
        except PathEscapeError:
            raise PathEscapeError(
                f"a symlink points outside the workspace ({target}); access refused"
            ) from None
    parts = [p for p in target.split("/") if p not in ("", ".")]
    return False, parts


def resolve_in_workspace(workspace: str, path: str | None) -> str:
    """Lexical form of ``path`` inside the real ``workspace`` (for display; never for opening).

    Raises PathEscapeError like :func:`workspace_parts`. Opening must go through
    :mod:`session_runtime.tools.safefs`, which also confines symlinks race-free.
    """
    root = os.path.realpath(workspace)
    parts = workspace_parts(workspace, path)
    return os.path.join(root, *parts) if parts else root


def relative_to_workspace(workspace: str, abs_path: str) -> str:
    """``abs_path`` relative to the (real) workspace, for display to the model."""
    rel = os.path.relpath(abs_path, os.path.realpath(workspace))
    return "." if rel == "." else rel
