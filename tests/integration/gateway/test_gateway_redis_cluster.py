"""The front door tests of ``test_gateway`` (the Redis inbox with its scripts, delivery, the
session pod API) run again against a real local Redis Cluster (three
primaries with a replica each, :mod:`tests.integration.redis_cluster`): the same tests, with
``redis_url`` the cluster's ``redis+cluster://`` URL, so every client is redis-py's cluster
client and every script must stay within one slot."""

from __future__ import annotations

import pytest

from tests.integration.gateway import test_gateway as single

pytestmark = getattr(single, "pytestmark", [])

globals().update({name: test for name, test in vars(single).items() if name.startswith("test_")})
redis = single.redis  # the module's client fixture, built from redis_url


@pytest.fixture(scope="module")
def redis_url(redis_cluster_url: str) -> str:
    """The shared local cluster instead of the module's single server."""
    return redis_cluster_url
