"""Passivation of a session: reach a durable boundary so its pod can go (Berth; the A3S
``PassivationRequested`` event, reason ``node_drain`` | ``eviction`` | ``manual`` | ``suspend`` |
``idle_reaper`` | ``migration``).

Owned by ``session_runtime.agent``; :meth:`Session.passivate_async` calls :func:`passivate`.
The request is handed to the running loop through its ``RunControl``: no new LLM call starts (an
in-flight one is abandoned: it has no side effects), running tools may finish until the deadline,
the checkpoint is committed and the run ends with status ``passivated``. At the deadline the run's
task is cancelled and the last durable round stands (outcome ``timeout``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from session_runtime.agent.loop import Passivation
from session_runtime.agent.tasks import wait_task

if TYPE_CHECKING:
    from session_runtime.agent.run_driver import RunDriver


@dataclass(frozen=True, slots=True)
class PassivationResult:
    """How a passivation ended: ``outcome`` ``passivated`` (at a durable boundary) or
    ``timeout`` (tools cut off at the deadline; the last durable round stands), the ``run_id``
    (None before the first run) and its durable ``turn``."""

    outcome: str
    run_id: str | None
    turn: int

    def as_dict(self) -> dict[str, Any]:
        """``{"outcome", "run_id", "turn"}`` (the shape ``passivate`` returns)."""
        return {"outcome": self.outcome, "run_id": self.run_id, "turn": self.turn}


async def passivate(driver: RunDriver, reason: str, deadline_ms: int | None) -> PassivationResult:
    """Passivate the session ``driver`` runs (module docstring); ``deadline_ms`` is epoch ms on
    the HostEnv clock (None: wait for the boundary). Idempotent: a repeated call after the run
    ended returns the same result. Raises what the run's store raises (``FencedError``)."""
    slot = driver.slot
    if driver.passivation is not None and not slot.active:
        return driver.passivation
    request = Passivation(reason, deadline_ms)
    await driver.emit("passivation_requested", reason=reason, deadline_ms=deadline_ms)
    with slot.lock:
        slot.passivating = True
    try:
        running = slot.running()
        if running is None:  # idle: the saved session is the durable state
            driver.save_session()
            driver.passivation = _at_rest(driver)
            return driver.passivation
        task, loop, control = running
        control.passivation = request

        def poke() -> None:
            if control.llm_task is not None:
                control.llm_task.cancel()

        loop.call_soon_threadsafe(poke)
        timeout = None
        if deadline_ms is not None:
            timeout = max(deadline_ms - driver.env.now_ms(), 0) / 1000
        await wait_task(task, loop, timeout)
        if not task.done():
            loop.call_soon_threadsafe(task.cancel)
            await wait_task(task, loop, None)
        driver.passivation = driver.passivation or _at_rest(driver)
        return driver.passivation
    finally:
        with slot.lock:
            slot.passivating = False


def _at_rest(driver: RunDriver) -> PassivationResult:
    return PassivationResult("passivated", driver.last_run_id(), driver.conv.turn)
