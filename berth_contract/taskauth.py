"""Task authentication (docs/architecture.md §11, "Task authentication").

One master key per namespace (Secret ``berth-task-key``, key ``master``); each session's key is
derived from it, so a worker holding the master can compute the key of the session a task names,
and a session holding only its own key can sign nothing for another session.

Every task and every reply carries ``mac`` = hex HMAC-SHA256(session key, canonical bytes of all
its other fields). The canonical form is the fields sorted by name, each name and value as
UTF-8 prefixed with its byte length (``<len>:<name><len>:<value>``), so no two field maps share
an encoding. A message whose MAC is missing or wrong is refused by :func:`verify_fields`; the
caller drops and counts it, never runs or delivers it.
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Mapping
from pathlib import Path
from typing import Final

_LABEL = b"berth/task-key/v1\x00"
MAC_FIELD: Final = "mac"
"""Name of the field holding the hex MAC of a task or reply."""
KEY_BYTES: Final = 32


def derive_session_key(master: bytes, namespace: str, session: str) -> bytes:
    """The 32-byte key of session ``namespace/session``:
    HMAC-SHA256(master, b"berth/task-key/v1\\x00" + "<namespace>/<session>")."""
    return hmac.new(master, _LABEL + f"{namespace}/{session}".encode(), hashlib.sha256).digest()


def canonical(fields: Mapping[str, str]) -> bytes:
    """The bytes a MAC covers: every field but ``mac``, sorted, length-prefixed."""
    parts = []
    for name in sorted(fields):
        if name == MAC_FIELD:
            continue
        for text in (name, fields[name]):
            raw = text.encode("utf-8")
            parts.append(b"%d:%s" % (len(raw), raw))
    return b"".join(parts)


def mac(key: bytes, fields: Mapping[str, str]) -> str:
    """Hex HMAC-SHA256 of ``fields`` (their :func:`canonical` bytes) under ``key``."""
    return hmac.new(key, canonical(fields), hashlib.sha256).hexdigest()


def sign_fields(key: bytes, fields: Mapping[str, str]) -> dict[str, str]:
    """``fields`` plus their ``mac`` under ``key`` (a new dict; any old ``mac`` is replaced)."""
    signed = {k: v for k, v in fields.items() if k != MAC_FIELD}
    signed[MAC_FIELD] = mac(key, signed)
    return signed


def verify_fields(key: bytes, fields: Mapping[str, str]) -> bool:
    """Whether ``fields`` carry a ``mac`` that matches them under ``key`` (constant time)."""
    given = fields.get(MAC_FIELD, "")
    return bool(given) and hmac.compare_digest(given, mac(key, fields))


def read_key_file(path: str | Path) -> bytes:
    """The raw key in ``path``. Raises ValueError (naming the file, never the content) when it
    cannot be read or is not exactly 32 bytes."""
    try:
        key = Path(path).read_bytes()
    except OSError as exc:
        raise ValueError(f"cannot read the task key file {path}: {exc.strerror}") from None
    if len(key) != KEY_BYTES:
        raise ValueError(f"task key file {path} must hold exactly {KEY_BYTES} bytes")
    return key
