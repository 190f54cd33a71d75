"""Fixtures of the session-pod tests: the lanes suite's private ``redis-server`` (reused, not
copied) for the external-lane tests, which skip where it or ``redis-server`` is missing."""

from __future__ import annotations

import pytest

try:
    from tests.integration.lanes.conftest import redis_url
except ImportError:  # the lanes suite is not in this checkout

    @pytest.fixture(scope="module")
    def redis_url() -> str:
        pytest.skip("tests.integration.lanes (redis-server fixture) is not available")


__all__ = ["redis_url"]
