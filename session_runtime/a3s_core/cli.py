"""``berth-a3s-checkpoint``: move a session between Berth's file store and a3s-code-core 9.x.

::

    berth-a3s-checkpoint export --store DIR --session ID [--run RUN] --out FILE
    berth-a3s-checkpoint import --store DIR --from FILE [--session-id ID] [--accept FIELD ...]

``export`` writes a passivated Berth session as a ``SessionCheckpointExportV1`` (wire form
JSON); ``import`` writes a 9.x export into Berth's store as session ``--session-id`` (default: the
9.x session's id; ``--epoch``: the placement epoch to write under, default 0). Both print what
they left behind; a field that does not map fails with exit code 2 and a message naming it
(docs/a3s-compatibility.md, "Checkpoint interchange").
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path

from session_runtime.a3s_core.checkpoint import export_session, import_checkpoint
from session_runtime.errors import CheckpointError
from session_runtime.store.file import FileSessionStore


def _parse(argv: Sequence[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="berth-a3s-checkpoint",
        description="Move a session between Berth's file store and a3s-code-core 9.x.",
    )
    sub = p.add_subparsers(dest="command", required=True)
    exp = sub.add_parser("export", help="a Berth session -> SessionCheckpointExportV1")
    exp.add_argument("--store", required=True, help="Berth's session store directory")
    exp.add_argument("--session", required=True)
    exp.add_argument("--run", help="the run to resume (default: the newest with a checkpoint)")
    exp.add_argument("--out", required=True, help="where to write the export (JSON)")
    imp = sub.add_parser("import", help="a 9.x SessionCheckpointExportV1 -> Berth's store")
    imp.add_argument("--store", required=True, help="Berth's session store directory")
    imp.add_argument("--from", dest="source", required=True, help="the export (JSON)")
    imp.add_argument("--accept", action="append", default=[], help="a field to drop")
    imp.add_argument("--session-id", help="the Berth session id (default: the 9.x one)")
    for cmd in (exp, imp):
        cmd.add_argument("--epoch", type=int, default=0, help="Berth placement epoch")
    return p.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    """Console entry point; exit 0 on success, 2 when a field does not map or the input is
    not an export, 3 when the
    a3s-code-core binding is not installed (the message says how to build it)."""
    a = _parse(argv)
    store = FileSessionStore(a.store, epoch=a.epoch)
    try:
        if a.command == "export":
            exported = export_session(store, a.session, a.run)
            Path(a.out).write_text(json.dumps(exported.export))
            print(f"exported session {a.session}, run {exported.run_id}")
            dropped = exported.dropped
        else:
            export = json.loads(Path(a.source).read_text())
            imported = import_checkpoint(
                export, store, accept=frozenset(a.accept), session_id=a.session_id
            )
            print(f"imported session {imported.session_id}, run {imported.run_id}")
            dropped = imported.dropped
    except CheckpointError as exc:
        print(f"berth-a3s-checkpoint: {exc}", file=sys.stderr)
        return 2
    except ValueError as exc:  # not JSON, or not an export in wire form (names what is missing)
        print(f"berth-a3s-checkpoint: not a SessionCheckpointExportV1: {exc}", file=sys.stderr)
        return 2
    except ImportError as exc:  # the binding is not installed: say how to build it
        print(f"berth-a3s-checkpoint: {exc}", file=sys.stderr)
        return 3
    finally:
        store.close()
    for name in dropped:
        print(f"left behind: {name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
