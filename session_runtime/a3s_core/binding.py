"""a3s-code-core 9.x through Berth's binding (``berth_a3s_core``), as Python values.

The binding (``a3s_core_binding/src/lib.rs``) passes a3s-code-core's own serde shapes as JSON
text; this module parses them. :class:`CoreSession` has the surface
``session_runtime.a3s_bridge.A3sBridge`` serves (``pending_external_tasks`` and
``complete_external_task(task_id, success, result)``), so the bridge forwards a 9.x session's
external tasks to Berth LaneWorkers exactly as it does a3s-code 3.1.0's.

Behaviour of a3s-code-core 9.1.3 this relies on (read in its source, checked by the tests in
``tests/*/*a3s_core*``):

- a session built with ``session_async`` and a ``SessionQueueConfig`` whose Execute lane is
  ``External`` has a queue (no bootstrap trick as in 3.1.0): bash, write and edit the host
  invokes (``AgentSession::tool``, :meth:`CoreSession.tool`) become pending external tasks
  ``{task_id, session_id, lane, command_type, payload, timeout_ms}``. The tools of the
  session's own agent runs (``send``, ``resume_run``) do not: 9.1.3 executes them in-process
  through its fact spine, whatever the lane configuration;
- ``complete_external_task`` with ``success=false`` fails the tool call (the model sees the
  error); a task not completed within ``timeout_ms`` fails with a lane timeout. 9.x does not run
  the tool locally after either, unlike 3.1.0, but Berth's bridge keeps the same rule for both
  (never ``success=False``, answered before the timeout) so a failure always reads as "outcome
  unknown" and a retry by the model is its own decision;
- the session's ``FileSessionStore`` is shared with :class:`CoreStore`, so a writer lease
  acquired there fences the session's own commits (``a3s-code-core`` keeps the held lease per
  store handle).
"""

from __future__ import annotations

import base64
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ABSENT = (
    "the a3s-code-core binding (module berth_a3s_core) is not installed: build it with "
    "`make a3s-core-binding` (hack/a3s-core-binding.sh; needs cargo and the crate registry)"
)


def load() -> Any:
    """The ``berth_a3s_core`` module; raises ``ImportError`` saying how to build it."""
    try:
        import berth_a3s_core
    except ImportError as exc:
        raise ImportError(ABSENT) from exc
    return berth_a3s_core


def core_version() -> str:
    """The a3s-code-core version the installed binding was built against (e.g. ``"9.1.3"``)."""
    return str(load().core_version())


@dataclass(frozen=True, slots=True)
class CoreResult:
    """The end of one run: its final ``text``, tool calls, tokens and messages (a3s-code-core
    ``Message`` JSON: ``{role, content: [{type: text|tool_use|tool_result, ...}]}``)."""

    text: str
    tool_calls_count: int
    total_tokens: int
    messages: list[dict[str, Any]] = field(default_factory=list)

    @classmethod
    def parse(cls, raw: str) -> CoreResult:
        d = json.loads(raw)
        return cls(d["text"], d["tool_calls_count"], d["total_tokens"], d["messages"])


class CoreStore:
    """a3s-code-core's ``FileSessionStore`` on ``directory`` (created if missing).

    Snapshots and loop checkpoints are a3s-code-core's JSON shapes (``SessionSnapshotV1``,
    ``LoopCheckpoint``) as dicts; a commit after another holder took the writer lease over
    raises ``RuntimeError("... writer lease lost or taken over (durable epoch N)")``."""

    def __init__(self, directory: str) -> None:
        self.raw = load().Store(directory)
        self.directory = directory

    def acquire_writer_lease(self, holder_id: str) -> dict[str, Any]:
        """Take the store's writer lease: ``{schema, epoch, holderId, acquiredAtMs}``, the
        epoch one above the durable one (a3s-code-core ``acquire_writer_lease``)."""
        return dict(json.loads(self.raw.acquire_writer_lease(holder_id)))

    def writer_lease(self) -> dict[str, Any] | None:
        """The durable writer lease, or None if nobody has taken one."""
        raw = self.raw.writer_lease()
        return None if raw is None else dict(json.loads(raw))

    def save_snapshot(self, snapshot: dict[str, Any]) -> None:
        """Commit one ``SessionSnapshotV1`` (fenced by the writer lease this handle holds)."""
        self.raw.save_snapshot(json.dumps(snapshot))

    def load_snapshot(self, session_id: str) -> dict[str, Any] | None:
        raw = self.raw.load_snapshot(session_id)
        return None if raw is None else dict(json.loads(raw))

    def save_loop_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        self.raw.save_loop_checkpoint(json.dumps(checkpoint))

    def load_loop_checkpoint(self, run_id: str) -> dict[str, Any] | None:
        raw = self.raw.load_loop_checkpoint(run_id)
        return None if raw is None else dict(json.loads(raw))

    def session_ids(self) -> list[str]:
        return list(self.raw.list())

    def loop_checkpoint_run_ids(self) -> list[str]:
        """Run ids with a loop checkpoint here (file names ``v1/loop_checkpoints/id_<base64url
        run id>.json`` of a3s-code-core's layout), oldest first."""
        folder = Path(self.directory) / "v1" / "loop_checkpoints"
        files = sorted(folder.glob("id_*.json"), key=lambda p: p.stat().st_mtime_ns)
        out = []
        for path in files:
            token = path.stem[3:]
            out.append(base64.urlsafe_b64decode(token + "=" * (-len(token) % 4)).decode())
        return out


class CoreSession:
    """One a3s-code-core ``AgentSession`` on ``workspace`` (blocking calls release the GIL)."""

    def __init__(self, raw: Any, workspace: str | None = None) -> None:
        self.raw = raw
        self.workspace = workspace

    @property
    def id(self) -> str:
        return str(self.raw.id)

    def send(self, prompt: str) -> CoreResult:
        """Run ``prompt`` to its end (blocks; run it in a thread while a bridge serves)."""
        return CoreResult.parse(self.raw.send(prompt))

    def resume_run(self, run_id: str) -> CoreResult:
        """a3s-code-core ``resume_run``: continue from the loop checkpoint of ``run_id``."""
        return CoreResult.parse(self.raw.resume_run(run_id))

    def tool(self, name: str, args: dict[str, Any]) -> dict[str, Any]:
        """Run tool ``name`` as the host (a3s-code-core ``AgentSession::tool``): through the
        session's lane queue, so with an external Execute lane bash, write and edit become
        pending external tasks. Returns ``{name, output, exit_code}`` (blocks)."""
        return dict(json.loads(self.raw.tool(name, json.dumps(args))))

    def pending_external_tasks(self) -> list[dict[str, Any]]:
        return list(json.loads(self.raw.pending_external_tasks()))

    def complete_external_task(self, task_id: str, success: bool, result: dict[str, Any]) -> bool:
        """Complete one pending task with ``result`` ``{output, exit_code}``; False if it was
        not pending (already completed or timed out)."""
        return bool(self.raw.complete_external_task(task_id, success, json.dumps(result)))

    def save(self) -> None:
        self.raw.save()

    def close(self) -> None:
        self.raw.close()


class CoreAgent:
    """An a3s-code-core ``Agent`` from an ACL config (a file path or the text itself).

    Sessions get a permission policy that allows every tool and planning disabled (Berth's
    LaneWorkers and the worker's workspace confinement are the guard, as for 3.1.0)."""

    def __init__(self, config: str) -> None:
        self.raw = load().Agent(config)

    def session(
        self,
        workspace: str,
        *,
        session_id: str | None = None,
        store: CoreStore | None = None,
        external_timeout_ms: int | None = None,
        export_dir: str | None = None,
    ) -> CoreSession:
        """A new session on ``workspace``; saved to ``store`` after each run if given; its
        Execute lane external (tasks wait up to ``external_timeout_ms``) if given; the
        ``SessionCheckpointExportV1`` of each completed tool round written to ``export_dir``
        (``<seq>-<descriptor digest>.json``, wire form; read with :func:`latest_export`)."""
        raw_store = None if store is None else store.raw
        raw = self.raw.session(workspace, session_id, raw_store, external_timeout_ms, export_dir)
        return CoreSession(raw, workspace)

    def resume_session(
        self, session_id: str, store: CoreStore, *, external_timeout_ms: int | None = None
    ) -> CoreSession:
        """The session ``session_id`` as persisted in ``store``."""
        return CoreSession(self.raw.resume_session(session_id, store.raw, external_timeout_ms))


def checkpoint_export(
    snapshot: dict[str, Any], loop_checkpoint: dict[str, Any] | None = None
) -> dict[str, Any]:
    """``SessionCheckpointExportV1`` of ``snapshot`` (+ the run's loop checkpoint) in its
    cross-language wire form ``{descriptor, contentBase64}``, built and validated by
    a3s-code-core; raises ``RuntimeError``/``ValueError`` naming the check that failed."""
    cp = None if loop_checkpoint is None else json.dumps(loop_checkpoint)
    return dict(json.loads(load().checkpoint_export(json.dumps(snapshot), cp)))


def checkpoint_open(export: dict[str, Any]) -> dict[str, Any]:
    """Validate a wire-form export (descriptor digests against content) and open it:
    ``{schema, snapshot, logical_resume?}``."""
    return dict(json.loads(load().checkpoint_open(json.dumps(export))))


def latest_export(export_dir: str) -> dict[str, Any] | None:
    """The newest export a session wrote to ``export_dir`` (see ``CoreAgent.session``), or
    None if it wrote none."""
    files = sorted(Path(export_dir).glob("*.json"))
    return None if not files else dict(json.loads(files[-1].read_text()))
