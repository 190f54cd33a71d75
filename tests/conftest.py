"""Shared pytest fixtures: the dev cluster (session-scoped) for integration and e2e tests."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.cluster import DevCluster


@pytest.fixture(scope="session")
def dev_cluster() -> Iterator[DevCluster]:
    """The dev cluster, started by ``hack/cluster-up.sh`` or reused; see tests/cluster.py."""
    yield DevCluster.ensure()
