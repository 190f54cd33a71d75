"""Tenant budgets across sessions: real Redis, the budget service over real HTTP, and sessions of
the real agent loop calling the scripted model through the openai client.

Every session's guard is :class:`ClusterBudgetGuard`; the service identifies it by its own API
token and takes its tenant from the directory (the operator's view of the cluster).
"""

from __future__ import annotations

import asyncio
import secrets
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from berth_operator.budget.directory import BudgetDirectory
from berth_operator.budget.ledger import window_key
from berth_operator.budget.policy import Identity, Policy, Price
from berth_operator.budget.service import TokenUnavailable
from berth_operator.redis_client import connect

from berth_contract.services import BUDGET_CHECK_PATH, BUDGET_RECORD_PATH, SESSION_UID_HEADER
from session_runtime import Agent, BudgetExhaustedError, SessionOptions
from session_runtime.budget.guard import ClusterBudgetGuard
from session_runtime.llm.scripted import ScriptedServer
from tests.integration.lanes.conftest import redis_url  # noqa: F401  (fixture)

from .conftest import ServiceUnderTest, free_port

pytestmark = [pytest.mark.redis, pytest.mark.timeout(180)]

ROUNDS = 8
USAGE = {"prompt_tokens": 100, "completion_tokens": 20}
PER_CALL = 120
SCRIPT: list[dict[str, Any]] = [
    *[{"tool_calls": [{"name": "ls", "arguments": {"path": "."}}], "usage": USAGE}] * ROUNDS,
    {"text": "done", "usage": USAGE},
]
MODEL = "openai/gpt-4o-mini"


class Tenant:
    """Five sessions of one tenant, each with its own uid, token, guard and hook log."""

    def __init__(self, svc: ServiceUnderTest, tenant: str, count: int, root: Path) -> None:
        self.sessions: list[dict[str, Any]] = []
        for i in range(count):
            uid, token = f"{tenant}-uid-{i}", secrets.token_urlsafe(32)
            name = f"{tenant}-s{i}"
            svc.directory.put_session(
                uid, token, Identity("team", name, tenant_id=tenant, model=MODEL)
            )
            ws = root / name
            ws.mkdir()
            self.sessions.append({"uid": uid, "token": token, "name": name, "ws": ws, "hooks": []})


def make_agent(srv: ScriptedServer) -> Agent:
    return Agent.create({"providers": {"openai": {"base_url": srv.base_url, "api_key": "k"}}})


async def run_session(
    agent: Agent, svc: ServiceUnderTest, s: dict[str, Any], failure: str = "Closed"
) -> str:
    """One run; its outcome ``done`` or the BudgetExhausted message."""
    guard = ClusterBudgetGuard(svc.url, s["uid"], s["token"], failure_policy=failure)
    session = agent.session(
        str(s["ws"]),
        SessionOptions(budget_guard=guard, llm_backoff_ms=1, model=MODEL, max_tool_rounds=50),
    )
    session.register_hook("budget", "budget_threshold_hit", s["hooks"].append)
    try:
        result = await session.send_async(f"task of {s['name']}")
        return str(result.text)
    except BudgetExhaustedError as exc:
        assert not session.is_closed()  # the contract: the session stays open
        return str(exc)
    finally:
        await guard.close()


async def test_budget_policy_two_tenants_small_one_denied_other_unaffected(
    budget_service: ServiceUnderTest, tmp_path: Path
) -> None:
    svc = budget_service
    limit = 1500
    svc.directory.put_policy(
        Policy("team", "small", "acme", {"totalTokens": limit}, soft_limit_percent=50)
    )
    svc.directory.put_policy(Policy("team", "large", "globex", {"totalTokens": 1_000_000}))
    small, large = Tenant(svc, "acme", 5, tmp_path), Tenant(svc, "globex", 5, tmp_path)
    async with ScriptedServer(SCRIPT) as srv:
        agent = make_agent(srv)
        try:
            outcomes = await asyncio.gather(
                *(run_session(agent, svc, s) for s in small.sessions + large.sessions)
            )
        finally:
            await agent.close_async()
    acme, globex = outcomes[:5], outcomes[5:]
    assert globex == ["done"] * 5
    assert all(o.startswith("Budget exhausted on 'totalTokens': BudgetPolicy small") for o in acme)

    window = svc.directory.policies("team")[0].window(__import__("time").time())
    acme_state = await svc.ledger.state(window_key("team", "small", window))
    globex_state = await svc.ledger.state(window_key("team", "large", window))
    # Every session's last call may overshoot by its completion plus estimate error, no more.
    assert acme_state.used["totalTokens"] <= limit + 5 * PER_CALL
    assert acme_state.reserved["totalTokens"] == 0  # every reservation settled or released
    assert acme_state.sessions_denied == 5 and acme_state.denied >= 5
    assert globex_state.used["totalTokens"] == 5 * (ROUNDS + 1) * PER_CALL
    assert globex_state.denied == 0

    for s in small.sessions:
        kinds = [(h["kind"], h["resource"]) for h in s["hooks"]]
        assert kinds[-1] == ("hard", "totalTokens")
    soft_seen = [
        s
        for s in small.sessions
        if ("soft", "totalTokens") in [(h["kind"], h["resource"]) for h in s["hooks"]]
    ]
    assert soft_seen, "no acme session saw the soft threshold"
    for s in soft_seen:  # at most once per session, policy, resource and window
        assert [h["kind"] for h in s["hooks"]].count("soft") == 1
    assert all(s["hooks"] == [] for s in large.sessions)
    assert {c.kind for c in svc.crossings if c.policy.name == "small"} == {"soft", "hard"}
    assert not [c for c in svc.crossings if c.policy.name == "large"]


@pytest.mark.parametrize("failure", ["Closed", "Open"])
async def test_budget_policy_service_stopped_fail_closed_or_open(
    budget_service: ServiceUnderTest, tmp_path: Path, failure: str
) -> None:
    svc = budget_service
    svc.directory.put_policy(
        Policy("team", "p", "acme", {"totalTokens": 10_000}, failure_policy=failure)  # type: ignore[arg-type]
    )
    (s,) = Tenant(svc, "acme", 1, tmp_path).sessions
    async with ScriptedServer([{"text": "first", "usage": USAGE}, {"text": "second"}]) as srv:
        agent = make_agent(srv)
        guard = ClusterBudgetGuard(svc.url, s["uid"], s["token"], failure_policy="Closed")
        session = agent.session(
            str(s["ws"]), SessionOptions(budget_guard=guard, llm_backoff_ms=1, model=MODEL)
        )
        try:
            assert (await session.send_async("one")).text == "first"
            await svc.stop()
            if failure == "Closed":
                with pytest.raises(BudgetExhaustedError, match=r"'budget_service'.*unreachable"):
                    await session.send_async("two")
                assert len(srv.requests) == 1  # the call never left
            else:
                assert (await session.send_async("two")).text == "second"
        finally:
            await guard.close()
            await agent.close_async()


async def test_budget_policy_edit_applies_within_one_call(
    budget_service: ServiceUnderTest, tmp_path: Path
) -> None:
    svc = budget_service
    svc.directory.put_policy(Policy("team", "p", "acme", {"totalTokens": 50}))
    (s,) = Tenant(svc, "acme", 1, tmp_path).sessions
    async with ScriptedServer([{"text": "paid", "usage": USAGE}]) as srv:
        agent = make_agent(srv)
        try:
            assert (await run_session(agent, svc, s)).startswith("Budget exhausted")
            svc.directory.put_policy(Policy("team", "p", "acme", {"totalTokens": 10_000}))
            assert await run_session(agent, svc, s) == "paid"
        finally:
            await agent.close_async()


async def test_budget_policy_cost_from_price_table(
    budget_service: ServiceUnderTest, tmp_path: Path
) -> None:
    svc = budget_service
    prices = {MODEL: Price(prompt=2.0, completion=10.0)}  # USD per million tokens
    svc.directory.put_policy(Policy("team", "usd", "acme", {"costMicroUSD": 10_000}, prices=prices))
    (s,) = Tenant(svc, "acme", 1, tmp_path).sessions
    async with ScriptedServer([{"text": "ok", "usage": USAGE}]) as srv:
        agent = make_agent(srv)
        try:
            assert await run_session(agent, svc, s) == "ok"
        finally:
            await agent.close_async()
    window = svc.directory.policies("team")[0].window(__import__("time").time())
    state = await svc.ledger.state(window_key("team", "usd", window))
    assert state.used["costMicroUSD"] == 100 * 2 + 20 * 10


async def test_budget_policy_requests_cannot_be_forged(
    budget_service: ServiceUnderTest, tmp_path: Path
) -> None:
    """A session cannot act as another (wrong token → 401), cannot name its tenant (the
    request has no say in it), and cannot settle another session's reservation."""
    svc = budget_service
    svc.directory.put_policy(Policy("team", "p", "acme", {"totalTokens": 1000}))
    a, b = Tenant(svc, "acme", 2, tmp_path).sessions
    async with aiohttp.ClientSession() as http:

        async def post(who: dict[str, Any], token: str, path: str, body: Any) -> Any:
            headers = {"Authorization": f"Bearer {token}", SESSION_UID_HEADER: who["uid"]}
            async with http.post(svc.url + path, json=body, headers=headers) as resp:
                return resp.status, await resp.json()

        assert (await post(a, b["token"], BUDGET_CHECK_PATH, {"estimatedTokens": 1}))[0] == 401
        assert (await post(a, "", BUDGET_CHECK_PATH, {"estimatedTokens": 1}))[0] == 401
        bad = {"estimatedTokens": "many", "tenantId": "globex"}
        assert (await post(a, a["token"], BUDGET_CHECK_PATH, bad))[0] == 400
        status, reply = await post(a, a["token"], BUDGET_CHECK_PATH, {"estimatedTokens": 600})
        assert status == 200 and reply["decision"] == "allow"
        # b tries to release a's reservation: nothing settles, a's 600 stay reserved.
        status, out = await post(
            b, b["token"], BUDGET_RECORD_PATH, {"reservations": reply["reservations"]}
        )
        assert status == 200 and out == {"settled": 0}
        status, deny = await post(b, b["token"], BUDGET_CHECK_PATH, {"estimatedTokens": 600})
        assert deny["decision"] == "deny" and deny["consumed"] == 600


async def test_a_new_leader_reads_a_listed_sessions_token_on_its_first_call(
    redis_url: str,  # noqa: F811
) -> None:
    """The operator's directory knows a session from the LIST (identity, no token yet): its first
    call has the token read (``load_token``) and is answered; a token that cannot be read now is
    a 503 with Retry-After, never a 401 (which a Closed guard would turn into a denied call);
    an unknown session is a 401 and reads nothing."""

    tokens: dict[str, str] = {}
    secrets_of = {"uid-a": "token-a"}  # what the sessions' Secrets hold
    loads: list[str] = []
    apiserver_up = False

    async def load(who: Identity, uid: str) -> None:
        loads.append(uid)
        if not apiserver_up:
            raise TokenUnavailable("cannot reach the Kubernetes API")
        tokens[uid] = secrets_of[uid]

    redis = connect(redis_url)
    await redis.flushdb()
    svc = ServiceUnderTest(redis, free_port(), BudgetDirectory(tokens.get), load)
    svc.directory.put_policy(Policy("team", "p", "acme", {"totalTokens": 1000}))
    svc.directory.put_identity("uid-a", Identity("team", "a", tenant_id="acme", model=MODEL))
    await svc.start()
    try:
        async with aiohttp.ClientSession() as http:

            async def check(uid: str, token: str) -> tuple[int, Any, str | None]:
                headers = {"Authorization": f"Bearer {token}", SESSION_UID_HEADER: uid}
                body = {"estimatedTokens": 10}
                async with http.post(
                    svc.url + BUDGET_CHECK_PATH, json=body, headers=headers
                ) as resp:
                    return resp.status, await resp.json(), resp.headers.get("Retry-After")

            status, reply, retry = await check("uid-a", "token-a")
            assert (status, reply["error"], retry) == (503, "unavailable", "1")
            apiserver_up = True
            status, reply, _ = await check("uid-a", "token-a")
            assert status == 200 and reply["decision"] == "allow", reply
            assert (await check("uid-a", "token-a"))[0] == 200
            assert loads == ["uid-a", "uid-a"]  # read until it was had, then from the cache
            assert (await check("uid-a", "forged"))[0] == 401
            assert (await check("uid-nobody", "token-a"))[0] == 401
            # a wrong token asks the loader again (the operator's answers from its cache); an
            # unknown session never
            assert loads == ["uid-a", "uid-a", "uid-a"]
    finally:
        await svc.stop()
        await redis.aclose()
