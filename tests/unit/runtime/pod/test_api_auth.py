"""The session API's token check (docs/architecture.md §11): every endpoint but /healthz,
/readyz and /metrics refuses a request without the token (401) or with a wrong one (403), in
constant time, and counts the refusal; the right token in ``Authorization: Bearer`` or in
``X-Berth-Token`` (the header the apiserver's pod proxy forwards) is accepted. Runs the real
aiohttp application in-process."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from aiohttp.test_utils import TestClient, TestServer
from prometheus_client.parser import text_string_to_metric_families

from berth_contract.options import parse_options
from session_runtime.metrics import SessionMetrics
from session_runtime.pod.config import parse_env
from session_runtime.pod.http import make_app
from session_runtime.pod.lifecycle import SessionPod
from tests.unit.runtime.pod.test_server_parts import env

TOKEN = "k9yQq1dQ1kMbpbo2eW5m6l8Hq2wq4Cq1vEo9R7g3x0Y"
GUARDED = [
    ("GET", "/v1/state", None),
    ("POST", "/v1/passivate", {"reason": "manual"}),
    ("POST", "/v1/messages", {"prompt": "rm -rf /"}),
    ("GET", "/v1/runs/run-1/events", None),
    ("GET", "/v1/unknown", None),
]


def refused(metrics: SessionMetrics, reason: str) -> float:
    for family in text_string_to_metric_families(metrics.render().decode()):
        for s in family.samples:
            if s.name == "berth_session_api_refused_total" and s.labels == {"reason": reason}:
                return float(s.value)
    return 0.0


@pytest.fixture
async def served(tmp_path: Path) -> AsyncIterator[tuple[TestClient[Any, Any], SessionPod]]:
    pod = SessionPod(
        parse_env(env(tmp_path)),
        parse_options({"prompt": "p", "model": "openai/m"}),
        SessionMetrics(),
    )
    client: TestClient[Any, Any] = TestClient(TestServer(make_app(pod, TOKEN.encode())))
    await client.start_server()
    try:
        yield client, pod
    finally:
        await client.close()


async def call(
    client: TestClient[Any, Any], method: str, path: str, body: Any, headers: dict[str, str]
) -> int:
    data = None if body is None else json.dumps(body)
    resp = await client.request(method, path, data=data, headers=headers)
    await resp.read()
    return int(resp.status)


@pytest.mark.parametrize(("method", "path", "body"), GUARDED)
async def test_missing_token_is_401_and_wrong_token_403(
    served: tuple[TestClient[Any, Any], SessionPod], method: str, path: str, body: Any
) -> None:
    client, pod = served
    assert await call(client, method, path, body, {}) == 401
    assert await call(client, method, path, body, {"Authorization": "Basic " + TOKEN}) == 401
    assert await call(client, method, path, body, {"Authorization": "Bearer "}) == 401
    for wrong in (TOKEN[:-1], TOKEN + "x", TOKEN.upper(), "x" * len(TOKEN)):
        assert await call(client, method, path, body, {"Authorization": f"Bearer {wrong}"}) == 403
        assert await call(client, method, path, body, {"X-Berth-Token": wrong}) == 403
    assert refused(pod.metrics, "missing") == 3
    assert refused(pod.metrics, "wrong") == 8
    # Nothing was done for a refused call: no passivation, no run.
    assert pod.passivation is None and pod.phase == "starting"


async def test_right_token_is_accepted_in_either_header(
    served: tuple[TestClient[Any, Any], SessionPod],
) -> None:
    client, pod = served
    assert await call(client, "GET", "/v1/state", None, {"Authorization": f"Bearer {TOKEN}"}) == 200
    assert await call(client, "GET", "/v1/state", None, {"X-Berth-Token": TOKEN}) == 200
    assert await call(client, "GET", "/v1/state", None, {"authorization": f"bearer {TOKEN}"}) == 200
    status = await call(
        client, "POST", "/v1/passivate", {"reason": "manual"}, {"X-Berth-Token": TOKEN}
    )
    assert status == 202 and pod.passivation is not None
    assert refused(pod.metrics, "missing") == refused(pod.metrics, "wrong") == 0


async def test_probes_and_metrics_need_no_token_and_never_show_it(
    served: tuple[TestClient[Any, Any], SessionPod],
) -> None:
    client, _ = served
    for path in ("/healthz", "/readyz", "/metrics"):
        resp = await client.get(path)
        text = await resp.text()
        assert resp.status in (200, 503), path  # /readyz is 503 until the session is built
        assert TOKEN not in text
    resp = await client.get("/v1/state", headers={"X-Berth-Token": TOKEN})
    assert TOKEN not in await resp.text()


def test_an_empty_token_is_refused_at_build_time(tmp_path: Path) -> None:
    pod = SessionPod(
        parse_env(env(tmp_path)),
        parse_options({"prompt": "p", "model": "openai/m"}),
        SessionMetrics(),
    )
    with pytest.raises(ValueError, match="non-empty token"):
        make_app(pod, b"")


async def test_outcome_long_poll_answers_the_message_or_204_when_the_end_is_not_reported(
    tmp_path: Path,
) -> None:
    """``GET /v1/outcome?waitSeconds=N`` waits for the process's word on its end: the message
    text when it is done with the session, 204 when the wait runs out or the process ends
    without reporting (resolved with None, so its shutdown does not wait for the poll)."""
    import asyncio

    auth = {"Authorization": f"Bearer {TOKEN}"}
    for result in ('{"outcome":"passivated"}', None):
        opts = parse_options({"prompt": "p", "model": "openai/m"})
        pod = SessionPod(parse_env(env(tmp_path)), opts, SessionMetrics())
        outcome: asyncio.Future[str | None] = asyncio.get_running_loop().create_future()
        client: TestClient[Any, Any] = TestClient(
            TestServer(make_app(pod, TOKEN.encode(), outcome))
        )
        await client.start_server()
        try:
            resp = await client.get("/v1/outcome?waitSeconds=0.05", headers=auth)
            assert resp.status == 204
            for bad in ("301", "-1", "nan", "soon"):
                resp = await client.get(f"/v1/outcome?waitSeconds={bad}", headers=auth)
                assert resp.status == 400, bad
            poll = asyncio.ensure_future(client.get("/v1/outcome?waitSeconds=30", headers=auth))
            await asyncio.sleep(0.05)
            assert not poll.done()
            outcome.set_result(result)
            resp = await asyncio.wait_for(poll, 5)
            if result is None:
                assert resp.status == 204
            else:
                assert (resp.status, await resp.text()) == (200, result)
        finally:
            await client.close()
