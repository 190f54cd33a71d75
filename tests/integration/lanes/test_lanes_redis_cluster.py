"""The lane transport tests of ``test_redis_lanes`` run again against a real local Redis Cluster
(three primaries with a replica each, :mod:`tests.integration.redis_cluster`): the same tests,
with ``redis_url`` the cluster's ``redis+cluster://`` URL, so the session transport, the real
``berth-worker`` processes and the test's own reads all use redis-py's cluster client and every
script and transaction must stay within one slot."""

from __future__ import annotations

import pytest

from tests.integration.lanes import test_redis_lanes as single

pytestmark = single.pytestmark

globals().update({name: test for name, test in vars(single).items() if name.startswith("test_")})


@pytest.fixture(scope="module")
def redis_url(redis_cluster_url: str) -> str:
    """The shared local cluster instead of the module's single server."""
    return redis_cluster_url
