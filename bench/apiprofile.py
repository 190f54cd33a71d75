"""Where the control plane's CPU goes during a burst: the components' own Go CPU profiles.

kube-apiserver, kube-controller-manager and kube-scheduler serve
``/debug/pprof/profile?seconds=S`` (profiling is on by default; the dev cluster's admin
credentials may read it). :class:`CpuProfile` fetches consecutive slices of ``SLICE_SECONDS``
while a burst runs and keeps them as ``<dir>/<tag>-<k>.pb.gz``; :func:`top` merges a run's
slices with ``go tool pprof`` (Go's own profile viewer) and returns its table of functions by
cumulative CPU. Used by ``placement.py --cpu-profile DIR``.
"""

from __future__ import annotations

import re
import shutil
import ssl
import subprocess
import threading
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

SLICE_SECONDS = 5

Fetch = Callable[[int], bytes]
"""Fetches one CPU profile of the given length in seconds; returns its bytes (gzipped pprof)."""


def apiserver_fetch(api_client: Any) -> Fetch:
    """A :data:`Fetch` for the apiserver behind ``api_client`` (a configured
    ``kubernetes.client.ApiClient``)."""

    def fetch(seconds: int) -> bytes:
        params = api_client.param_serialize(
            "GET",
            "/debug/pprof/profile",
            query_params=[("seconds", str(seconds))],
            auth_settings=["BearerToken"],
        )
        response = api_client.call_api(*params, _request_timeout=seconds + 30)
        if response.status != 200:
            raise RuntimeError(f"HTTP {response.status}")
        data: bytes = response.read()
        return data

    return fetch


def secure_port_fetch(port: int, cert: Path, key: Path) -> Fetch:
    """A :data:`Fetch` for a component serving on ``https://127.0.0.1:<port>`` (the
    controller-manager's or scheduler's secure port), authenticated with the client
    certificate ``cert``/``key``. The component's self-signed serving certificate is not
    verified: loopback only, a benchmark's read."""
    ctx = ssl.create_default_context()
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    ctx.load_cert_chain(str(cert), str(key))

    def fetch(seconds: int) -> bytes:
        url = f"https://127.0.0.1:{port}/debug/pprof/profile?seconds={seconds}"
        with urllib.request.urlopen(url, context=ctx, timeout=seconds + 30) as response:
            data: bytes = response.read()
            return data

    return fetch


def secure_port_of(cmdline: list[str]) -> int | None:
    """The ``--secure-port`` a component was started with, from its argv (None: not given)."""
    for arg in cmdline:
        found = re.fullmatch(r"--secure-port=(\d+)", arg)
        if found:
            return int(found.group(1))
    return None


class CpuProfile(threading.Thread):
    """Fetches CPU profile slices with ``fetch`` into ``out`` until :meth:`finish` is called;
    the slice running then is completed (up to ``SLICE_SECONDS`` more). A failed fetch ends the
    thread and is kept in :attr:`error`."""

    def __init__(self, fetch: Fetch, out: Path, tag: str) -> None:
        super().__init__(daemon=True)
        self.fetch = fetch
        self.out = out
        self.tag = tag
        self.paths: list[Path] = []
        self.error: str | None = None
        self._done = threading.Event()
        out.mkdir(parents=True, exist_ok=True)

    def run(self) -> None:
        while not self._done.is_set():
            try:
                data = self.fetch(SLICE_SECONDS)
            except Exception as exc:  # a bench: say it, stop profiling
                self.error = f"{self.tag}: profile not fetched: {exc}"
                return
            path = self.out / f"{self.tag}-{len(self.paths):03d}.pb.gz"
            path.write_bytes(data)
            self.paths.append(path)

    def finish(self) -> list[Path]:
        """Stop after the current slice and return the slices' paths."""
        self._done.set()
        self.join(timeout=SLICE_SECONDS + 60)
        return self.paths


def top(paths: list[Path], nodes: int = 35) -> str:
    """``go tool pprof -top -cum`` of the merged profiles ``paths`` (the ``nodes`` functions
    with the most cumulative CPU), or a line saying why there is none."""
    go = shutil.which("go")
    if go is None:
        return "CPU profile: `go` not on PATH (needed for `go tool pprof`)"
    if not paths:
        return "CPU profile: no slices"
    result = subprocess.run(
        [go, "tool", "pprof", "-top", "-cum", f"-nodecount={nodes}", *map(str, paths)],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    return result.stdout if result.returncode == 0 else f"go tool pprof failed: {result.stderr}"
