"""Safe ids: the session, run and workflow ids the store accepts.

Owned by ``session_runtime.store``. A session id names a directory of the file store, so an id
that could leave the store's root (``..``, ``/``, ``\\``, NUL, a leading dot, control characters,
an empty string) is refused before any path is built. Run and workflow ids get the same rule so
that no id a store accepts can ever be turned into a path outside it.
"""

from __future__ import annotations

import re

from session_runtime.errors import StoreError

#: 1 to 200 characters from ``A-Z a-z 0-9 _ . : @ + = -``, starting with a letter, digit or ``_``.
SAFE_ID = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.:@+=-]{0,199}")


class InvalidIdError(StoreError, ValueError):
    """A session, run or workflow id the store refuses (it could escape a directory)."""


def check_id(kind: str, value: object) -> str:
    """Return ``value`` if it is a safe id, else raise :class:`InvalidIdError`.

    ``kind`` names the id in the message (``session id``, ``run id``, ``workflow id``), e.g.
    ``invalid session id '../etc': ids are 1-200 characters of A-Z a-z 0-9 _ . : @ + = -,
    starting with a letter, digit or '_'``.
    """
    if isinstance(value, str) and SAFE_ID.fullmatch(value):
        return value
    raise InvalidIdError(
        f"invalid {kind} {value!r}: ids are 1-200 characters of A-Z a-z 0-9 _ . : @ + = -, "
        "starting with a letter, digit or '_'"
    )
