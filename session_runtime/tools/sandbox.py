"""Confinement of tool processes: a scrubbed environment and Landlock (stdlib only).

Owned by ``session_runtime.tools``; used by the bash tool and the grep child, in the session pod
and in LaneWorkers. Contract (docs/architecture.md §11, "Tool processes"): a tool process sees only
an allow-listed environment (:func:`tool_env`) and, before it execs, confines itself with Landlock
(Linux >= 5.13, syscalls 444/445/446): read-write below the workspace and its private TMPDIR,
read-only(+exec) below the system directories and the Python prefix, nothing else (so nothing under
``/var/run/berth``, ``/proc`` or the store). With Landlock ABI >= 6 the domain is also scoped: it
cannot signal processes outside it nor reach their abstract unix sockets.

Command line (a re-exec helper, so nothing unsafe runs between ``fork`` and ``exec`` of a
threaded server)::

    python -m session_runtime.tools.sandbox [--rw DIR]... [--ro DIR]... [--best-effort] -- cmd...

The tools run it as a script (``python -I -S <this file>``: stdlib only, ~10 ms instead of
importing the package). Exit status 126 with a message on stderr when Landlock is unavailable and
``--best-effort`` was not given (``BERTH_TOOL_SANDBOX=required``, the default).
"""

from __future__ import annotations

import ctypes
import os
import stat
import sys

SYS_LANDLOCK_CREATE_RULESET = 444
SYS_LANDLOCK_ADD_RULE = 445
SYS_LANDLOCK_RESTRICT_SELF = 446
_CREATE_RULESET_VERSION = 1
_RULE_PATH_BENEATH = 1
_PR_SET_NO_NEW_PRIVS = 38

# Filesystem access rights (include/uapi/linux/landlock.h), with the ABI that introduced them.
EXECUTE, WRITE_FILE, READ_FILE, READ_DIR = 1 << 0, 1 << 1, 1 << 2, 1 << 3
_ABI1_ALL = (1 << 13) - 1  # EXECUTE .. MAKE_SYM
REFER, TRUNCATE, IOCTL_DEV = 1 << 13, 1 << 14, 1 << 15
_FILE_RIGHTS = EXECUTE | WRITE_FILE | READ_FILE | TRUNCATE | IOCTL_DEV
RO_RIGHTS = EXECUTE | READ_FILE | READ_DIR
# Scopes (ABI 6): abstract unix sockets and signals outside the domain.
_SCOPE_ABSTRACT_UNIX_SOCKET, _SCOPE_SIGNAL = 1, 2

#: Read-only (+exec) system directories every tool process gets (missing ones are skipped).
#: ``/proc`` is deliberately absent: this kernel's Landlock does not stop a same-uid process from
#: reading ``/proc/<server pid>/environ``, so tools get no ``/proc`` at all (``ps`` and ``<(...)``
#: do not work inside the sandbox).
SYSTEM_RO = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/etc", "/opt/berth")
#: Device files a shell needs, read-write.
DEVICES_RW = ("/dev/null", "/dev/zero", "/dev/full", "/dev/random", "/dev/urandom", "/dev/tty")
#: Environment variables copied from the server into a tool process (all others are dropped).
ENV_ALLOW = ("PATH", "LANG", "LC_ALL", "TERM", "TZ")
#: Environment variable choosing what happens without Landlock: ``required`` | ``best-effort``.
#: It is ``berth_contract.envvars.TOOL_SANDBOX``, spelled out because this file also runs as a
#: stdlib-only script (``-I -S``) that cannot import the contract; a unit test holds them equal.
SANDBOX_MODE_ENV = "BERTH_TOOL_SANDBOX"
#: Its values, in the order above.
SANDBOX_MODES = ("required", "best-effort")
#: What a pod reports when it cannot confine its tools (a CamelCase condition reason, the
#: ``code`` of the session pod's termination message and the marker of a worker's exit message).
TOOL_SANDBOX_UNAVAILABLE = "ToolSandboxUnavailable"


class SandboxError(RuntimeError):
    """Landlock could not be applied (the message says why)."""


def _libc() -> ctypes.CDLL:
    return ctypes.CDLL(None, use_errno=True)


def landlock_abi() -> int:
    """The kernel's Landlock ABI version, or 0 when Landlock is unavailable or disabled."""
    libc = _libc()
    libc.syscall.restype = ctypes.c_long
    abi = int(libc.syscall(SYS_LANDLOCK_CREATE_RULESET, None, 0, _CREATE_RULESET_VERSION))
    return max(abi, 0)


class _PathBeneath(ctypes.Structure):
    _pack_ = 1
    _fields_ = (("allowed_access", ctypes.c_uint64), ("parent_fd", ctypes.c_int32))


def _handled(abi: int) -> int:
    rights = _ABI1_ALL
    if abi >= 2:
        rights |= REFER
    if abi >= 3:
        rights |= TRUNCATE
    if abi >= 5:
        rights |= IOCTL_DEV
    return rights


def python_dirs() -> list[str]:
    """The interpreter's prefixes (read-only for tool processes that run Python)."""
    dirs = {sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix}
    dirs.add(os.path.dirname(os.path.dirname(os.path.realpath(sys.executable))))
    return sorted(d for d in dirs if d and d != "/")


def restrict(rw: list[str], ro: list[str], *, ro_fds: tuple[int, ...] = ()) -> int:  # noqa: C901, PLR0912
    """Confine this process (and what it execs) with Landlock; return the ABI used.

    ``rw``/``ro`` are directories (or files: file rights only); missing paths are skipped.
    ``ro_fds`` are already-open directory descriptors granted read-only (used by the grep child).
    Raises SandboxError when Landlock is unavailable or a syscall fails.
    """
    abi = landlock_abi()
    if abi < 1:
        raise SandboxError("Landlock is not available in this kernel (needs Linux >= 5.13)")
    libc = _libc()
    libc.syscall.restype = ctypes.c_long
    handled = _handled(abi)
    attr = (ctypes.c_uint64 * 3)(handled, 0, 0)
    size = 8
    if abi >= 6:
        attr[2] = _SCOPE_ABSTRACT_UNIX_SOCKET | _SCOPE_SIGNAL
        size = 24
    ruleset = int(libc.syscall(SYS_LANDLOCK_CREATE_RULESET, ctypes.byref(attr), size, 0))
    if ruleset < 0:
        raise SandboxError(f"landlock_create_ruleset failed: {os.strerror(ctypes.get_errno())}")
    try:
        grants: list[tuple[int, int]] = [(fd, RO_RIGHTS & handled) for fd in ro_fds]
        opened: list[int] = []
        for paths, rights in ((rw, handled), (ro, RO_RIGHTS)):
            for path in paths:
                try:
                    fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
                except OSError:
                    continue
                opened.append(fd)
                is_dir = stat.S_ISDIR(os.fstat(fd).st_mode)
                grants.append((fd, rights if is_dir else rights & _FILE_RIGHTS & handled))
        try:
            for fd, rights in grants:
                rule = ctypes.byref(_PathBeneath(rights, fd))
                if libc.syscall(SYS_LANDLOCK_ADD_RULE, ruleset, _RULE_PATH_BENEATH, rule, 0) < 0:
                    raise SandboxError(
                        f"landlock_add_rule failed: {os.strerror(ctypes.get_errno())}"
                    )
        finally:
            for fd in opened:
                os.close(fd)
        if libc.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
            raise SandboxError(f"prctl(NO_NEW_PRIVS) failed: {os.strerror(ctypes.get_errno())}")
        if libc.syscall(SYS_LANDLOCK_RESTRICT_SELF, ruleset, 0) < 0:
            raise SandboxError(f"landlock_restrict_self failed: {os.strerror(ctypes.get_errno())}")
    finally:
        os.close(ruleset)
    return abi


def tool_env(workspace: str, tmpdir: str, source: dict[str, str] | None = None) -> dict[str, str]:
    """The whole environment of a tool process: :data:`ENV_ALLOW` from ``source`` (default
    ``os.environ``) plus ``HOME``/``PWD`` = ``workspace`` and ``TMPDIR`` = ``tmpdir``."""
    src = os.environ if source is None else source
    env = {k: src[k] for k in ENV_ALLOW if k in src}
    env.setdefault("PATH", "/usr/local/bin:/usr/bin:/bin")
    env.update(HOME=workspace, PWD=workspace, TMPDIR=tmpdir)
    return env


def sandbox_mode() -> str:
    """``required`` (default) or ``best-effort``, from :data:`SANDBOX_MODE_ENV`. Raises
    SandboxError for any other value."""
    mode = os.environ.get(SANDBOX_MODE_ENV, "required").strip().lower() or "required"
    if mode not in SANDBOX_MODES:
        raise SandboxError(f"{SANDBOX_MODE_ENV} must be 'required' or 'best-effort', not {mode!r}")
    return mode


def startup_refusal(
    mode: str, abi: int, node: str | None, *, runs_tools: bool = True
) -> str | None:
    """The start-up check of a pod that runs tool processes (a session pod whose execute lane is
    not all external, a LaneWorker): None when they can run (Landlock ABI ``abi`` >= 1, or
    ``mode`` ``best-effort``, or ``runs_tools`` False), else the message saying why the pod
    refuses to start, naming ``node`` (the pod's ``NODE_NAME``) when known. Pure. A refusal at
    start-up, not at the first bash call deep into a run, is the contract of
    ``BERTH_TOOL_SANDBOX=required``."""
    if abi >= 1 or mode == "best-effort" or not runs_tools:
        return None
    where = f"node {node}" if node else "this node"
    return (
        f"{TOOL_SANDBOX_UNAVAILABLE}: {where} gives pods no Landlock (needs Linux >= 5.13 with "
        "landlock in the LSM list, and a runtime that passes the landlock syscalls, which gVisor "
        f"does not), so tool processes cannot be confined and {SANDBOX_MODE_ENV}=required; "
        "place the pod on a node with Landlock or set toolSandbox: BestEffort"
    )


def helper_argv(cmd: list[str], rw: list[str], ro: list[str], *, best_effort: bool) -> list[str]:
    """The argv running ``cmd`` through this module as a fast stdlib-only script."""
    argv = [sys.executable, "-I", "-S", os.path.abspath(__file__)]
    for d in rw:
        argv += ["--rw", d]
    for d in ro:
        argv += ["--ro", d]
    if best_effort:
        argv.append("--best-effort")
    return [*argv, "--", *cmd]


def _which(name: str) -> str:
    if "/" in name:
        return name
    for d in os.environ.get("PATH", "/usr/bin:/bin").split(os.pathsep):
        candidate = os.path.join(d or ".", name)
        if os.path.isfile(candidate) and os.access(candidate, os.X_OK):
            return candidate
    return name


def main(argv: list[str]) -> int:
    """Parse the command line of the module doc, confine, and exec the command."""
    rw: list[str] = []
    ro: list[str] = []
    best_effort = False
    i = 0
    while i < len(argv) and argv[i] != "--":
        opt = argv[i]
        if opt in ("--rw", "--ro") and i + 1 < len(argv):
            (rw if opt == "--rw" else ro).append(argv[i + 1])
            i += 2
        elif opt == "--best-effort":
            best_effort = True
            i += 1
        else:
            print(f"sandbox: unknown option {opt!r}", file=sys.stderr)
            return 2
    cmd = argv[i + 1 :]
    if not cmd:
        print("sandbox: no command given after --", file=sys.stderr)
        return 2
    program = _which(cmd[0])
    try:
        restrict(rw, ro)
    except SandboxError as exc:
        if not best_effort:
            print(f"sandbox: refusing to run the tool unconfined: {exc}", file=sys.stderr)
            return 126
        print(f"sandbox: running unconfined (best-effort): {exc}", file=sys.stderr)
    try:
        os.execv(program, cmd)  # looked up before confining: execvp imports lazily
    except OSError as exc:
        print(f"sandbox: cannot run {cmd[0]}: {exc.strerror}", file=sys.stderr)
        return 127


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
