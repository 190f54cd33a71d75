"""The crash campaign's cluster faults (tests/chaos/cluster.py) as part of `make test`: a few
seeded scenarios on the real nodes — operator leader and standby killed, nodes lost and drained
while pods are evicted, pods force-deleted — after which nothing ran twice and no result was
lost. ``CHAOS_CLUSTER_SCENARIOS`` (default 3) and ``CHAOS_CLUSTER_SEED`` (default 1) size it;
`make chaos-cluster` runs a longer campaign."""

from __future__ import annotations

import os

from tests.chaos.cluster import CLUSTER_FAULTS, campaign, generate, report


def test_cluster_scenarios_are_drawn_from_their_seed() -> None:
    assert generate(11) == generate(11)
    kinds = {f.kind for seed in range(40) for f in generate(seed).faults}
    assert kinds == set(CLUSTER_FAULTS)  # every fault kind is reachable


def test_cluster_campaign_keeps_no_tool_twice_no_result_lost() -> None:
    count = int(os.environ.get("CHAOS_CLUSTER_SCENARIOS", "3"))
    first = int(os.environ.get("CHAOS_CLUSTER_SEED", "1"))
    results = campaign([first + i for i in range(count)])
    text = report(results)
    print("\n" + text)
    assert text.endswith(f"{count} scenarios, 0 violations"), text
    assert all(set(r.phases.values()) == {"Succeeded"} for r in results), text
    assert any(r.landed for r in results), "no fault hit a running session"
