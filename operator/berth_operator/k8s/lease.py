"""Leader election with a coordination.k8s.io/v1 Lease (the client-go leaderelection scheme).

One replica holds the Lease and runs the controllers; the other waits. The holder renews every
``renew_seconds``; a candidate takes the Lease over when ``renewTime + leaseDurationSeconds`` has
passed. Writes use the Lease's resourceVersion, so two candidates can never both win. A holder
that cannot renew within the lease duration loses leadership (``lost`` is set and the caller
exits: it is safer to restart than to keep acting on a Lease someone else may hold). On a clean
shutdown the holder releases the Lease (empty holder) so the standby takes over at once.
"""

from __future__ import annotations

import asyncio
import logging
from datetime import UTC, datetime, timedelta
from typing import Any

from berth_operator.errors import AlreadyExists, Conflict, KubeError
from berth_operator.k8s.client import KubeClient

log = logging.getLogger("berth.lease")


def _now() -> datetime:
    return datetime.now(UTC)


def _fmt(ts: datetime) -> str:
    return ts.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _parse(value: Any) -> datetime | None:
    if not isinstance(value, str):
        return None
    try:
        return datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None


class LeaderElector:
    """Acquire, renew and release one Lease."""

    def __init__(
        self,
        kube: KubeClient,
        *,
        namespace: str,
        name: str,
        identity: str,
        duration_seconds: float,
        renew_seconds: float,
    ) -> None:
        self.kube = kube
        self.namespace = namespace
        self.name = name
        self.identity = identity
        self.duration = duration_seconds
        self.renew = renew_seconds
        self.lost = asyncio.Event()
        self._last_renew: datetime | None = None

    def _body(self, rv: str | None, transitions: int, acquire: datetime | None) -> dict[str, Any]:
        now = _now()
        meta: dict[str, Any] = {"name": self.name, "namespace": self.namespace}
        if rv:
            meta["resourceVersion"] = rv
        return {
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": meta,
            "spec": {
                "holderIdentity": self.identity,
                "leaseDurationSeconds": max(1, round(self.duration)),
                "acquireTime": _fmt(acquire or now),
                "renewTime": _fmt(now),
                "leaseTransitions": transitions,
            },
        }

    async def try_acquire_or_renew(self) -> bool:
        """One attempt; True when this process holds the Lease afterwards."""
        try:
            lease = await self.kube.get_lease(self.namespace, self.name)
            if lease is None:
                await self.kube.create_lease(self._body(None, 0, None))
                self._last_renew = _now()
                return True
            spec = lease.get("spec") or {}
            holder = spec.get("holderIdentity") or ""
            renew = _parse(spec.get("renewTime"))
            duration = float(spec.get("leaseDurationSeconds") or self.duration)
            transitions = int(spec.get("leaseTransitions") or 0)
            rv = lease["metadata"]["resourceVersion"]
            if holder == self.identity:
                acquire = _parse(spec.get("acquireTime"))
                await self.kube.replace_lease(self._body(rv, transitions, acquire))
                self._last_renew = _now()
                return True
            expired = renew is None or _now() > renew + timedelta(seconds=duration)
            if holder and not expired:
                return False
            await self.kube.replace_lease(self._body(rv, transitions + 1, None))
            self._last_renew = _now()
            log.info("acquired lease %s/%s as %s", self.namespace, self.name, self.identity)
            return True
        except (AlreadyExists, Conflict):
            return False
        except KubeError as exc:
            log.warning("lease %s/%s: %s", self.namespace, self.name, exc)
            return False

    async def acquire(self) -> None:
        """Block until this process holds the Lease."""
        while True:
            if await self.try_acquire_or_renew():
                return
            await asyncio.sleep(min(self.renew, 1.0))

    async def keep(self) -> None:
        """Renew until renewal fails for a whole lease duration; then set ``lost`` and return."""
        while True:
            await asyncio.sleep(self.renew)
            if await self.try_acquire_or_renew():
                continue
            last = self._last_renew or _now()
            if _now() - last >= timedelta(seconds=self.duration * 0.8):
                log.error("lost lease %s/%s", self.namespace, self.name)
                self.lost.set()
                return

    async def release(self) -> None:
        """Give the Lease up (clean shutdown) so a standby takes over without waiting."""
        try:
            lease = await self.kube.get_lease(self.namespace, self.name)
            if lease is None or (lease.get("spec") or {}).get("holderIdentity") != self.identity:
                return
            body = lease
            body["spec"]["holderIdentity"] = ""
            body["spec"]["renewTime"] = _fmt(_now() - timedelta(seconds=self.duration * 2))
            await self.kube.replace_lease(body)
        except KubeError as exc:
            log.warning("releasing lease: %s", exc)
