"""Fixtures of the session-pod tests: the lanes suite's private ``redis-server`` (reused, not
copied) for the external-lane test; skipped where no ``redis-server`` binary exists."""

from tests.integration.lanes.conftest import redis_url

__all__ = ["redis_url"]
