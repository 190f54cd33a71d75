"""Fixtures for the budget tests: a private real ``redis-server`` (shared with the lane tests),
the budget service served over real HTTP on a free port, and sessions of the real agent loop
talking to the scripted OpenAI-compatible server through the openai client."""

from __future__ import annotations

import socket
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import pytest
from aiohttp import web
from berth_operator.budget.directory import BudgetDirectory
from berth_operator.budget.ledger import Ledger
from berth_operator.budget.service import BudgetService, Crossing, LoadToken
from berth_operator.redis_client import connect
from redis.asyncio import Redis

from tests.integration.lanes.conftest import redis_url  # noqa: F401  (fixture)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class ServiceUnderTest:
    """The budget service on ``url``; ``stop()`` / ``start()`` take it down and up again."""

    def __init__(
        self,
        redis: Redis[Any],
        port: int,
        directory: BudgetDirectory | None = None,
        load_token: LoadToken | None = None,
    ) -> None:
        self.directory = directory or BudgetDirectory()
        self.ledger = Ledger(redis)
        self.crossings: list[Crossing] = []
        self.service = BudgetService(
            self.ledger, self.directory, self.crossings.append, load_token=load_token
        )
        self.port = port
        self.url = f"http://127.0.0.1:{port}"
        self.runner: web.AppRunner | None = None

    async def start(self) -> None:
        app = web.Application()
        self.service.routes(app)
        self.runner = web.AppRunner(app, access_log=None)
        await self.runner.setup()
        await web.TCPSite(self.runner, "127.0.0.1", self.port).start()

    async def stop(self) -> None:
        if self.runner is not None:
            await self.runner.cleanup()
            self.runner = None


@pytest.fixture
async def budget_service(redis_url: str) -> AsyncIterator[ServiceUnderTest]:  # noqa: F811
    redis = connect(redis_url)
    await redis.flushdb()
    svc = ServiceUnderTest(redis, free_port())
    await svc.start()
    yield svc
    await svc.stop()
    await redis.aclose()


Factory = Callable[..., Awaitable[Any]]
