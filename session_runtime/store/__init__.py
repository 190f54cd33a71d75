"""Session stores: where a session's record, loop checkpoints and workflow checkpoints live.

Public names: :class:`FileSessionStore` (journal + snapshots + epoch fencing on a shared volume,
docs/architecture.md §6), :class:`MemorySessionStore` (tests), the A3S shapes
:class:`LoopCheckpoint`, :class:`WorkflowCheckpoint`, :class:`PendingRound`, and the
:class:`SessionStore` protocol the agent loop calls.

Module map (one job each): ``base`` (protocol and A3S shapes), ``shapes`` (on-disk JSON shapes,
canonical encoding), ``state`` (the reducer both stores run), ``memory`` and ``file`` (the two
stores), ``journal`` (checksummed record files, torn tails), ``atomic`` (temp+fsync+rename+dir
fsync), ``layout`` (file names), ``fence`` (the lease), ``ids`` (safe ids), ``redact`` (no
credentials in saved data).

On disk, per session (``<root>/<session_id>/``)::

    lease/<epoch>                   one empty file per epoch that claimed the session
    snapshot-<epoch>-<seq>.rec      the whole state, written atomically
    journal-<epoch>-<seq>.rec       records appended since that snapshot, one per store call

A record is one line ``<crc32 hex> <canonical JSON>``; a bad or incomplete last line is a torn
tail and is ignored. A loader with epoch E reads the newest snapshot of the highest epoch <= E
plus its journal; a writer claims its epoch before it reads and checks the lease around every
append, raising ``FencedError`` once a higher epoch has claimed the session.
"""

from session_runtime.store.base import (
    LOOP_CHECKPOINT_SCHEMA_VERSION,
    WORKFLOW_CHECKPOINT_SCHEMA_VERSION,
    LoopCheckpoint,
    PendingRound,
    SessionStore,
    WorkflowCheckpoint,
)
from session_runtime.store.file import FileSessionStore
from session_runtime.store.ids import InvalidIdError
from session_runtime.store.memory import MemorySessionStore

__all__ = [
    "LOOP_CHECKPOINT_SCHEMA_VERSION",
    "WORKFLOW_CHECKPOINT_SCHEMA_VERSION",
    "FileSessionStore",
    "InvalidIdError",
    "LoopCheckpoint",
    "MemorySessionStore",
    "PendingRound",
    "SessionStore",
    "WorkflowCheckpoint",
]
