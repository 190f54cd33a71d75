"""Task authentication keys (the Berth security contract, "Task authentication").

One master key per namespace (Secret ``berth-task-key``, key ``master``); each session's key is
derived from it so a worker holding the master can compute the key of the session a task names,
and a session holding only its own key can sign nothing for another session.
"""

from __future__ import annotations

import hashlib
import hmac

_LABEL = b"berth/task-key/v1\x00"


def derive_session_key(master: bytes, namespace: str, session: str) -> bytes:
    """The 32-byte key of session ``namespace/session``:
    HMAC-SHA256(master, b"berth/task-key/v1\\x00" + "<namespace>/<session>")."""
    return hmac.new(master, _LABEL + f"{namespace}/{session}".encode(), hashlib.sha256).digest()
