"""The campaign's model endpoint: the runtime's scripted OpenAI-compatible server, with turns made
from each session's plan and with injected failures.

Owned by the chaos harness; one :class:`ChaosModel` per campaign job serves every session. A
session process of epoch ``E``, attempt ``A`` is given the base URL
``http://<host>:<port>/m/<session>/<E>/<A>/v1`` (host: loopback, or an address pods reach for
the cluster campaign, where the ledger listens too); the path tells the model which plan to
answer from and which epoch/attempt to write into the ledger lines of the bash calls it asks for
(:func:`tests.chaos.ledger.tool_command`).

Turns follow the history (as the scripted server's ``history`` cursor): the answer to a request
whose history holds ``i`` assistant messages is round ``i`` of the plan (tool calls with ids
``<session>-<i>-<k>``), or the final text once the rounds are done. A resumed run therefore gets
exactly the turn its checkpoint calls for, whatever an abandoned process was told.

Failures (fault ``llm_fail``): while an attempt is marked failing, each request fails with the
attempt's percent chance, as HTTP 500 or a dropped connection (half each), drawn from a generator
seeded by (session, attempt).
"""

from __future__ import annotations

import contextvars
import random
import zlib
from dataclasses import dataclass
from typing import Any

from aiohttp import web

from session_runtime.llm.scripted import ScriptedServer
from tests.chaos.ledger import HOSTNAME_EPOCH, tool_command
from tests.chaos.scenario import SessionPlan

_CURRENT: contextvars.ContextVar[tuple[str, int, int] | None] = contextvars.ContextVar(
    "chaos_model_request", default=None
)


def final_text(session: str) -> str:
    """The model's answer once every round of ``session`` is done."""
    return f"all rounds of {session} done"


@dataclass(slots=True)
class _Failing:
    percent: int
    rng: random.Random


class ChaosModel(ScriptedServer):
    """The model server (module docstring). :meth:`register` a plan before its session starts;
    :meth:`fail_attempt` marks an attempt as failing."""

    def __init__(
        self, ledger_port: int, host: str = "127.0.0.1", epoch_from_hostname: bool = False
    ) -> None:
        super().__init__({"turns": [{"text": "unused"}], "on_exhausted": "repeat_last"}, host=host)
        self.ledger_port = ledger_port
        self.epoch_from_hostname = epoch_from_hostname
        """Ledger lines take epoch and attempt from the pod's name (cluster campaign), not the
        URL path (whose values a pod's fixed spec cannot vary)."""
        self.plans: dict[str, SessionPlan] = {}
        self._failing: dict[tuple[str, int], _Failing] = {}
        self.failures_injected = 0

    def base_url_for(self, session: str, epoch: int, attempt: int) -> str:
        """The base URL a session process of ``epoch``/``attempt`` uses."""
        return f"http://{self.host}:{self.port}/m/{session}/{epoch}/{attempt}/v1"

    def register(self, plan: SessionPlan) -> None:
        """Answer ``plan.name``'s requests from ``plan``."""
        self.plans[plan.name] = plan

    def forget(self, session: str) -> None:
        """Drop a finished session's plan, failure marks and request log."""
        self.plans.pop(session, None)
        for key in [k for k in self._failing if k[0] == session]:
            del self._failing[key]
        self.requests.clear()

    def fail_attempt(self, session: str, attempt: int, percent: int) -> None:
        """Fail ``percent`` % of the requests of this attempt (seeded by session and attempt)."""
        seed = zlib.crc32(f"{session}/{attempt}".encode())
        self._failing[(session, attempt)] = _Failing(percent, random.Random(seed))

    def app(self) -> web.Application:
        """The scripted server's routes plus ``/m/{session}/{epoch}/{attempt}/v1/...``."""
        app = super().app()
        app.router.add_post("/m/{session}/{epoch}/{attempt}/v1/chat/completions", self._tagged)
        return app

    async def _tagged(self, request: web.Request) -> web.StreamResponse:
        session = request.match_info["session"]
        epoch, attempt = int(request.match_info["epoch"]), int(request.match_info["attempt"])
        failing = self._failing.get((session, attempt))
        if failing is not None and failing.rng.randrange(100) < failing.percent:
            self.failures_injected += 1
            await request.read()
            if failing.rng.random() < 0.5:
                return web.json_response(
                    {"error": {"message": "injected failure", "type": "server_error"}},
                    status=500,
                )
            if request.transport is not None:
                request.transport.abort()  # a dropped connection, no response at all
            return web.Response(status=499)
        _CURRENT.set((session, epoch, attempt))
        return await self._chat(request)

    def _pick(self, key: str, messages: list[dict[str, Any]]) -> tuple[int, dict[str, Any]] | None:
        current = _CURRENT.get()
        plan = None if current is None else self.plans.get(current[0])
        if current is None or plan is None:
            return super()._pick(key, messages)
        _, epoch, attempt = current
        index = sum(1 for m in messages if m.get("role") == "assistant")
        if index >= len(plan.rounds):
            return index, {"text": final_text(plan.name)}
        calls = []
        for k, kind in enumerate(plan.rounds[index]):
            cid = f"{plan.name}-{index}-{k}"
            if kind == "ls":
                calls.append({"id": cid, "name": "ls", "arguments": {"path": "."}})
            else:
                mark: tuple[int | str, int | str] = (epoch, attempt)
                if self.epoch_from_hostname:
                    mark = (HOSTNAME_EPOCH, HOSTNAME_EPOCH)
                command = tool_command(self.ledger_port, cid, *mark, plan.linger_ms, host=self.host)
                calls.append({"id": cid, "name": "bash", "arguments": {"command": command}})
        return index, {"tool_calls": calls}
