"""Session stores: where a session's record, loop checkpoints and workflow checkpoints live.

Public names: :class:`FileSessionStore` (journal + snapshots + epoch fencing on a shared volume,
ARCHITECTURE §6), :class:`MemorySessionStore` (tests), the A3S shapes :class:`LoopCheckpoint`,
:class:`WorkflowCheckpoint`, :class:`PendingRound`, and the :class:`SessionStore` protocol the
agent loop calls.
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
