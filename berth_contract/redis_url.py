"""Which Redis a ``BERTH_REDIS_*_URL`` names: one server, or a Redis Cluster.

Part of the contract (:mod:`berth_contract`): the operator copies the URLs into session and
worker pods, and every component builds its client from one with the same rule. A cluster is
named by the scheme ``redis+cluster://`` (``rediss+cluster://`` with TLS): the client is then
redis-py's cluster client, which learns the slot map from the node in the URL, follows
``MOVED``/``ASK`` redirections and refreshes the map itself (resharding and failover need no
restart). The rest of the URL is redis-py's own (user, password, ``ssl_ca_certs``, ...); a
cluster has only database 0.

Errors: :class:`ValueError` for a scheme that is none of ``redis``, ``rediss``, ``unix`` and
their ``+cluster`` forms.
"""

from __future__ import annotations

from typing import NamedTuple

CLUSTER_SUFFIX = "+cluster"
_PLAIN = ("redis", "rediss", "unix")


class RedisTarget(NamedTuple):
    """``url`` as redis-py takes it, and whether it names a cluster."""

    url: str
    cluster: bool


def parse(url: str) -> RedisTarget:
    """The target of a Berth Redis URL (see the module docstring)."""
    scheme, sep, rest = url.partition("://")
    if not sep:
        raise ValueError(f"not a Redis URL: {url!r}")
    cluster = scheme.endswith(CLUSTER_SUFFIX)
    plain = scheme.removesuffix(CLUSTER_SUFFIX)
    if plain not in _PLAIN or (cluster and plain == "unix"):
        raise ValueError(f"unsupported Redis URL scheme {scheme!r}")
    return RedisTarget(f"{plain}://{rest}", cluster)
