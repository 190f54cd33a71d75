"""What this operator process remembers about SessionWarmPools between decisions
(``OperatorContext.warm``).

- ``pools``: (namespace, pool) → the pool as last reconciled (uid, template, template hash): what
  an adopting session compares its own template with.
- ``tokens``: (namespace, pool) → the pool's adoption token (from ``<pool>-warm``; never logged).
- ``inflight``: (namespace, pool) → warm pods created and not yet seen by the watch cache, with the
  monotonic time of the create (expire after ``ttl`` seconds; the LIST before every create is the
  guard then).
- ``claimed``: (namespace, pool) → warm pods an adoption has taken and the cache may still show
  as warm (expire after ``ttl`` seconds or once the cache stops showing them).
- ``adopted_total`` / ``last_adoption``: per pool, for status.
- ``pods_index``: the kopf index of warm pods ((namespace, pool) → pods), shared by the pool
  daemons with the sessions' adoption path.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from berth_operator.api.sessionwarmpool import WarmPodTemplate

PoolKey = tuple[str, str]


@dataclass(frozen=True, slots=True)
class PoolView:
    """A pool as its daemon last saw it."""

    uid: str
    template: WarmPodTemplate
    template_hash: str


@dataclass
class WarmPoolState:
    """See the module docstring."""

    ttl: float = 60.0
    pools: dict[PoolKey, PoolView] = field(default_factory=dict)
    tokens: dict[PoolKey, str] = field(default_factory=dict, repr=False)
    inflight: dict[PoolKey, dict[str, float]] = field(default_factory=dict)
    claimed: dict[PoolKey, dict[str, float]] = field(default_factory=dict)
    adopted_total: dict[PoolKey, int] = field(default_factory=dict)
    last_adoption: dict[PoolKey, datetime] = field(default_factory=dict)
    taken: dict[PoolKey, dict[str, float]] = field(default_factory=dict)
    """Pool → pods taken by adoptions (claimed, adopted or not yet) → monotonic time taken;
    their refills are due ``refill_delay`` seconds after (:meth:`refills_held`)."""
    pods_index: Any = None

    def _live(self, table: dict[PoolKey, dict[str, float]], key: PoolKey) -> dict[str, float]:
        now = time.monotonic()
        entries = table.setdefault(key, {})
        for name in [n for n, t in entries.items() if now - t > self.ttl]:
            del entries[name]
        return entries

    def mark_created(self, key: PoolKey, name: str) -> None:
        """Remember a create until the cache shows the pod."""
        self._live(self.inflight, key)[name] = time.monotonic()

    def inflight_names(self, key: PoolKey, seen: Iterable[str]) -> frozenset[str]:
        """Creates of ``key`` not yet seen (those seen are forgotten)."""
        entries = self._live(self.inflight, key)
        for name in set(seen) & set(entries):
            del entries[name]
        return frozenset(entries)

    def claim(self, key: PoolKey, name: str) -> bool:
        """Take pod ``name`` for one adoption; False when it is already taken."""
        entries = self._live(self.claimed, key)
        if name in entries:
            return False
        entries[name] = time.monotonic()
        self._live(self.taken, key)[name] = entries[name]
        return True

    def release(self, key: PoolKey, name: str) -> None:
        """Give back a pod whose adoption did not happen (the patch failed)."""
        self._live(self.claimed, key).pop(name, None)
        self._live(self.taken, key).pop(name, None)

    def refills_held(self, key: PoolKey, delay: float) -> tuple[int, float | None]:
        """(how many of ``key``'s pods were taken by adoptions less than ``delay`` seconds
        ago, seconds until the first of those refills is due or None when none is held)."""
        now = time.monotonic()
        ages = [now - t for t in self._live(self.taken, key).values() if now - t < delay]
        return len(ages), (delay - max(ages) if ages else None)

    def claimed_names(self, key: PoolKey, warm: Iterable[str] | None = None) -> frozenset[str]:
        """Pods of ``key`` taken by adoptions; with ``warm`` (the names the cache still shows
        as warm) the others are forgotten: they left the pool."""
        entries = self._live(self.claimed, key)
        if warm is not None:
            still = set(warm)
            for name in [n for n in entries if n not in still]:
                del entries[name]
        return frozenset(entries)

    def adopted(self, key: PoolKey, at: datetime) -> None:
        """Count one adoption of ``key``."""
        self.adopted_total[key] = self.adopted_total.get(key, 0) + 1
        self.last_adoption[key] = at

    def forget(self, key: PoolKey) -> None:
        """Drop everything kept for a deleted pool."""
        for table in (
            self.pools,
            self.tokens,
            self.inflight,
            self.claimed,
            self.adopted_total,
            self.last_adoption,
            self.taken,
        ):
            table.pop(key, None)
