"""Benchmark: ``kubectl berth ui``'s start, page weight and live-update delay, without a cluster.

The console script runs as a user runs it, against the small real apiserver of the web view's
unit tests (tests/unit/plugin/ui_world.py: the drained session, its Events, the pod proxy's
``/v1/state``, ``/metrics`` and ``/v1/runs/{runId}/events``). Reported:

- start to first page: from spawning ``kubectl-berth ui`` to the sessions page answered 200,
  against ``kubectl-berth version`` (the interpreter and the plugin's imports) in the same run;
- page weight: the session page, its stylesheet and its script, in bytes;
- live-update delay: from an Event being added to the apiserver, and from a tool call being
  recorded by the (test) session pod, to its part arriving on the page's server-sent event
  stream (median and worst of N each).

The browser test on the dev cluster (tests/e2e/test_ui_browser.py) prints the same figures for a
real session and a real browser.

Run: ``.venv/bin/python bench/ui.py [--samples 10]``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import aiohttp
import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "operator"), str(ROOT / "plugin")]

from tests.unit.plugin.ui_world import NS, World, apiserver  # noqa: E402

SCRIPT = Path(sys.executable).parent / "kubectl-berth"


def kubeconfig(host: str, directory: Path) -> Path:
    """A kubeconfig for the apiserver at ``host`` (plain HTTP, no credentials)."""
    cfg = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "bench", "cluster": {"server": host}}],
        "users": [{"name": "bench", "user": {}}],
        "contexts": [{"name": "bench", "context": {"cluster": "bench", "user": "bench"}}],
        "current-context": "bench",
    }
    path = directory / "kubeconfig"
    path.write_text(yaml.safe_dump(cfg))
    return path


def version_seconds(env: dict[str, str]) -> float:
    start = time.monotonic()
    subprocess.run([str(SCRIPT), "version"], env=env, check=True, capture_output=True)
    return time.monotonic() - start


def spawn_ui(env: dict[str, str]) -> subprocess.Popen[str]:
    """``kubectl-berth ui --port 0 -n team-a`` with its stdout piped (the URL line)."""
    return subprocess.Popen(
        [str(SCRIPT), "ui", "--port", "0", "-n", NS], env=env, stdout=subprocess.PIPE, text=True
    )


async def first_page(env: dict[str, str]) -> tuple[float, str, subprocess.Popen[str]]:
    """Seconds from spawning the view to its sessions page answered 200; its base URL."""
    start = time.monotonic()
    proc = await asyncio.to_thread(spawn_ui, env)
    assert proc.stdout is not None
    line = await asyncio.to_thread(proc.stdout.readline)
    base = "http://" + line.split("http://", 1)[1].split("/", 1)[0]
    async with aiohttp.ClientSession() as http, http.get(f"{base}/sessions") as resp:
        assert resp.status == 200
        await resp.read()
    return time.monotonic() - start, base, proc


async def weight(base: str) -> dict[str, int]:
    sizes = {}
    async with aiohttp.ClientSession() as http:
        for path in (f"/sessions/{NS}/demo", "/static/berth.css", "/static/live.js"):
            async with http.get(base + path) as resp:
                sizes[path] = len(await resp.read())
    return sizes


async def live_delays(base: str, world: World, samples: int, calls: bool) -> list[float]:
    """Seconds from a new Event (``calls``: a new tool call of run 2, 0.001 s times its number)
    to the SSE part that shows it, ``samples`` times."""
    delays = []
    async with (
        aiohttp.ClientSession() as http,
        http.get(f"{base}/live/sessions/{NS}/demo") as resp,
    ):
        await resp.content.readuntil(b"\n\n")
        for i in range(samples):
            if calls:
                world.add_tool_call(f"call_probe_{i}", "bash", 7000 + i, 0)
                wanted = f"{7 + i / 1000:.3f} s"
            else:
                world.add_event(f"Probe{i}", f"probe {i}")
                wanted = f"probe {i}"
            added = time.monotonic()
            while True:
                line = await asyncio.wait_for(resp.content.readline(), 10)
                if line.startswith(b"data: ") and wanted in json.loads(line[6:])["html"]:
                    delays.append(time.monotonic() - added)
                    break
    return delays


async def main(samples: int) -> None:
    world = World()
    with apiserver(world) as api, tempfile.TemporaryDirectory() as tmp:
        host = str(api.api.configuration.host)
        env = {**os.environ, "KUBECONFIG": str(kubeconfig(host, Path(tmp)))}
        baseline = min(version_seconds(env) for _ in range(3))
        started, base, proc = await first_page(env)
        try:
            sizes = await weight(base)
            delays = await live_delays(base, world, samples, calls=False)
            call_delays = await live_delays(base, world, samples, calls=True)
        finally:
            proc.terminate()
            proc.wait(10)
    print(f"kubectl-berth version (baseline):    {baseline:.2f} s")
    print(f"kubectl berth ui to the first page:  {started:.2f} s ({started / baseline:.1f}x)")
    for path, size in sizes.items():
        print(f"page weight {path}: {size / 1024:.1f} KiB")
    print(f"page weight total:                   {sum(sizes.values()) / 1024:.1f} KiB")
    print(
        f"live-update delay (Event to SSE part), {samples} samples: median "
        f"{statistics.median(delays):.2f} s, worst {max(delays):.2f} s"
    )
    print(
        f"live-update delay (tool call to SSE part), {samples} samples: median "
        f"{statistics.median(call_delays):.2f} s, worst {max(call_delays):.2f} s"
    )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--samples", type=int, default=10)
    asyncio.run(main(parser.parse_args().samples))
