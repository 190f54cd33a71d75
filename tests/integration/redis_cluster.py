"""A real local Redis Cluster for the integration tests: three primaries with a replica each.

Six ``redis-server`` processes in cluster mode on free loopback ports, each in its own directory
under one temp dir (no persistence), joined with ``redis-cli --cluster create ...
--cluster-replicas 1``. :func:`redis_cluster_url` is a session-scoped fixture (one cluster for
every ``…redis_cluster…`` module); its URL uses Berth's cluster scheme (``redis+cluster://``,
:mod:`berth_contract.redis_url`), so workers, sessions and the operator's services built from it
use redis-py's cluster client. :meth:`LocalCluster.migrate_slot` moves one slot between primaries
the way ``redis-cli --cluster reshard`` does (``SETSLOT IMPORTING/MIGRATING``, ``MIGRATE`` in
batches, ``SETSLOT NODE``), so clients meet ``ASK`` and then ``MOVED`` redirections.
Tests are skipped when ``redis-server`` or ``redis-cli`` is missing.
"""

from __future__ import annotations

import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import redis


def _free_ports(n: int) -> list[int]:
    """``n`` free loopback ports whose cluster bus ports (port + 10000) are free too."""
    ports: list[int] = []
    while len(ports) < n:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = int(s.getsockname()[1])
        if port + 10000 > 65535 or port in ports:
            continue
        try:
            with socket.socket() as bus:
                bus.bind(("127.0.0.1", port + 10000))
        except OSError:
            continue
        ports.append(port)
    return ports


def _wait_ping(port: int, proc: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + 20
    while True:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.2) as conn:
                conn.sendall(b"PING\r\n")
                if conn.recv(16).startswith(b"+PONG"):
                    return
        except OSError:
            pass
        if proc.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError(f"redis-server on {port} did not start")
        time.sleep(0.05)


@dataclass
class LocalCluster:
    """The running cluster: its ports (the first three are created as primaries)."""

    workdir: Path
    ports: list[int]
    procs: list[subprocess.Popen[bytes]] = field(default_factory=list)

    @property
    def url(self) -> str:
        """Berth's cluster URL through the first node."""
        return f"redis+cluster://127.0.0.1:{self.ports[0]}/0"

    def node(self, port: int) -> redis.Redis:
        return redis.Redis(port=port, host="127.0.0.1")

    def owner(self, slot: int) -> tuple[int, str]:
        """(port, node id) of the primary serving ``slot``, by its own word (another node's
        view may lag behind a move by a gossip round)."""
        for port, node_id in self.primaries():
            for start, end, primary, *_ in self.node(port).execute_command("CLUSTER SLOTS"):
                if int(start) <= slot <= int(end) and int(primary[1]) == port:
                    return port, node_id
        raise LookupError(f"slot {slot} is not served")

    def primaries(self) -> list[tuple[int, str]]:
        """(port, node id) of every primary."""
        out = []
        for port in self.ports:
            info = self.node(port).execute_command("ROLE")
            if info[0] in (b"master", "master"):
                out.append((port, self.node(port).execute_command("CLUSTER MYID").decode()))
        return out

    def migrate_slot(self, slot: int, batch: int = 10, pause: float = 0.0) -> int:
        """Move ``slot`` to another primary, ``batch`` keys per ``MIGRATE`` with ``pause``
        seconds between batches (clients get ``ASK`` meanwhile); returns the new owner's port."""
        src_port, src_id = self.owner(slot)
        dst_port, dst_id = next(p for p in self.primaries() if p[0] != src_port)
        src, dst = self.node(src_port), self.node(dst_port)
        dst.execute_command("CLUSTER SETSLOT", slot, "IMPORTING", src_id)
        src.execute_command("CLUSTER SETSLOT", slot, "MIGRATING", dst_id)
        while keys := src.execute_command("CLUSTER GETKEYSINSLOT", slot, batch):
            src.execute_command("MIGRATE", "127.0.0.1", dst_port, "", 0, 5000, "KEYS", *keys)
            time.sleep(pause)
        dst.execute_command("CLUSTER SETSLOT", slot, "NODE", dst_id)  # destination first
        src.execute_command("CLUSTER SETSLOT", slot, "NODE", dst_id)
        for port, _ in self.primaries():
            if port not in (src_port, dst_port):
                self.node(port).execute_command("CLUSTER SETSLOT", slot, "NODE", dst_id)
        return dst_port

    def stop(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                proc.terminate()
        for proc in self.procs:
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        shutil.rmtree(self.workdir, ignore_errors=True)


def start_cluster() -> LocalCluster:
    """Start six cluster-mode servers and create the cluster (3 primaries, 1 replica each)."""
    server, cli = shutil.which("redis-server"), shutil.which("redis-cli")
    if server is None or cli is None:
        pytest.skip("redis-server / redis-cli are not installed")
    cluster = LocalCluster(Path(tempfile.mkdtemp(prefix="berth-cluster-")), _free_ports(6))
    try:
        for port in cluster.ports:
            home = cluster.workdir / str(port)
            home.mkdir()
            cmd = [server, "--port", str(port), "--bind", "127.0.0.1", "--cluster-enabled", "yes"]
            cmd += ["--cluster-config-file", str(home / "nodes.conf"), "--dir", str(home)]
            cmd += ["--save", "", "--appendonly", "no", "--cluster-node-timeout", "2000"]
            proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            cluster.procs.append(proc)
        for port, proc in zip(cluster.ports, cluster.procs, strict=True):
            _wait_ping(port, proc)
        nodes = [f"127.0.0.1:{port}" for port in cluster.ports]
        subprocess.run(
            [cli, "--cluster", "create", *nodes, "--cluster-replicas", "1", "--cluster-yes"],
            check=True,
            capture_output=True,
            timeout=60,
        )
        deadline = time.monotonic() + 30
        while not all(
            cluster.node(p).execute_command("CLUSTER INFO").get("cluster_state") == "ok"
            for p in cluster.ports
        ):
            if time.monotonic() > deadline:
                raise RuntimeError("the cluster did not reach cluster_state:ok")
            time.sleep(0.1)
    except BaseException:
        cluster.stop()
        raise
    return cluster


@pytest.fixture(scope="session")
def local_redis_cluster() -> Iterator[LocalCluster]:
    """One local Redis Cluster for the whole test session."""
    cluster = start_cluster()
    yield cluster
    cluster.stop()


@pytest.fixture(scope="session")
def redis_cluster_url(local_redis_cluster: LocalCluster) -> str:
    """Berth's URL of the session's local Redis Cluster (``redis+cluster://...``)."""
    return local_redis_cluster.url
