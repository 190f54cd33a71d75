"""Fixtures shared by the integration tests."""

from tests.integration.chart_redis import chart_redis

__all__ = ["chart_redis"]
