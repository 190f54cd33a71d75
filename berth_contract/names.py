"""Redis key names of the lane-task transport (fixed by docs/architecture.md §7).

Part of the contract (:mod:`berth_contract`): the operator renders a lane's task stream into
``options.json`` and scales on its pressure; the session side publishes to it and reads its reply
stream; ``berth-worker`` consumes it. All of them spell a name only through these functions.

- task stream of a LaneWorker pool: ``berth:{ns}:lw:{laneworker}:tasks``, consumer group
  ``workers``, consumer name = the worker pod's name;
- reply stream of a session: ``berth:{ns}:s:{session_uid}:results``;
- Berth additions: the pool's dead-letter stream ``berth:{ns}:lw:{laneworker}:dead`` (malformed
  task messages, with a reason) and a worker's liveness key
  ``berth:{ns}:lw:{laneworker}:alive:{consumer}`` (a TTL key the worker refreshes; its absence
  marks the worker lost).

Every component is checked against the Kubernetes name rules, so a name can never inject ``:`` or
a pattern into a key. Errors: :class:`ValueError` with the offending value.
"""

from __future__ import annotations

import re

GROUP = "workers"

_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")
_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?$")
_UID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")
_REPLY = re.compile(r"^berth:(?P<ns>[^:]+):s:(?P<uid>[^:]+):results$")


def _check(value: str, pattern: re.Pattern[str], what: str) -> str:
    if not isinstance(value, str) or not pattern.match(value):
        raise ValueError(f"invalid {what}: {value!r}")
    return value


def namespace(ns: str) -> str:
    """``ns`` if it is a valid namespace name (DNS label)."""
    return _check(ns, _DNS_LABEL, "namespace")


def task_stream(ns: str, laneworker: str) -> str:
    """``berth:{ns}:lw:{laneworker}:tasks``."""
    return f"berth:{namespace(ns)}:lw:{_check(laneworker, _DNS_SUBDOMAIN, 'LaneWorker name')}:tasks"


def dead_letter_stream(ns: str, laneworker: str) -> str:
    """``berth:{ns}:lw:{laneworker}:dead`` (Berth: malformed task messages)."""
    return f"berth:{namespace(ns)}:lw:{_check(laneworker, _DNS_SUBDOMAIN, 'LaneWorker name')}:dead"


def alive_key(ns: str, laneworker: str, consumer: str) -> str:
    """``berth:{ns}:lw:{laneworker}:alive:{consumer}`` (Berth: worker liveness, TTL key)."""
    lw = _check(laneworker, _DNS_SUBDOMAIN, "LaneWorker name")
    return f"berth:{namespace(ns)}:lw:{lw}:alive:{_check(consumer, _DNS_SUBDOMAIN, 'consumer')}"


def task_claim_key(ns: str, session_uid: str, task_id: str) -> str:
    """``berth:{ns}:task:{session_uid}:{task_id}`` (Berth: set once, by the worker that runs the
    task; a second delivery finds it and is not run)."""
    uid = _check(session_uid, _UID, "session uid")
    return f"berth:{namespace(ns)}:task:{uid}:{_check(task_id, _UID, 'task id')}"


def reply_stream(ns: str, session_uid: str) -> str:
    """``berth:{ns}:s:{session_uid}:results``."""
    return f"berth:{namespace(ns)}:s:{_check(session_uid, _UID, 'session uid')}:results"


def parse_reply_stream(name: str) -> tuple[str, str]:
    """``(ns, session_uid)`` of a reply stream name; ValueError if it is not one."""
    match = _REPLY.match(name)
    if not match:
        raise ValueError(f"not a session reply stream: {name!r}")
    ns, uid = match["ns"], match["uid"]
    namespace(ns)
    _check(uid, _UID, "session uid")
    return ns, uid
