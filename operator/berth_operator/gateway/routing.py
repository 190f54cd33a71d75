"""The front door's decisions (pure): what a session looks like to it, who may call whom, and
what the delivery loop does next with a session's oldest unfinished message.

A session is addressed as ``<namespace>/<name>``. A caller is the session's owner (anyone with
its API token, as for the session pod's own API) or another session (a peer, authenticated with
its own token and uid). A peer call is allowed when the caller's ``spec.peers`` names the target
or selects its labels, in the same namespace; the chain of sessions a call went through must not
contain the target (a loop: A → B → A) and is at most ``max_depth`` calls long.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Literal

from berth_operator.api.agentsession import PeersSpec

#: AgentSession phases after which no message can be delivered any more.
ENDED_PHASES: frozenset[str] = frozenset({"Succeeded", "Failed"})


@dataclass(frozen=True, slots=True)
class SessionView:
    """What the front door knows of one AgentSession (from the operator's watch)."""

    uid: str
    namespace: str
    name: str
    labels: dict[str, str] = field(default_factory=dict)
    keep_alive: bool = False
    phase: str | None = None
    pod_ip: str | None = None
    pod_name: str | None = None
    at_rest_since: datetime | None = None
    wake_requested_at: datetime | None = None
    peers: PeersSpec | None = None
    tenant_id: str | None = None
    correlation_id: str | None = None

    @property
    def key(self) -> str:
        """``<namespace>/<name>``."""
        return f"{self.namespace}/{self.name}"

    @property
    def at_rest(self) -> bool:
        """Passivated by the idle reaper and not woken since (no pod, waiting)."""
        return self.phase == "Passivated" and self.at_rest_since is not None

    @property
    def wake_pending(self) -> bool:
        """At rest, and a wake was asked for after it came to rest."""
        return (
            self.at_rest
            and self.wake_requested_at is not None
            and self.at_rest_since is not None
            and self.wake_requested_at >= self.at_rest_since
        )


def refuse_message(target: SessionView) -> str | None:
    """Why ``target`` cannot take messages at all (None when it can)."""
    if not target.keep_alive:
        return f"session {target.key} is not keepAlive: it takes no messages"
    if target.phase in ENDED_PHASES:
        return f"session {target.key} has ended ({target.phase})"
    return None


def refuse_peer(
    caller: SessionView, target: SessionView, caller_chain: list[str], max_depth: int
) -> tuple[list[str], str | None]:
    """(the new call's chain, None) when ``caller`` may ask ``target``, else ([], why not).

    ``caller_chain`` is the chain of the message the caller is answering now ([] when its run
    was not asked for by a peer); the new chain is that plus the caller."""
    if caller.namespace != target.namespace:
        return [], f"peer calls stay in one namespace ({caller.key} → {target.key})"
    if caller.peers is None or not caller.peers.allows(target.name, target.labels):
        return [], f"spec.peers of {caller.key} does not allow calling {target.key}"
    chain = [*caller_chain, caller.key]
    if target.key in chain:
        loop = " → ".join([*chain, target.key])
        return [], f"peer call refused: loop {loop}"
    if len(chain) > max_depth:
        path = " → ".join([*chain, target.key])
        return [], f"peer call refused: chain {path} is deeper than {max_depth} calls"
    return chain, None


Step = Literal["deliver", "poll", "wake", "wait", "fail"]


def next_step(view: SessionView | None, state: str) -> tuple[Step, str]:
    """What to do with a session's oldest unfinished message in ``state`` (queued or
    delivered): (step, reason). ``deliver`` it to the running pod; ``poll`` the pod for the run
    it started; ``wake`` the session at rest; ``wait`` for a pod; ``fail`` it for good."""
    if view is None:
        return "fail", "the session was deleted"
    why = refuse_message(view)
    if why is not None:
        return "fail", why
    if view.phase == "Running" and view.pod_ip:
        return ("poll", "run in progress") if state == "delivered" else ("deliver", "it runs")
    if view.at_rest and not view.wake_pending:  # also a delivered one: its pod reads the store
        return "wake", f"{view.key} is at rest"
    return "wait", f"waiting for a pod of {view.key} (phase {view.phase})"
