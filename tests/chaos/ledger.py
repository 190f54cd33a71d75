"""The side-effect ledger: where the campaign's tools record that they ran, outside the system
under test.

Owned by the chaos harness; :class:`LedgerServer` runs in the campaign process, the scripted model
(:mod:`tests.chaos.model`) writes :func:`tool_command` into the bash calls it asks for.

Tool processes are confined by Landlock to their workspace (``session_runtime.tools.sandbox``), so
they cannot append to a file outside it; TCP is not confined. A tool therefore reports to a small
TCP service on loopback, which appends every line it receives to the ledger file (``O_APPEND``) in
arrival order and keeps it in memory for the invariant checks. Each bash call the model makes
sends, in order::

    S <tool call id> <epoch> <attempt> <pid>     before the side effect (this line *is* it)
    E <tool call id> <epoch> <attempt> <pid>     after the tool's work (a short sleep)

and prints ``done:<tool call id>``, the marker by which a result in a history is recognised as the
tool's own output. ``epoch`` and ``attempt`` are those of the session process whose model call
produced the call (the model reads them from the URL path the process was given), so a line says
which placement ran the tool.
"""

from __future__ import annotations

import os
import socket
import threading
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True, slots=True)
class Entry:
    """One ledger line: ``kind`` ``S`` (started) or ``E`` (ended), the tool call id, the epoch and
    attempt of the process that asked for it, the shell's pid, and ``seq`` (arrival order)."""

    kind: str
    call: str
    epoch: int
    attempt: int
    pid: int
    seq: int


HOSTNAME_EPOCH = "${HOSTNAME##*-e}"
"""Shell expansion of the epoch of the session pod a tool runs in (pods are named
``<session>-e<epoch>``; bash sets ``HOSTNAME`` itself), for the cluster campaign."""


def tool_command(
    port: int,
    call_id: str,
    epoch: int | str,
    attempt: int | str,
    linger_ms: int,
    host: str = "127.0.0.1",
) -> str:
    """The bash command of one side-effecting call (module docstring). ``linger_ms`` is how long
    the tool works between its two ledger lines, so a kill can land inside it; ``host`` is where
    the ledger listens (an address pods reach, for the cluster campaign); ``epoch`` and
    ``attempt`` may be shell expansions (:data:`HOSTNAME_EPOCH`)."""
    line = f"{call_id} {epoch} {attempt} $$"
    dev = f"/dev/tcp/{host}/{port}"
    return (
        f'echo "S {line}" > {dev} && sleep {linger_ms / 1000:.3f} && '
        f'echo "E {line}" > {dev} && echo done:{call_id}'
    )


def parse_line(text: str, seq: int) -> Entry | None:
    """The entry a received line holds, or None for anything else (ignored)."""
    parts = text.split()
    if len(parts) != 5 or parts[0] not in ("S", "E"):
        return None
    try:
        return Entry(parts[0], parts[1], int(parts[2]), int(parts[3]), int(parts[4]), seq)
    except ValueError:
        return None


class LedgerServer:
    """The ledger service: a TCP listener on ``host`` (loopback by default) in a daemon thread.

    Connections are served one at a time in accept order (a tool sends one short line per
    connection), each line appended to ``path`` with ``O_APPEND`` and kept in memory.
    :meth:`sync` returns once every connection accepted before it was served.
    """

    def __init__(self, path: Path, host: str = "127.0.0.1") -> None:
        self.path = path
        self.host = host
        self._sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._sock.bind((host, 0))
        self._sock.listen(256)
        self.port = int(self._sock.getsockname()[1])
        self._fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC, 0o600)
        self._entries: list[Entry] = []
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._serve, name="chaos-ledger", daemon=True)
        self._stopping = False
        self._thread.start()

    def _serve(self) -> None:
        while not self._stopping:
            try:
                conn, _ = self._sock.accept()
            except OSError:
                return
            with conn:
                conn.settimeout(2.0)
                data = b""
                try:
                    while chunk := conn.recv(4096):
                        data += chunk
                except OSError:
                    pass  # a sender killed mid-line: keep what arrived
            if data == b"SYNC\n":
                continue
            self._append(data.decode(errors="replace"))

    def _append(self, text: str) -> None:
        with self._lock:
            for raw in text.splitlines():
                entry = parse_line(raw, len(self._entries))
                if entry is None:
                    continue
                os.write(self._fd, (raw.strip() + "\n").encode())
                self._entries.append(entry)

    def sync(self) -> None:
        """Wait until every connection made before this call has been recorded."""
        with socket.create_connection((self.host, self.port), timeout=10) as conn:
            conn.sendall(b"SYNC\n")
            conn.shutdown(socket.SHUT_WR)
            conn.settimeout(10)
            conn.recv(1)  # EOF once the server has closed our connection, i.e. reached it

    def entries(self, prefix: str) -> list[Entry]:
        """Every entry whose call id starts with ``prefix``, in arrival order."""
        with self._lock:
            return [e for e in self._entries if e.call.startswith(prefix)]

    def forget(self, prefix: str) -> None:
        """Drop the in-memory entries of ``prefix`` (the file keeps them)."""
        with self._lock:
            self._entries = [e for e in self._entries if not e.call.startswith(prefix)]

    def close(self) -> None:
        """Stop serving and close the file."""
        self._stopping = True
        self._sock.close()
        self._thread.join(timeout=5)
        os.close(self._fd)
