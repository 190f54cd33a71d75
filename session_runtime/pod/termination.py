"""Writing the termination message on exit (the shape is :mod:`berth_contract.termination`).

Owned by the ``berth-session`` entrypoint; called once, as the process ends.
"""

from __future__ import annotations

import sys
from pathlib import Path

from berth_contract.termination import TerminationMessage, render


def write(path: Path | None, message: TerminationMessage) -> str:
    """Write the rendered message to ``path`` (if any) and echo it as one line to stderr.

    Returns the rendered text. An unwritable path is reported on stderr, never raised: the process
    is exiting and the exit code still carries the outcome.
    """
    text = render(message)
    if path is not None:
        try:
            path.write_text(text, encoding="utf-8")
        except OSError as exc:
            print(f"berth-session: cannot write termination log {path}: {exc}", file=sys.stderr)
    print(f"berth-session: termination {text}", file=sys.stderr)
    return text
