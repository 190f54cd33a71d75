"""The budget service tests of ``test_budget_policy`` (reserve and settle scripts, denied sets,
status reads) run again against a real local Redis Cluster (three
primaries with a replica each, :mod:`tests.integration.redis_cluster`): the same tests, with
``redis_url`` the cluster's ``redis+cluster://`` URL, so every client is redis-py's cluster
client and every script must stay within one slot."""

from __future__ import annotations

import pytest

from tests.integration.budget import test_budget_policy as single

pytestmark = getattr(single, "pytestmark", [])

globals().update({name: test for name, test in vars(single).items() if name.startswith("test_")})


@pytest.fixture(scope="module")
def redis_url(redis_cluster_url: str) -> str:
    """The shared local cluster instead of the module's single server."""
    return redis_cluster_url
