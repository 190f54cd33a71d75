"""Selecting a container's log lines for ``kubectl logs`` on process pods (test-only node agent).

The agent appends each container run of a pod to one file, ``<state>/pods/<ns>_<pod>/log``, and
starts every run with a header line ``=== <time> pod <ns>/<name> uid <uid> container <name> ...``.
``select_log`` picks the lines of one container of one pod (the latest run, or the one before it
for ``previous=true``) and applies ``tailLines``/``limitBytes``. Pure; called by the agent's small
kubelet-style HTTPS endpoint that the apiserver proxies ``pods/log`` to.
"""

from __future__ import annotations

HEADER = "=== "


def _header_matches(line: str, uid: str, container: str) -> bool:
    return line.startswith(HEADER) and f" uid {uid} " in line and f" container {container} " in line


def select_log(
    text: str,
    uid: str,
    container: str,
    *,
    previous: bool = False,
    tail_lines: int | None = None,
    limit_bytes: int | None = None,
) -> str:
    """The output of one run of ``container`` in pod ``uid`` (without the agent's header)."""
    runs: list[list[str]] = []
    current: list[str] | None = None
    for line in text.splitlines(keepends=True):
        if line.startswith(HEADER):
            if _header_matches(line, uid, container):
                current = []
                runs.append(current)
            else:
                current = None
            continue
        if current is not None:
            current.append(line)
    index = -2 if previous else -1
    if len(runs) < -index:
        return ""
    lines = runs[index]
    if tail_lines is not None:
        lines = lines[-tail_lines:] if tail_lines > 0 else []
    out = "".join(lines)
    if limit_bytes is not None:
        out = out.encode()[:limit_bytes].decode("utf-8", errors="ignore")
    return out
