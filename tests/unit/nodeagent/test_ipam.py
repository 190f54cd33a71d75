"""Pod IP allocation of the process node agent (hack/nodeagent/ipam.py)."""

from __future__ import annotations

import pytest

from hack.nodeagent.ipam import IpAllocator, IpExhausted


@pytest.mark.parametrize(
    ("prefix", "first", "second"),
    [("127.0.", "127.0.1.1", "127.0.1.2"), ("127.0.0.", "127.0.0.2", "127.0.0.3")],
)
def test_sequential(prefix: str, first: str, second: str) -> None:
    a = IpAllocator(prefix)
    assert a.allocate("p1") == first
    assert a.allocate("p2") == second
    assert a.allocate("p1") == first  # stable per key


@pytest.mark.parametrize("prefix", ["127.", "127.0.0.1.", "x.y.", "127.0.300."])
def test_bad_prefix(prefix: str) -> None:
    with pytest.raises(ValueError):
        IpAllocator(prefix)


def test_never_hands_out_a_live_ip_and_does_not_reuse_soon() -> None:
    a = IpAllocator("127.0.")
    assert a.reserve("old", "127.0.1.2")
    assert not a.reserve("other", "127.0.1.2")
    assert a.allocate("p1") == "127.0.1.1"
    assert a.allocate("p2") == "127.0.1.3"  # skips the reserved one
    a.release("p1")
    assert a.allocate("p3") == "127.0.1.4"  # round-robin: released IP is not reused at once
    assert not a.owns("10.0.0.1")


def test_exhaustion() -> None:
    a = IpAllocator("127.0.0.")
    for i in range(253):
        a.allocate(f"p{i}")
    with pytest.raises(IpExhausted):
        a.allocate("one-too-many")
    a.release("p7")
    assert a.allocate("again") == "127.0.0.9"
