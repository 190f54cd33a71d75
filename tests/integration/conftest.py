"""Fixtures shared by the integration tests."""

from tests.integration.chart_redis import chart_redis
from tests.integration.redis_cluster import local_redis_cluster, redis_cluster_url
from tests.integration.redis_modes import redis_tls_url, single_password_redis_url

__all__ = [
    "chart_redis",
    "local_redis_cluster",
    "redis_cluster_url",
    "redis_tls_url",
    "single_password_redis_url",
]
