"""Race-free file access below a workspace directory descriptor (stdlib only).

Owned by ``session_runtime.tools``; used by the built-in file tools (in a thread) and by the grep
child process (:mod:`.grepchild`). Every open is relative to a directory descriptor with
``O_NOFOLLOW``: the walk opens one component at a time, and a symlink met on the way is read
(``readlinkat``) and followed by this code, not by the kernel: a relative target continues from
the current directory (``..`` pops this walk's own descriptor stack and can never pop past the
workspace), an absolute target must name a place inside the workspace. A symlink or directory
swapped in between two steps therefore never leads outside (the same guarantee as ``openat2``
with ``RESOLVE_IN_ROOT``, portable to kernels without it).

Opened files are checked with ``fstat`` on the descriptor actually used: FIFOs, devices and
sockets are refused (opens are ``O_NONBLOCK`` so a FIFO never blocks), and a regular file with
more than one hard link is refused (another link may be outside the workspace).

Errors: :class:`~session_runtime.tools.paths.PathEscapeError` (leaves the workspace),
:class:`UnsafeFileError` (special file, hard link, too large to edit), ``OSError`` (missing file,
not a directory, too many symlinks ``ELOOP``).
"""

from __future__ import annotations

import errno
import os
import stat
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

from session_runtime.tools.paths import (
    MAX_COMPONENTS,
    PathEscapeError,
    symlink_parts,
    workspace_parts,
)

#: Symlinks followed in one path before ``ELOOP`` (Linux's own limit).
MAX_SYMLINKS = 40
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
READ_FLAGS = os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY
WRITE_FLAGS = os.O_RDWR | os.O_CREAT | os.O_NONBLOCK | os.O_NOCTTY
DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY


class UnsafeFileError(ValueError):
    """The file exists inside the workspace but may not be used (shown to the model)."""


def _kind(mode: int) -> str:
    if stat.S_ISFIFO(mode):
        return "a FIFO"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    if stat.S_ISSOCK(mode):
        return "a socket"
    return "not a regular file"


class Workspace:
    """A workspace directory held open by descriptor; use as a context manager.

    ``path`` is the configured workspace (trusted, may itself contain symlinks); ``fd`` is
    its directory descriptor. All methods take the model's path arguments.
    """

    def __init__(self, path: str, fd: int | None = None) -> None:
        self.path = path
        self.fd = os.open(path, DIR_FLAGS | os.O_CLOEXEC) if fd is None else fd

    def __enter__(self) -> Workspace:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Close the workspace descriptor (also one given as ``fd``); idempotent."""
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1

    def open(
        self, path: str | None, flags: int, *, mode: int = 0o666, create_dirs: bool = False
    ) -> tuple[int, str]:
        """Open ``path`` below the workspace with ``flags | O_NOFOLLOW | O_CLOEXEC``.

        Returns ``(fd, relative path as resolved)``; the caller closes ``fd``. ``create_dirs``
        makes missing intermediate directories (for write/patch). Special files are refused before
        they are opened (after, too: see :func:`check_regular`).
        """
        return self._resolve(workspace_parts(self.path, path), flags, mode, create_dirs)

    def _follow(
        self, name: str, dir_fd: int, todo: deque[str], stack: list[int], names: list[str]
    ) -> bool:
        """If ``name`` is a symlink, splice its target into ``todo`` and return True."""
        try:
            target = os.readlink(name, dir_fd=dir_fd)
        except OSError as exc:
            if exc.errno in (errno.EINVAL, errno.ENOENT):
                return False
            raise
        from_root, parts = symlink_parts(self.path, target)
        if from_root:
            while len(stack) > 1:
                os.close(stack.pop())
            names.clear()
        todo.extendleft(reversed(parts))
        if len(todo) > MAX_COMPONENTS * 4:
            raise PathEscapeError("symlink expansion is too long; access refused")
        return True

    @staticmethod
    def _enter(name: str, dir_fd: int, create: bool) -> int | None:
        """Open the intermediate directory ``name`` (made first if ``create``); None when a
        symlink was swapped in after the caller's stat (ELOOP), so the caller looks again."""
        if create:
            os.mkdir(name, 0o777, dir_fd=dir_fd)
        try:
            return os.open(name, _DIR_FLAGS, dir_fd=dir_fd)
        except OSError as exc:
            if exc.errno == errno.ELOOP:
                return None
            raise

    def _resolve(  # noqa: C901, PLR0912, PLR0915
        self, parts: list[str], flags: int, mode: int, create_dirs: bool
    ) -> tuple[int, str]:
        if not parts:
            if flags & os.O_CREAT:
                raise IsADirectoryError(errno.EISDIR, "the workspace is a directory", ".")
            return os.open(".", DIR_FLAGS | os.O_CLOEXEC, dir_fd=self.fd), "."
        todo: deque[str] = deque(parts)
        stack = [os.dup(self.fd)]
        names: list[str] = []
        links = 0
        try:
            while todo:
                name = todo.popleft()
                if name == "..":
                    if len(stack) == 1:
                        raise PathEscapeError(
                            "a symlink leads outside the workspace (..); access refused"
                        )
                    os.close(stack.pop())
                    names.pop()
                    continue
                dir_fd = stack[-1]
                try:
                    st: os.stat_result | None = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
                except FileNotFoundError:
                    st = None
                if st is not None and stat.S_ISLNK(st.st_mode):
                    links += 1
                    if links > MAX_SYMLINKS:
                        raise OSError(errno.ELOOP, "too many levels of symbolic links", name)
                    if self._follow(name, dir_fd, todo, stack, names):
                        continue
                    todo.appendleft(name)  # swapped back to a non-link meanwhile: retry
                    continue
                if todo:  # an intermediate directory
                    entered = self._enter(name, dir_fd, st is None and create_dirs)
                    if entered is None:  # a symlink swapped in after the stat
                        todo.appendleft(name)
                        links += 1
                        continue
                    stack.append(entered)
                    names.append(name)
                    continue
                if st is not None and not (stat.S_ISREG(st.st_mode) or stat.S_ISDIR(st.st_mode)):
                    raise UnsafeFileError(f"{'/'.join([*names, name])} is {_kind(st.st_mode)}")
                try:
                    fd = os.open(name, flags | os.O_NOFOLLOW | os.O_CLOEXEC, mode, dir_fd=dir_fd)
                except OSError as exc:
                    if exc.errno == errno.ELOOP and links < MAX_SYMLINKS:
                        todo.appendleft(name)
                        links += 1
                        continue
                    raise
                return fd, "/".join([*names, name])
            # The path ended in ".." (from a symlink): the directory on top of the stack.
            return os.open(".", DIR_FLAGS | os.O_CLOEXEC, dir_fd=stack[-1]), "/".join(names) or "."
        finally:
            for fd in stack:
                os.close(fd)


def check_regular(fd: int, rel: str, *, max_links: int = 1) -> os.stat_result:
    """``fstat`` the open ``fd``; refuse directories, special files and extra hard links.

    Raises IsADirectoryError or UnsafeFileError (the message names ``rel``).
    """
    st = os.fstat(fd)
    if stat.S_ISDIR(st.st_mode):
        raise IsADirectoryError(errno.EISDIR, "is a directory", rel)
    if not stat.S_ISREG(st.st_mode):
        raise UnsafeFileError(f"{rel} is {_kind(st.st_mode)}; only regular files are used")
    if st.st_nlink > max_links:
        raise UnsafeFileError(
            f"{rel} has {st.st_nlink} hard links; refused because another link may be outside "
            "the workspace"
        )
    return st


def read_capped(fd: int, max_bytes: int) -> bytes:
    """Read at most ``max_bytes`` from ``fd`` (from its current offset)."""
    chunks: list[bytes] = []
    left = max_bytes
    while left > 0:
        chunk = os.read(fd, min(left, 1 << 20))
        if not chunk:
            break
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


def rewrite(fd: int, data: bytes) -> None:
    """Replace the whole content of the open regular file ``fd`` with ``data``."""
    os.lseek(fd, 0, os.SEEK_SET)
    os.ftruncate(fd, 0)
    view = memoryview(data)
    while view:
        n = os.write(fd, view)
        view = view[n:]


@dataclass(slots=True)
class Walk:
    """A bounded, depth-first walk below a directory descriptor that never follows symlinks.

    Iterating yields ``(relative path, kind, parent dir fd, name)`` with ``kind`` one of
    ``dir``/``file``/``link``/``other``; the parent fd is valid during the step only. The walk
    stops after ``max_entries`` entries and does not descend below ``max_depth``;
    ``stopped`` then says why (shown to the model).
    """

    top_fd: int
    top_rel: str
    max_depth: int = 64
    max_entries: int = 100_000
    skip_dir: Callable[[str], bool] = lambda _name: False
    descend: Callable[[list[str]], bool] = lambda _parts: True
    stopped: str | None = None
    seen: int = field(default=0)

    def __iter__(self) -> Iterator[tuple[str, str, int, str]]:  # noqa: C901
        base = [] if self.top_rel in ("", ".") else self.top_rel.split("/")
        stack: list[tuple[int, list[str], Iterator[os.DirEntry[str]]]] = []
        first = os.dup(self.top_fd)
        stack.append((first, [], iter(self._entries(first))))
        try:
            while stack:
                fd, parts, entries = stack[-1]
                entry = next(entries, None)
                if entry is None:
                    os.close(fd)
                    stack.pop()
                    continue
                self.seen += 1
                if self.seen > self.max_entries:
                    self.stopped = f"walk stopped after {self.max_entries} entries"
                    return
                here = [*parts, entry.name]
                rel = "/".join([*base, *here])
                if entry.is_symlink():
                    yield rel, "link", fd, entry.name
                elif entry.is_dir(follow_symlinks=False):
                    yield rel, "dir", fd, entry.name
                    if self.skip_dir(entry.name) or not self.descend(here):
                        continue
                    if len(here) >= self.max_depth:
                        self.stopped = f"walk did not descend below depth {self.max_depth}"
                        continue
                    try:
                        sub = os.open(entry.name, _DIR_FLAGS, dir_fd=fd)
                    except OSError:
                        continue  # swapped for a link or removed meanwhile
                    stack.append((sub, here, iter(self._entries(sub))))
                elif entry.is_file(follow_symlinks=False):
                    yield rel, "file", fd, entry.name
                else:
                    yield rel, "other", fd, entry.name
        finally:
            for fd, _, _ in stack:
                os.close(fd)

    def _entries(self, fd: int) -> list[os.DirEntry[str]]:
        out: list[os.DirEntry[str]] = []
        with os.scandir(fd) as it:
            for entry in it:
                out.append(entry)
                if len(out) > self.max_entries:
                    break
        return sorted(out, key=lambda e: e.name)
