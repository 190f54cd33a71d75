"""Redis key names of the lane-task transport, the front door and the budget counters.

Part of the contract (:mod:`berth_contract`): the operator renders a lane's task stream into
``options.json`` and scales on its pressure; the session side publishes to it and reads its reply
stream; ``berth-worker`` consumes it. All of them spell a name only through these functions.

Below, ``<x>`` is a value and ``{...}`` is written literally: it is a Redis Cluster *hash tag*
(only the text between the first ``{`` and the next ``}`` picks the key's slot), so keys that one
script or transaction touches together always share a slot:

- task stream of a LaneWorker pool: ``berth:<ns>:lw:{<laneworker>}:tasks``, consumer group
  ``workers``, consumer name = the worker pod's name (docs/architecture.md §7);
- reply stream of a session: ``berth:<ns>:s:{<session_uid>}:results``;
- Berth additions: the pool's dead-letter stream ``berth:<ns>:lw:{<laneworker>}:dead`` (malformed
  task messages, with a reason) and a worker's liveness key
  ``berth:<ns>:lw:{<laneworker>}:alive:<consumer>`` (a TTL key the worker refreshes; its absence
  marks the worker lost) share the pool's slot; the task-id claim
  ``berth:<ns>:task:{<session_uid>}:<task_id>`` shares the session's slot with its reply stream
  (the worker's reply script writes both);
- the front door (operator only): ``berth-gateway:s:{<session_uid>}:q`` and
  ``berth-gateway:s:{<session_uid>}:m:<message_id>`` share the session's slot; the index
  ``berth-gateway:active`` is one key of its own slot, written outside the scripts;
- budget counters (operator only): ``berth-budget:{<ns>/<policy>}:<window>`` and its
  ``...:denied`` set share the policy's slot.

A pool name used in two namespaces, or a session's keys and another key family, may share a slot;
that only places them on one node.

Every component is checked against the Kubernetes name rules, so a name can never inject ``:`` or
a pattern into a key. Errors: :class:`ValueError` with the offending value.
"""

from __future__ import annotations

import re

GROUP = "workers"

_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")
_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?$")
_UID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")
_REPLY = re.compile(r"^berth:(?P<ns>[^:{}]+):s:\{(?P<uid>[^:{}]+)\}:results$")


def _check(value: str, pattern: re.Pattern[str], what: str) -> str:
    if not isinstance(value, str) or not pattern.match(value):
        raise ValueError(f"invalid {what}: {value!r}")
    return value


def namespace(ns: str) -> str:
    """``ns`` if it is a valid namespace name (DNS label)."""
    return _check(ns, _DNS_LABEL, "namespace")


def _pool(ns: str, laneworker: str) -> str:
    return f"berth:{namespace(ns)}:lw:{{{_check(laneworker, _DNS_SUBDOMAIN, 'LaneWorker name')}}}"


def task_stream(ns: str, laneworker: str) -> str:
    """``berth:<ns>:lw:{<laneworker>}:tasks``."""
    return f"{_pool(ns, laneworker)}:tasks"


def dead_letter_stream(ns: str, laneworker: str) -> str:
    """``berth:<ns>:lw:{<laneworker>}:dead`` (Berth: malformed task messages)."""
    return f"{_pool(ns, laneworker)}:dead"


def alive_key(ns: str, laneworker: str, consumer: str) -> str:
    """``berth:<ns>:lw:{<laneworker>}:alive:<consumer>`` (Berth: worker liveness, TTL key)."""
    return f"{_pool(ns, laneworker)}:alive:{_check(consumer, _DNS_SUBDOMAIN, 'consumer')}"


def task_claim_key(ns: str, session_uid: str, task_id: str) -> str:
    """``berth:<ns>:task:{<session_uid>}:<task_id>`` (Berth: set once, by the worker that runs
    the task, to the task's entry id, then to ``replied`` by the script that writes its reply; a
    second delivery finds it and is not run). Same slot as the session's reply stream."""
    uid = _check(session_uid, _UID, "session uid")
    return f"berth:{namespace(ns)}:task:{{{uid}}}:{_check(task_id, _UID, 'task id')}"


def reply_stream(ns: str, session_uid: str) -> str:
    """``berth:<ns>:s:{<session_uid>}:results``."""
    return f"berth:{namespace(ns)}:s:{{{_check(session_uid, _UID, 'session uid')}}}:results"


GATEWAY_PREFIX = "berth-gateway:"
"""Prefix of the front door's keys (the chart's Redis ACL gives them to the operator alone)."""

GATEWAY_ACTIVE = GATEWAY_PREFIX + "active"
"""Hash uid -> ``<ns>/<name>`` of every session with unfinished front-door messages."""


def gateway_queue(session_uid: str) -> str:
    """``berth-gateway:s:{<session_uid>}:q``: the session's unfinished message ids."""
    return f"{GATEWAY_PREFIX}s:{{{_check(session_uid, _UID, 'session uid')}}}:q"


def gateway_message(session_uid: str, message_id: str) -> str:
    """``berth-gateway:s:{<session_uid>}:m:<message_id>``: one message's record (same slot as
    the queue). ``message_id`` is the caller's idempotency key and is not checked here."""
    return f"{GATEWAY_PREFIX}s:{{{_check(session_uid, _UID, 'session uid')}}}:m:{message_id}"


def budget_window(ns: str, policy: str, window: str) -> str:
    """``berth-budget:{<ns>/<policy>}:<window>``: one BudgetPolicy window's counters. The
    prefix is not ``berth:``, so no glob of the session or worker ACL users can match it."""
    return f"berth-budget:{{{namespace(ns)}/{policy}}}:{window}"


def budget_denied(window_key: str) -> str:
    """The set of sessions denied in the window whose hash is ``window_key`` (same slot)."""
    return f"{window_key}:denied"


def parse_reply_stream(name: str) -> tuple[str, str]:
    """``(ns, session_uid)`` of a reply stream name; ValueError if it is not one."""
    match = _REPLY.match(name)
    if not match:
        raise ValueError(f"not a session reply stream: {name!r}")
    ns, uid = match["ns"], match["uid"]
    namespace(ns)
    _check(uid, _UID, "session uid")
    return ns, uid
