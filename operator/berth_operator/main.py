"""``berth-operator``: settings from env, leader election, kopf, /healthz /readyz /metrics.

Start-up: read ``OperatorSettings`` (env ``BERTH_*``), serve health and metrics on
``BERTH_HTTP_HOST:BERTH_HTTP_PORT``, wait for the Lease (``BERTH_LEADER_ELECTION``, default on; two
replicas → one active), then run kopf (standalone: kopf peering is not used) with the handlers of
``berth_operator.handlers``. Losing the Lease stops kopf and exits with status 1 so the Deployment
restarts the replica as a standby; SIGTERM/SIGINT stop cleanly and release the Lease.

Why restarts are safe at any moment: every decision is re-derived from the apiserver (status,
pods), the epoch is bumped in status before a pod is created, pod names carry the epoch, and a
direct LIST precedes every create but the few whose outcome this process knows from its own
writes (``berth_operator.handlers.session_placement.create_pod``).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import sys
from typing import Any

import kopf
from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

import berth_operator.handlers.agentsession  # noqa: F401  (registers the handlers)
from berth_operator.api.constants import DIFFBASE_KEY, FINALIZER, LABEL_LEADER
from berth_operator.errors import KubeError, SettingsError
from berth_operator.handlers import budgetpolicy as _budgetpolicy  # registers; prime, tokens
from berth_operator.handlers import gateway as _gateway  # registers handlers; waker, Events
from berth_operator.handlers import laneworker as _laneworker  # noqa: F401  (registers handlers)
from berth_operator.handlers import login as _login  # kopf's session over the operator's pool
from berth_operator.handlers import nodes as _nodes  # noqa: F401  (registers handlers)
from berth_operator.handlers import retention as _retention  # noqa: F401  (registers handlers)
from berth_operator.handlers import sessionwarmpool as _warm  # noqa: F401  (registers handlers)
from berth_operator.handlers import webhook
from berth_operator.handlers.context import (
    BudgetClients,
    GatewayClients,
    LaneClients,
    OperatorContext,
)
from berth_operator.k8s.client import KubeClient
from berth_operator.k8s.connection import ApiSession
from berth_operator.k8s.disruption import DisruptionClient
from berth_operator.k8s.lease import LeaderElector
from berth_operator.k8s.netpol import NamespacePolicies
from berth_operator.k8s.secrets import SecretApi
from berth_operator.metrics import LEADER
from berth_operator.persistence import WITHOUT_DIFFBASE, SelectiveDiffBaseStorage
from berth_operator.runtime_client import RuntimeClient
from berth_operator.settings import OperatorSettings
from berth_telemetry import logs, tracing

log = logging.getLogger("berth.main")

KOPF_IDLE_TIMEOUT_SECONDS = 1.0
"""How long kopf keeps an object's watch worker (a task, its queue and contexts) after the
object's last event (kopf's default: 5 s). In a burst most sessions and their pods had one:
at N=1000 the operator's peak RSS was 113 MiB with 1 s against 128 MiB with 5 s, placement
time level. An event after that only starts a new worker."""


@kopf.on.startup()
def configure(settings: kopf.OperatorSettings, memo: kopf.Memo, **_: Any) -> None:
    """kopf settings: our finalizer name, annotation storage (a diff-base only for kinds with
    create/update handlers: berth_operator.persistence), no log→Event spam, no scanning;
    the eviction webhook's server when enabled (handlers.webhook)."""
    settings.persistence.finalizer = FINALIZER
    settings.persistence.progress_storage = kopf.AnnotationsProgressStorage(prefix="berth.dev")
    settings.persistence.diffbase_storage = SelectiveDiffBaseStorage(
        without=WITHOUT_DIFFBASE, prefix="berth.dev", key=DIFFBASE_KEY
    )
    settings.posting.level = logging.WARNING
    settings.scanning.disabled = True
    settings.watching.server_timeout = 300
    settings.watching.client_timeout = 330
    settings.batching.idle_timeout = KOPF_IDLE_TIMEOUT_SECONDS
    ctx = getattr(memo, "ctx", None)
    if isinstance(ctx, OperatorContext):
        webhook.configure(settings, ctx.settings)


class _Health:
    def __init__(self) -> None:
        self.ready = False
        self.leader = False

    async def healthz(self, _: web.Request) -> web.Response:
        return web.Response(text="ok\n")

    async def readyz(self, _: web.Request) -> web.Response:
        if self.ready or not self.leader:
            return web.Response(text="leader\n" if self.leader else "standby\n")
        return web.Response(status=503, text="starting\n")

    async def metrics(self, _: web.Request) -> web.Response:
        resp = web.Response(body=generate_latest())
        resp.content_type = CONTENT_TYPE_LATEST.split(";")[0]
        return resp


async def _serve(settings: OperatorSettings, health: _Health) -> web.AppRunner:
    app = web.Application()
    app.router.add_get("/healthz", health.healthz)
    app.router.add_get("/readyz", health.readyz)
    app.router.add_get("/metrics", health.metrics)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    await web.TCPSite(runner, settings.server.http_host, settings.server.http_port).start()
    return runner


def _context(settings: OperatorSettings) -> OperatorContext:
    """The clients every handler shares, built once (one connection pool to the apiserver)."""
    kube = KubeClient(ApiSession(_login.credentials, limit=_login.connection_limit(settings)))
    ctx = OperatorContext(
        settings=settings,
        kube=kube,
        runtime=RuntimeClient(settings.session_api.state_timeout_seconds),
        secrets=SecretApi.from_kube(kube),
    )
    if settings.passivation.pdb_enabled:
        ctx.disruption = DisruptionClient.from_kube(kube)
    if settings.network_policy.templates:
        ctx.netpol = NamespacePolicies.from_kube(kube, settings.network_policy)
    ctx.lanes = LaneClients.create(settings, kube)
    ctx.lanes.netpol = ctx.netpol
    if settings.budget.enabled:
        ctx.budget = BudgetClients.create(
            settings, ctx.memory.token, _budgetpolicy.token_loader(ctx)
        )
    if settings.gateway.enabled:
        ctx.gateway = GatewayClients.create(
            settings,
            ctx.runtime,
            kube,
            _gateway.token_reader(ctx),
            _gateway.waker(ctx),
            _gateway.peer_call_poster(ctx),
        )
    return ctx


async def _serve_budget(settings: OperatorSettings, budget: BudgetClients) -> web.AppRunner:
    """The budget service (berth_operator.budget.service) on its own port, started only once
    this replica leads: the directory is filled by the leader's watches, and the Service that
    sessions call selects the leader."""
    app = web.Application()
    budget.service.routes(app)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    await web.TCPSite(runner, settings.server.http_host, settings.budget.port).start()
    return runner


async def _serve_gateway(settings: OperatorSettings, gateway: GatewayClients) -> web.AppRunner:
    """The session front door (berth_operator.gateway) on its own port, started only once this
    replica leads (the Service selects the leader) and its directory holds every watched session
    (a LIST, as the leader's watch has not shown them yet), and the delivery loops of every
    session with unfinished messages."""
    listed = await gateway.prime()
    app = web.Application()
    gateway.service.routes(app)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    await web.TCPSite(runner, settings.server.http_host, settings.gateway.port).start()
    resumed = await gateway.delivery.resume_all()
    log.info(
        "front door on port %d; %d session(s) listed, %d with queued messages",
        settings.gateway.port,
        listed,
        resumed,
    )
    return runner


async def _lead(
    settings: OperatorSettings, kube: KubeClient, stop: asyncio.Event
) -> tuple[LeaderElector | None, asyncio.Task[None] | None] | None:
    """Wait for the Lease (when leader election is on): (elector, its renewing task), (None,
    None) without election, or None when stopped before leading."""
    if not settings.leader_election.enabled:
        return None, None
    elector = LeaderElector(
        kube,
        namespace=settings.leader_election.resolved_namespace(),
        name=settings.leader_election.name,
        identity=settings.leader_election.resolved_identity(),
        duration_seconds=settings.leader_election.duration_seconds,
        renew_seconds=settings.leader_election.renew_seconds,
    )
    log.info("waiting for lease %s as %s", settings.leader_election.name, elector.identity)
    acquire = asyncio.create_task(elector.acquire())
    stopping = asyncio.create_task(stop.wait())
    await asyncio.wait({acquire, stopping}, return_when=asyncio.FIRST_COMPLETED)
    if stop.is_set():
        acquire.cancel()
        return None
    stopping.cancel()
    return elector, asyncio.create_task(elector.keep())


async def _controllers(
    settings: OperatorSettings,
    ctx: OperatorContext,
    health: _Health,
    stop: asyncio.Event,
    keeper: asyncio.Task[None] | None,
) -> None:
    """Run kopf's controllers until ``stop``, kopf's own end or the loss of the Lease."""
    kopf_stop = asyncio.Event()
    ready = asyncio.Event()
    operator = asyncio.create_task(
        kopf.operator(
            clusterwide=not settings.scope.namespaces,
            namespaces=settings.scope.namespaces,
            standalone=True,
            stop_flag=kopf_stop,
            ready_flag=ready,
            memo=kopf.Memo(ctx=ctx),
        )
    )
    ready_wait = asyncio.create_task(ready.wait())
    await asyncio.wait({operator, ready_wait}, return_when=asyncio.FIRST_COMPLETED)
    health.ready = ready.is_set()
    # kopf installs its own SIGTERM/SIGINT handlers; ours (``stop``) also ends the wait.
    stopping = asyncio.create_task(stop.wait())
    watchers: set[asyncio.Future[Any]] = {operator, stopping}
    if keeper is not None:
        watchers.add(keeper)
    await asyncio.wait(watchers, return_when=asyncio.FIRST_COMPLETED)
    kopf_stop.set()
    stopping.cancel()
    with contextlib.suppress(Exception):
        await asyncio.wait_for(operator, timeout=30)


async def _mark_leader(kube: KubeClient, leading: bool) -> None:
    """Label this replica's own pod ``berth.dev/leader=true`` while it leads (removed otherwise),
    so the webhook Service routes only to the leader. Outside a pod ($POD_NAME/$POD_NAMESPACE
    unset) there is nothing to label; API errors are logged (the Lease still decides)."""
    name, namespace = os.environ.get("POD_NAME"), os.environ.get("POD_NAMESPACE")
    if not name or not namespace:
        return
    try:
        await kube.label_own_pod(namespace, name, LABEL_LEADER, "true" if leading else None)
    except KubeError as exc:
        log.warning("cannot label pod %s/%s as %s: %s", namespace, name, LABEL_LEADER, exc)


async def run(settings: OperatorSettings) -> int:  # noqa: C901, PLR0912, PLR0915
    """Run until stopped; returns the process exit status (1 when the Lease was lost)."""
    loop = asyncio.get_running_loop()
    ctx = _context(settings)
    webhook.register(settings)
    health = _Health()
    runner = await _serve(settings, health)
    stop = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    elector: LeaderElector | None = None
    keeper: asyncio.Task[None] | None = None
    budget_runner: web.AppRunner | None = None
    gateway_runner: web.AppRunner | None = None
    code = 0
    try:
        await _mark_leader(ctx.kube, False)  # a restarted container may still carry the label
        led = await _lead(settings, ctx.kube, stop)
        if led is None:
            return 0
        elector, keeper = led
        health.leader = True
        LEADER.set(1)
        if ctx.budget is not None:
            policies, sessions = await _budgetpolicy.prime(ctx)
            log.info("budget service: %d polic(ies), %d session(s) listed", policies, sessions)
            budget_runner = await _serve_budget(settings, ctx.budget)
        if ctx.gateway is not None:
            gateway_runner = await _serve_gateway(settings, ctx.gateway)
        await _mark_leader(ctx.kube, True)
        log.info("leading; starting controllers")
        await _controllers(settings, ctx, health, stop, keeper)
        if elector is not None and elector.lost.is_set():
            log.error("leadership lost; stopping")
            code = 1
    finally:
        LEADER.set(0)
        if health.leader:
            await _mark_leader(ctx.kube, False)
        if keeper is not None:
            keeper.cancel()
        if elector is not None and code == 0:
            await elector.release()
        await ctx.runtime.close()
        if ctx.lanes is not None:
            await ctx.lanes.close()
        await runner.cleanup()
        if budget_runner is not None:
            await budget_runner.cleanup()
        if ctx.budget is not None:
            await ctx.budget.close()
        if gateway_runner is not None:
            await gateway_runner.cleanup()
        if ctx.gateway is not None:
            await ctx.gateway.close()
        await ctx.kube.close()
    return code


def main(argv: list[str] | None = None) -> int:
    """Run the operator; returns its exit status (2: bad settings). The console script
    (``berth-operator``) calls it through ``berth_operator.launch``, which first keeps the
    unused ``kubernetes`` package out of the process."""
    del argv
    try:
        settings = OperatorSettings.from_env()
    except SettingsError as exc:
        print(exc, file=sys.stderr)
        return 2
    configure_logging(settings.server.log_level)
    return asyncio.run(run(settings))


def configure_logging(level: str) -> None:
    """The root logger at ``level`` (a logging level name) in ``BERTH_LOG_FORMAT`` (JSON lines or
    text, :mod:`berth_telemetry.logs`), and traces when an OTLP endpoint is set
    (:mod:`berth_telemetry.tracing`). kopf's per-object log (a line per handler call and event)
    stays at WARNING unless the level is DEBUG."""
    logs.configure(level)
    tracing.configure("berth-operator", {"k8s.pod.name": os.environ.get("POD_NAME")})
    if level != "DEBUG":
        logging.getLogger("kopf.objects").setLevel(logging.WARNING)


if __name__ == "__main__":
    raise SystemExit(main())
