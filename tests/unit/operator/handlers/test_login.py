"""kopf's login handler: the operator's credentials over its one bounded connection pool."""

from __future__ import annotations

import logging
from types import SimpleNamespace
from typing import Any

import kopf
import pytest
from berth_operator.handlers import login
from berth_operator.handlers.context import OperatorContext
from berth_operator.k8s.client import KubeClient
from berth_operator.k8s.connection import ApiSession
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


def _only_login(monkeypatch: pytest.MonkeyPatch, found: Any) -> None:
    """kopf's three credential sources: the client library's loaders answer ``found``, the
    service-account and kubeconfig readers find nothing (whatever this machine has)."""
    monkeypatch.setattr(kopf, "login_via_client", found)
    monkeypatch.setattr(kopf, "login_with_service_account", lambda **_: None)
    monkeypatch.setattr(kopf, "login_with_kubeconfig", lambda **_: None)


async def test_login_returns_kopfs_session_over_the_operators_own_pool(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    info = kopf.ConnectionInfo(
        server="https://apiserver.test:6443", token="secret-token", insecure=True, priority=30
    )
    seen: dict[str, Any] = {}

    def default_login(**kwargs: Any) -> kopf.ConnectionInfo:
        seen.update(kwargs)
        return info

    _only_login(monkeypatch, default_login)
    ours = settings(["a", "b"], pool=7)
    pool = ApiSession(lambda: info, limit=login.connection_limit(ours))
    ctx = OperatorContext(settings=ours, kube=KubeClient(pool), runtime=None)  # type: ignore[arg-type]
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
        # One pool: Berth's own requests go over the very connector kopf's session uses,
        # and kopf closing its session (as it does on a new login) leaves the pool open.
        connector = session.connector
        berths = pool.client_session(info)
        assert berths.connector is connector
        await berths.close()
        await session.close()
        assert not connector.closed
    finally:
        await result.aiohttp_session.close()
        await pool.close()
    assert connector.closed


async def test_no_credentials_is_a_login_error(monkeypatch: pytest.MonkeyPatch) -> None:
    _only_login(monkeypatch, lambda **_: None)
    with pytest.raises(kopf.LoginError, match="no Kubernetes credentials"):
        await login.login(
            logger=logging.getLogger("test"),
            settings=kopf.OperatorSettings(),
            memo=SimpleNamespace(),  # type: ignore[arg-type]
        )


async def test_credentials_fall_back_to_kopfs_own_readers_without_the_client_library(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    info = kopf.ConnectionInfo(server="https://kubernetes.default.svc", token="sa-token")
    _only_login(monkeypatch, lambda **_: None)  # as when `kubernetes` is not importable
    monkeypatch.setattr(kopf, "login_with_service_account", lambda **_: info)
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    monkeypatch.delenv("KUBERNETES_SERVICE_PORT", raising=False)
    assert login.credentials() is info


@pytest.mark.parametrize(
    ("host", "server"),
    [("10.96.0.1", "https://10.96.0.1:443"), ("fd00:10:96::1", "https://[fd00:10:96::1]:443")],
)
def test_in_a_pod_the_apiserver_is_addressed_as_the_kubelet_names_it(
    monkeypatch: pytest.MonkeyPatch, host: str, server: str
) -> None:
    """No cluster DNS needed: the address the kubelet sets in every container, as client-go's
    in-cluster config uses it; the service account's token and CA are kept."""
    info = kopf.ConnectionInfo(
        server="https://kubernetes.default.svc", token="sa-token", ca_path="/sa/ca.crt"
    )
    _only_login(monkeypatch, lambda **_: None)
    monkeypatch.setattr(kopf, "login_with_service_account", lambda **_: info)
    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", host)
    monkeypatch.setenv("KUBERNETES_SERVICE_PORT", "443")
    found = login.credentials()
    assert found.server == server
    assert (found.token, found.ca_path) == ("sa-token", "/sa/ca.crt")
    monkeypatch.setattr(kopf, "login_with_service_account", lambda **_: None)  # not in a pod
    with pytest.raises(kopf.LoginError):
        login.credentials()
