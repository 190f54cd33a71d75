"""The budget service tests of ``test_budget_policy`` run again against a server with one AUTH
password and no ACL users (``requirepass`` only): the operator's scripts as the default user."""

from __future__ import annotations

import pytest

from tests.integration.budget import test_budget_policy as single

pytestmark = getattr(single, "pytestmark", [])

globals().update({name: test for name, test in vars(single).items() if name.startswith("test_")})


@pytest.fixture(scope="module")
def redis_url(single_password_redis_url: str) -> str:
    """The shared single-password server."""
    return single_password_redis_url
