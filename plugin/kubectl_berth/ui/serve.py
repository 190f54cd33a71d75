"""The ``kubectl berth ui`` server: the view on 127.0.0.1 only, reading the cluster with the
user's kubeconfig. Prints the URL, serves until interrupted (Ctrl-C)."""

from __future__ import annotations

import asyncio
import sys

from aiohttp import web

from kubectl_berth.client import PluginClient
from kubectl_berth.ui.app import make_app
from kubectl_berth.ui.guard import Guard
from kubectl_berth.ui.links import Links
from kubectl_berth.ui.source import Source

HOST = "127.0.0.1"
"""The only address the view listens on: it acts with the user's credentials."""


async def start(
    client: PluginClient, namespace: str | None, port: int, links: Links | None = None
) -> web.AppRunner:
    """Start the view on ``HOST:port`` (0: a free port) over ``client``, for ``namespace``
    (None: every namespace), linking sessions to ``links``; return the runner (its bound port
    in ``runner.addresses``). Raises OSError when the port is taken."""
    probe = web.TCPSite  # the port must be known before the Guard is made (Host, Origin)
    runner = web.AppRunner(web.Application())
    await runner.setup()
    site = probe(runner, HOST, port)
    await site.start()
    bound = int(runner.addresses[0][1])
    await runner.cleanup()
    app = make_app(Source(client, namespace, links), Guard(bound))
    runner = web.AppRunner(app, handle_signals=False, shutdown_timeout=1.0)
    await runner.setup()
    await web.TCPSite(runner, HOST, bound).start()
    return runner


async def serve(
    client: PluginClient, namespace: str | None, port: int, links: Links | None = None
) -> None:
    """Run the view until cancelled, printing its URL first."""
    runner = await start(client, namespace, port, links)
    bound = int(runner.addresses[0][1])
    scope = f"namespace {namespace}" if namespace else "all namespaces"
    print(f"Berth UI for {scope}: http://{HOST}:{bound}/  (Ctrl-C to stop)", flush=True)
    try:
        await asyncio.Event().wait()
    finally:
        await runner.cleanup()


def run(client: PluginClient, namespace: str | None, port: int, links: Links | None = None) -> None:
    """Blocking ``serve`` for the CLI; Ctrl-C ends it quietly."""
    try:
        asyncio.run(serve(client, namespace, port, links))
    except KeyboardInterrupt:
        print("stopped", file=sys.stderr)
