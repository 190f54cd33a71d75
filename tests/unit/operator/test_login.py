"""kopf's login handler: kopf's default credentials over a session with a bounded pool."""

from __future__ import annotations

import logging
from types import SimpleNamespace
from typing import Any

import kopf
import pytest
from berth_operator.handlers import login
from berth_operator.handlers.context import OperatorContext
from berth_operator.settings import OperatorSettings, ScopeSettings, ServerSettings


def settings(namespaces: list[str], pool: int = 32) -> OperatorSettings:
    return OperatorSettings(
        scope=ScopeSettings(namespaces=namespaces), server=ServerSettings(kube_connection_pool=pool)
    )


@pytest.mark.parametrize(
    ("namespaces", "pool", "limit"),
    [([], 32, 5 + 4 + 32), (["a"], 32, 5 + 4 + 32), (["a", "b", "c"], 10, 15 + 4 + 10)],
)
def test_the_limit_leaves_the_request_pool_beside_every_watch_stream(
    namespaces: list[str], pool: int, limit: int
) -> None:
    assert login.connection_limit(settings(namespaces, pool)) == limit


async def test_login_returns_kopfs_credentials_over_a_bounded_session(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    info = kopf.ConnectionInfo(
        server="https://apiserver.test:6443", token="secret-token", insecure=True, priority=30
    )
    seen: dict[str, Any] = {}

    def default_login(**kwargs: Any) -> kopf.ConnectionInfo:
        seen.update(kwargs)
        return info

    monkeypatch.setattr(kopf, "login_via_client", default_login)
    ours = settings(["a", "b"], pool=7)
    ctx = OperatorContext(settings=ours, kube=None, runtime=None)  # type: ignore[arg-type]
    result = await login.login(
        logger=logging.getLogger("test"),
        settings=kopf.OperatorSettings(),
        memo=SimpleNamespace(ctx=ctx),  # type: ignore[arg-type]
    )
    try:
        assert isinstance(result, kopf.AiohttpSession)
        assert result.server == info.server and result.priority == 30
        session = result.aiohttp_session
        assert session.connector is not None
        assert session.connector.limit == login.connection_limit(ours) == 10 + 4 + 7
        assert session.headers["Authorization"] == "Bearer secret-token"
        assert "settings" in seen and "logger" in seen
    finally:
        await result.aiohttp_session.close()


async def test_no_credentials_is_a_login_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(kopf, "login_via_client", lambda **_: None)
    with pytest.raises(kopf.LoginError, match="no Kubernetes credentials"):
        await login.login(
            logger=logging.getLogger("test"),
            settings=kopf.OperatorSettings(),
            memo=SimpleNamespace(),  # type: ignore[arg-type]
        )
