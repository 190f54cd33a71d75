"""Pod IP allocation for process pods (test-only node agent).

Each process pod gets its own loopback address (all of 127/8 routes on ``lo``) so servers bound
to ``POD_IP`` never collide on a port. With prefix ``127.0.`` addresses are ``127.0.<n>.<m>``
(n 1..255, m 1..254, so 127.0.0.x stays free for the control plane); with a three-octet prefix
only the last octet varies (2..254). Allocation walks round-robin from the last address handed
out and never returns an address held by a live pod. Called by ``hack/process_node_agent.py``.
"""

from __future__ import annotations

import threading


class IpExhausted(Exception):
    """No free address left under the prefix."""


class IpAllocator:
    def __init__(self, prefix: str) -> None:
        octets = [o for o in prefix.strip(".").split(".") if o]
        if not 2 <= len(octets) <= 3 or not all(o.isdigit() and int(o) < 256 for o in octets):
            raise ValueError(f"pod IP prefix must have two or three octets, got {prefix!r}")
        self.prefix = ".".join(octets) + "."
        if len(octets) == 2:
            self._pool = [f"{self.prefix}{n}.{m}" for n in range(1, 256) for m in range(1, 255)]
        else:
            self._pool = [f"{self.prefix}{m}" for m in range(2, 255)]
        self._index = {ip: i for i, ip in enumerate(self._pool)}
        self._cursor = 0
        self._owner: dict[str, str] = {}  # ip -> key
        self._by_key: dict[str, str] = {}  # key -> ip
        self._lock = threading.Lock()

    def owns(self, ip: str) -> bool:
        """True when ``ip`` is an address of this allocator's pool."""
        return ip in self._index

    def reserve(self, key: str, ip: str) -> bool:
        """Hold ``ip`` for ``key`` (e.g. a pod seen with that IP at start-up). False if taken."""
        with self._lock:
            if ip not in self._index or self._owner.get(ip, key) != key:
                return False
            old = self._by_key.get(key)
            if old and old != ip:
                self._owner.pop(old, None)
            self._owner[ip] = key
            self._by_key[key] = ip
            return True

    def allocate(self, key: str) -> str:
        """The address held by ``key``, allocating the next free one if it holds none."""
        with self._lock:
            if key in self._by_key:
                return self._by_key[key]
            size = len(self._pool)
            for step in range(size):
                i = (self._cursor + step) % size
                ip = self._pool[i]
                if ip not in self._owner:
                    self._cursor = (i + 1) % size
                    self._owner[ip] = key
                    self._by_key[key] = ip
                    return ip
            raise IpExhausted(f"all {size} addresses under {self.prefix} are in use")

    def release(self, key: str) -> None:
        with self._lock:
            ip = self._by_key.pop(key, None)
            if ip is not None:
                self._owner.pop(ip, None)

    def in_use(self) -> dict[str, str]:
        with self._lock:
            return dict(self._by_key)
