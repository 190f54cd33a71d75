"""In-session hooks: callbacks that observe every event and may block a tool call.

Owned by ``session_runtime.agent``; ``Session.register_hook`` adds entries, the session's emitter
fires them for every event in emission order (after stream consumers got the event).

A hook is ``(hook_id, event_type, handler, matcher)``: ``event_type`` is an event ``type`` or
``"*"``; ``matcher`` (optional) is ``{"tool": "<name>"}`` to match tool events of one tool.
``handler(event)`` may be sync or async. For ``pre_tool_use`` (A3S PreToolUse) a handler may
return ``{"action": "block", "reason": "..."}`` (or ``{"block": True, "reason": ...}``): the call
does not run and the model gets ``Blocked by hook '<id>': <reason>``. A raising handler is logged
and ignored — a broken hook never stops the session.
"""

from __future__ import annotations

import inspect
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from session_runtime.events import AgentEvent, Event

log = logging.getLogger(__name__)

HookHandler = Callable[[Event], Any]


@dataclass(frozen=True, slots=True)
class Hook:
    """A registered hook."""

    hook_id: str
    event_type: str
    handler: HookHandler
    matcher: dict[str, str] | None = None

    def matches(self, event: Event) -> bool:
        """True if this hook wants ``event``."""
        if self.event_type not in ("*", event.get("type")):
            return False
        tool = (self.matcher or {}).get("tool")
        return tool is None or tool == event.get("name")


def block_reason(value: Any) -> str | None:
    """The reason if a hook's return value blocks the call, else None."""
    if not isinstance(value, dict):
        return None
    if value.get("action") == "block" or value.get("block") is True:
        return str(value.get("reason") or "blocked")
    return None


class HookRegistry:
    """Ordered hooks of one session."""

    def __init__(self) -> None:
        self._hooks: list[Hook] = []

    def register(
        self,
        hook_id: str,
        event_type: str,
        handler: HookHandler,
        matcher: dict[str, str] | None = None,
    ) -> None:
        """Add (or replace, same ``hook_id``) a hook."""
        if not callable(handler):
            raise TypeError("hook handler must be callable")
        self.unregister(hook_id)
        self._hooks.append(Hook(hook_id, event_type, handler, matcher))

    def unregister(self, hook_id: str) -> bool:
        """Remove a hook; True if it existed."""
        before = len(self._hooks)
        self._hooks = [h for h in self._hooks if h.hook_id != hook_id]
        return len(self._hooks) != before

    def __len__(self) -> int:
        return len(self._hooks)

    async def fire(self, event: Event) -> str | None:
        """Run matching hooks in registration order; return ``"<hook_id>: <reason>"`` of the
        first that blocks (``pre_tool_use`` only), else None. All matching hooks run."""
        blocked: str | None = None
        for hook in list(self._hooks):
            if not hook.matches(event):
                continue
            try:
                value = hook.handler(AgentEvent(event))  # a copy each: hooks cannot edit it
                if inspect.isawaitable(value):
                    value = await value
            except Exception:
                log.exception("hook %s failed on %s", hook.hook_id, event.get("type"))
                continue
            reason = block_reason(value)
            if reason is not None and blocked is None and event.get("type") == "pre_tool_use":
                blocked = f"Blocked by hook '{hook.hook_id}': {reason}"
        return blocked
