"""The retention policy of a session's store and workspace (docs/sessions.md, "Retention").

Pure. A policy is ``Keep`` (the default: nothing is removed, as before retention existed) or
``Delete`` after a period: the session's ``store/<ns>/<name>`` and ``workspaces/<ns>/<name>`` are
removed that many seconds after the session finished (``Succeeded`` or ``Failed``) or was
deleted, whichever comes first. Where a policy comes from, first match wins:

1. ``spec.storeRetention`` of the session (``{policy: Keep|Delete, afterSeconds}``);
2. the operator's per-namespace policy (``BERTH_SHARED_CLAIM_RETENTION_NAMESPACES``, chart value
   ``sharedVolume.retention.namespaces``), ``<namespace>=<policy>`` entries;
3. the operator's default (``BERTH_SHARED_CLAIM_RETENTION``, ``sharedVolume.retention.default``).

Operator settings spell a policy ``Keep``, ``Delete`` (at once) or ``Delete/<seconds>``.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Final

from berth_operator.errors import SettingsError

MAX_AFTER_SECONDS: Final = 10 * 365 * 86400
"""Longest period (ten years, in seconds); longer is ``Keep``."""

_SETTING = re.compile(r"^(Keep|Delete)(?:/([0-9]{1,10}))?$")


@dataclass(frozen=True, slots=True)
class RetentionPolicy:
    """``delete``: remove the store and workspace ``after_seconds`` after the session finished
    or was deleted; else keep them. ``source`` says where the policy came from (spec,
    namespace, default) for Events."""

    delete: bool = False
    after_seconds: int = 0
    source: str = "default"

    def describe(self) -> str:
        """``Keep`` or ``Delete after N s`` and where it came from (for Events and logs)."""
        what = f"Delete after {self.after_seconds}s" if self.delete else "Keep"
        return f"{what} ({self.source})"


KEEP: Final = RetentionPolicy()


def parse_setting(text: str, source: str = "default") -> RetentionPolicy:
    """``Keep``, ``Delete`` or ``Delete/<seconds>`` → :class:`RetentionPolicy`. Raises
    SettingsError for anything else (``Keep/10``, a negative or too long period)."""
    match = _SETTING.match(text.strip())
    if match is None or (match[1] == "Keep" and match[2] is not None):
        raise SettingsError(f"retention policy {text!r}: expected Keep, Delete or Delete/<seconds>")
    after = int(match[2] or 0)
    if after > MAX_AFTER_SECONDS:
        raise SettingsError(f"retention policy {text!r}: at most {MAX_AFTER_SECONDS} seconds")
    return RetentionPolicy(match[1] == "Delete", after, source)


def parse_namespaces(entries: Iterable[str]) -> dict[str, RetentionPolicy]:
    """``["team-a=Delete/86400", "team-b=Keep"]`` → namespace → policy. Raises SettingsError
    for an entry without ``=``, with an empty namespace, or with a bad policy."""
    out: dict[str, RetentionPolicy] = {}
    for entry in entries:
        namespace, sep, text = entry.partition("=")
        if not sep or not namespace.strip():
            raise SettingsError(f"retention entry {entry!r}: expected <namespace>=<policy>")
        out[namespace.strip()] = parse_setting(text, f"namespace {namespace.strip()}")
    return out


def from_spec(spec: Mapping[str, Any] | None) -> RetentionPolicy | None:
    """The policy of ``spec.storeRetention`` (the wire dict: ``policy``, ``afterSeconds``), or None
    when unset or unreadable (the CRD validates it; an object stored before that has none)."""
    if not isinstance(spec, Mapping):
        return None
    policy = spec.get("policy")
    after = spec.get("afterSeconds", 0)
    if policy not in ("Keep", "Delete") or not isinstance(after, int) or after < 0:
        return None
    return RetentionPolicy(policy == "Delete", min(after, MAX_AFTER_SECONDS), "spec")


def effective(
    spec_retention: Mapping[str, Any] | None,
    namespace: str,
    namespaces: Mapping[str, RetentionPolicy],
    default: RetentionPolicy,
) -> RetentionPolicy:
    """The policy of a session (module docstring: spec, then namespace, then default)."""
    own = from_spec(spec_retention)
    if own is not None:
        return own
    return namespaces.get(namespace, default)
