"""Log selection for ``kubectl logs`` on process pods (hack/nodeagent/logs.py)."""

from __future__ import annotations

import pytest

from hack.nodeagent.logs import select_log

LOG = (
    "=== T0 pod ns/p uid OLD container main restart 0 ip 1: ['x']\n"
    "old pod\n"
    "=== T1 pod ns/p uid U container seed restart 0 ip 1: ['x']\n"
    "seeding\n"
    "=== T2 pod ns/p uid U container main restart 0 ip 1: ['x']\n"
    "first 1\n"
    "first 2\n"
    "=== T3 pod ns/p uid U container main restart 1 ip 1: ['x']\n"
    "second 1\n"
    "second 2\n"
    "second 3\n"
)


@pytest.mark.parametrize(
    ("kwargs", "expected"),
    [
        ({}, "second 1\nsecond 2\nsecond 3\n"),
        ({"previous": True}, "first 1\nfirst 2\n"),
        ({"tail_lines": 2}, "second 2\nsecond 3\n"),
        ({"tail_lines": 0}, ""),
        ({"limit_bytes": 9}, "second 1\n"),
        ({"container": "seed"}, "seeding\n"),
        ({"container": "seed", "previous": True}, ""),
        ({"uid": "OLD"}, "old pod\n"),
        ({"uid": "nope"}, ""),
    ],
)
def test_select_log(kwargs: dict[str, object], expected: str) -> None:
    uid = str(kwargs.pop("uid", "U"))
    container = str(kwargs.pop("container", "main"))
    assert select_log(LOG, uid, container, **kwargs) == expected  # type: ignore[arg-type]
