"""On-disk shapes of the store, validated with pydantic when read back.

Owned by ``session_runtime.store``; used by ``base`` (checkpoint parsing), ``state`` (journal
records and snapshots) and the two stores. Writers build plain dicts (see :mod:`.state`) and encode
them with :func:`encode`; readers decode with :func:`decode` and check a record's shape with
:data:`RECORD` before applying it, so a damaged or foreign file is refused with a message
(``CheckpointError``) instead of a ``KeyError`` deep in the reducer.

Journal record kinds (field ``t``), one per store operation (docs/architecture.md §6):

=================== ===========================================================================
``session``         ``data``: the session record (``save_session``), secrets already stripped
``begin``           ``run``, ``turn``, ``message``: intent of a tool round (assistant message)
``result``          ``run``, ``turn``, ``call``, ``result``: one tool result of that round
``commit``          ``run``, ``session``, ``turn``, ``v`` (schema), ``keep``, ``append``,
                    ``usage``, ``tool_calls``, ``ms``, optional ``base``: a LoopCheckpoint as
                    a delta: its messages are the first ``keep`` messages of the run's previous
                    checkpoint (of run ``base``'s, for the first checkpoint of a resumed run)
                    followed by ``append``
``checkpoint_delete`` ``run``: forget the run's checkpoint and pending round
``workflow``        ``checkpoint``: a WorkflowCheckpoint in its A3S shape
``workflow_delete`` ``workflow``: forget a workflow checkpoint
``snapshot``        ``session``, ``epoch``, ``seq``, ``state``: the whole state (snapshot files)
=================== ===========================================================================
"""

from __future__ import annotations

import json
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError

from session_runtime.errors import StoreError

NonNeg = Annotated[int, Field(ge=0)]


class _Shape(BaseModel):
    model_config = ConfigDict(strict=True, extra="ignore")


class LoopCheckpointModel(_Shape):
    """A3S LoopCheckpoint JSON (schema version 1)."""

    schema_version: int
    run_id: str
    session_id: str
    turn: NonNeg
    messages: list[dict[str, Any]]
    total_usage: dict[str, int]
    tool_calls_count: NonNeg
    checkpoint_ms: int


class WorkflowCheckpointModel(_Shape):
    """A3S WorkflowCheckpoint JSON (schema version 1)."""

    schema_version: int
    workflow_id: str
    steps: list[dict[str, Any]]
    checkpoint_ms: int


class SessionRec(_Shape):
    """A ``session`` journal record: ``data`` is the session record (``save_session``)."""

    t: Literal["session"]
    data: dict[str, Any]


class BeginRec(_Shape):
    """A ``begin`` journal record: the assistant ``message`` of round ``turn`` of ``run``."""

    t: Literal["begin"]
    run: str
    turn: NonNeg
    message: dict[str, Any]


class ResultRec(_Shape):
    """A ``result`` journal record: the ``result`` of tool call ``call`` in round ``turn`` of
    ``run``."""

    t: Literal["result"]
    run: str
    turn: NonNeg
    call: str
    result: dict[str, Any]


class CommitRec(_Shape):
    """A checkpoint delta. Only ``run`` and ``v`` are required so that a record written by a
    newer build still parses and is refused by ``ensure_loadable`` with the contract message."""

    model_config = ConfigDict(strict=True, extra="allow")
    t: Literal["commit"]
    run: str
    v: int
    session: str = ""
    turn: NonNeg = 0
    keep: NonNeg = 0
    append: list[dict[str, Any]] = Field(default_factory=list)
    usage: dict[str, int] = Field(default_factory=dict)
    tool_calls: NonNeg = 0
    ms: int = 0
    base: str | None = None


class CheckpointDeleteRec(_Shape):
    """A ``checkpoint_delete`` journal record: forget ``run``'s checkpoint and pending round."""

    t: Literal["checkpoint_delete"]
    run: str


class WorkflowRec(_Shape):
    """A ``workflow`` journal record: ``checkpoint`` is an A3S WorkflowCheckpoint dict."""

    t: Literal["workflow"]
    checkpoint: dict[str, Any]


class WorkflowDeleteRec(_Shape):
    """A ``workflow_delete`` journal record: forget workflow ``workflow``."""

    t: Literal["workflow_delete"]
    workflow: str


class PendingModel(_Shape):
    """A run's uncommitted round in a snapshot: ``results`` maps tool call id to result."""

    turn: NonNeg
    message: dict[str, Any]
    results: dict[str, dict[str, Any]]


class RunModel(_Shape):
    """One run in a snapshot, in first-seen order. With ``base``, the checkpoint's
    ``messages`` follow the first ``keep`` messages of run ``base``'s checkpoint."""

    run: str
    checkpoint: dict[str, Any] | None
    pending: PendingModel | None
    base: str | None = None
    keep: NonNeg = 0


class StateModel(_Shape):
    """The ``state`` of a snapshot record: what ``SessionState.to_json`` writes and
    ``SessionState.from_json`` validates (the whole state of one session)."""

    session: dict[str, Any] | None
    runs: list[RunModel]
    workflows: dict[str, dict[str, Any]]


Record = Annotated[
    SessionRec
    | BeginRec
    | ResultRec
    | CommitRec
    | CheckpointDeleteRec
    | WorkflowRec
    | WorkflowDeleteRec,
    Field(discriminator="t"),
]

#: Validates one journal record (any kind but ``snapshot``).
RECORD: TypeAdapter[Record] = TypeAdapter(Record)


def describe(exc: ValidationError) -> str:
    """A one-line summary of a pydantic error: ``field.path: message; ...`` (first 3)."""
    parts = []
    for err in exc.errors()[:3]:
        loc = ".".join(str(p) for p in err["loc"]) or "<root>"
        parts.append(f"{loc}: {err['msg']}")
    more = len(exc.errors()) - 3
    return "; ".join(parts) + (f"; and {more} more" if more > 0 else "")


#: The canonical encoder, built once: ``json.dumps`` with any non-default option builds a new
#: ``JSONEncoder`` per call (about 1 µs of the 9-10 µs a round's commit record costs).
#: Stateless between calls, so one instance serves every thread.
_ENCODER = json.JSONEncoder(
    sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False
)


def encode(obj: dict[str, Any]) -> bytes:
    """Canonical JSON bytes: sorted keys, no spaces, UTF-8, no NaN; never contains a newline.

    Canonical so that two processes replaying the same inputs write byte-identical files
    (docs/architecture.md §10, "Deterministic ids and time"). Raises ``StoreError`` for values JSON
    cannot represent.
    """
    try:
        text = _ENCODER.encode(obj)
    except (TypeError, ValueError) as exc:
        raise StoreError(f"cannot store a value that is not plain JSON: {exc}") from exc
    return text.encode("utf-8")


def decode(data: bytes) -> Any:
    """Parse JSON bytes written by :func:`encode`; raises ``ValueError`` on bad input."""
    return json.loads(data.decode("utf-8"))
