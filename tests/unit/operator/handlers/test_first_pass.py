"""A session's first pass (handlers.agentsession): the objects its first pod needs are written
ahead of the decision, only on that pass and only for a session that parses; an LLM Secret
allowed for Berth is remembered briefly, without its values, and a refused one never."""

from __future__ import annotations

from typing import Any

import pytest
from berth_operator.handlers import session_placement, session_reads
from berth_operator.handlers.context import OperatorContext
from berth_operator.settings import OperatorSettings

from tests.unit.operator.fixtures import make_pod, make_session


class FakeSecrets:
    """The Secret calls a first pass makes: the LLM Secret read (``llm``: its answer), the
    session Secret ensured (``ensured``: session names)."""

    def __init__(self, llm: dict[str, Any] | None = None) -> None:
        self.llm = llm
        self.reads = 0
        self.ensured: list[str] = []

    async def read_secret_shared(self, namespace: str, name: str) -> dict[str, Any] | None:
        self.reads += 1
        return self.llm

    async def ensure_session_secret(self, ref: Any, master: Any, redis: str, **_: Any) -> str:
        self.ensured.append(ref.name)
        return "token"


class FakeDisruption:
    def __init__(self) -> None:
        self.pdbs: list[str] = []
        self.done: set[str] = set()

    async def ensure_namespace(self, namespace: str, owner: Any) -> None:
        self.pdbs.append(namespace)
        self.done.add(namespace)


def ctx_with(secrets: FakeSecrets) -> OperatorContext:
    return OperatorContext(
        settings=OperatorSettings(),
        kube=None,  # type: ignore[arg-type]
        runtime=None,  # type: ignore[arg-type]
        secrets=secrets,  # type: ignore[arg-type]
        disruption=FakeDisruption(),  # type: ignore[arg-type]
    )


async def test_a_new_session_has_its_secret_written_ahead() -> None:
    secrets = FakeSecrets()
    ctx = ctx_with(secrets)
    task = session_placement.prepare_early(ctx, make_session("s1").obj(), [])
    assert task is not None
    await task
    assert secrets.ensured == ["s1"] and ctx.memory.token("uid-1234567890") == "token"
    # the namespace's PDB is not the session's: written once, before the first pod
    assert ctx.disruption.pdbs == []  # type: ignore[union-attr]


@pytest.mark.parametrize(
    "case",
    ["status written", "pod exists", "pod being created", "spec does not parse"],
)
def test_no_write_ahead_after_the_first_pass_or_for_a_bad_spec(case: str) -> None:
    ctx = ctx_with(FakeSecrets())
    session = make_session("s1")
    cached = []
    if case == "status written":
        session.with_status(phase="Pending")
    elif case == "pod exists":
        cached = [make_pod(1, "s1").observed()]
    elif case == "pod being created":
        ctx.memory("uid-1234567890").inflight = ("s1-1", 0.0)
    else:
        session.with_spec(model=None)
    assert session_placement.prepare_early(ctx, session.obj(), cached) is None


LLM_SECRET = {
    "metadata": {"name": "llm", "labels": {"berth.dev/llm-credentials": "true"}},
    "data": {"api-key": "c2VjcmV0"},
}


async def test_an_allowed_llm_secret_is_read_once_per_burst_and_kept_without_values(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    secrets = FakeSecrets(LLM_SECRET)
    ctx = ctx_with(secrets)
    first = await session_reads.llm_secret(ctx, "ns", "llm")
    again = await session_reads.llm_secret(ctx, "ns", "llm")
    assert secrets.reads == 1 and first == again
    assert again is not None and again["data"] == {"api-key": ""}  # no value kept
    monkeypatch.setattr(session_reads, "LLM_SECRET_TTL_SECONDS", 0.0)
    await session_reads.llm_secret(ctx, "ns", "llm")
    assert secrets.reads == 2  # remembered only briefly


async def test_a_refused_llm_secret_is_read_again_each_time() -> None:
    refused = {**LLM_SECRET, "metadata": {"name": "llm", "labels": {}}}
    secrets = FakeSecrets(refused)
    ctx = ctx_with(secrets)
    for _ in range(2):
        assert await session_reads.llm_secret(ctx, "ns", "llm") is not None
    secrets.llm = None  # deleted
    assert await session_reads.llm_secret(ctx, "ns", "llm") is None
    assert secrets.reads == 3 and not ctx.llm_secrets
