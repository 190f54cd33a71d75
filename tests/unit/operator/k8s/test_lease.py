"""Leader election against an in-memory Lease store that enforces resourceVersion like the
apiserver does (create → AlreadyExists, stale update → Conflict)."""

from __future__ import annotations

import copy
from typing import Any

from berth_operator.errors import AlreadyExists, Conflict
from berth_operator.k8s.lease import LeaderElector


class LeaseStore:
    def __init__(self) -> None:
        self.obj: dict[str, Any] | None = None
        self.rv = 0

    async def get_lease(self, namespace: str, name: str) -> dict[str, Any] | None:
        return copy.deepcopy(self.obj)

    async def create_lease(self, body: dict[str, Any]) -> dict[str, Any]:
        if self.obj is not None:
            raise AlreadyExists("exists")
        return self._store(body)

    async def replace_lease(self, body: dict[str, Any]) -> dict[str, Any]:
        assert self.obj is not None
        if body["metadata"].get("resourceVersion") != self.obj["metadata"]["resourceVersion"]:
            raise Conflict("conflict")
        return self._store(body)

    def _store(self, body: dict[str, Any]) -> dict[str, Any]:
        self.rv += 1
        self.obj = copy.deepcopy(body)
        self.obj["metadata"]["resourceVersion"] = str(self.rv)
        return copy.deepcopy(self.obj)


def elector(store: LeaseStore, identity: str, duration: float = 30) -> LeaderElector:
    return LeaderElector(
        store,
        namespace="ns",
        name="lease",
        identity=identity,  # type: ignore[arg-type]
        duration_seconds=duration,
        renew_seconds=1,
    )


async def test_only_one_replica_leads_until_the_lease_is_released() -> None:
    store = LeaseStore()
    a, b = elector(store, "a"), elector(store, "b")
    assert await a.try_acquire_or_renew()
    assert not await b.try_acquire_or_renew()
    assert await a.try_acquire_or_renew()  # renew
    await a.release()
    assert await b.try_acquire_or_renew()
    assert not await a.try_acquire_or_renew()
    assert store.obj is not None and store.obj["spec"]["holderIdentity"] == "b"
    assert store.obj["spec"]["leaseTransitions"] == 1


async def test_an_expired_lease_is_taken_over() -> None:
    store = LeaseStore()
    a = elector(store, "a")
    assert await a.try_acquire_or_renew()
    assert store.obj is not None
    store.obj["spec"]["renewTime"] = "2000-01-01T00:00:00.000000Z"  # the holder died long ago
    assert await elector(store, "b").try_acquire_or_renew()


async def test_a_stale_write_loses() -> None:
    store = LeaseStore()
    a, b = elector(store, "a"), elector(store, "b")
    assert await a.try_acquire_or_renew()
    stale = await store.get_lease("ns", "lease")
    assert store.obj is not None
    store.obj["spec"]["renewTime"] = "2000-01-01T00:00:00.000000Z"
    assert await b.try_acquire_or_renew()  # expired: b takes over
    assert stale is not None
    try:
        await store.replace_lease(stale)
    except Conflict:
        pass
    else:
        raise AssertionError("a write with an old resourceVersion must conflict")
