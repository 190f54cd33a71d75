"""Process-wide state shared by the handlers (passed to kopf as ``memo.ctx``).

- ``sessions``: the AgentSessions the watch shows and the workers that reconcile them
  (``handlers.session_workers``); pod, node, eviction and gateway events queue a session so it
  reconciles at once instead of at its next timer (:meth:`OperatorContext.wake_session`).
- ``wakeups``: one asyncio.Event per SessionWarmPool key, set to wake that pool's daemon.
- ``memory``: what this process keeps about each session between passes, one object per
  session (``handlers.memory``): its API token, the pod it created and has not seen yet, refused
  evictions, the end its pod reported, a reserved epoch, the last failed create, whether its
  Secret is known written.
- ``disruption``: the namespaces' session PodDisruptionBudgets (k8s.disruption), None when PDBs
  are disabled.
- ``secrets``: Secret calls (k8s.secrets).
- ``ready_claims``: (namespace, claim) → (monotonic time, ``StoreReady`` tuple) of a shared claim
  last read Bound.
- ``llm_secrets``: (namespace, Secret) → (monotonic time, its labels and key names without
  values) of an LLM Secret last read allowed for Berth.
- ``lanes``: the LaneWorker handlers' clients (:class:`LaneClients`), built once by ``main``.
- ``budget``: the budget service and its directory (:class:`BudgetClients`), when enabled.
- ``gateway``: the session front door (:class:`GatewayClients`), when enabled; started by
  ``main`` once this replica leads.
- ``warm``: what is remembered about SessionWarmPools (``handlers.warm_state``).
- ``migrations``: the sessions this process admitted to migrate to a new image and not yet seen
  done (``reconcile.migration.MigrationSlots``).

AgentSession reconciles are bounded by the number of workers (``max_concurrent_reconciles``).
Without a bound, a burst of N new sessions advances in lockstep — every session's first write
before any session's pod — so the first pods wait for the whole burst; in turn, each goes
through and its pod is created early.
"""

from __future__ import annotations

import asyncio
import contextvars
import time
from collections.abc import Awaitable, Callable, Coroutine, Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import aiohttp
from redis.asyncio import Redis

from berth_operator.api.common import SessionRef
from berth_operator.budget.directory import BudgetDirectory
from berth_operator.budget.ledger import Ledger
from berth_operator.budget.service import BudgetService, LoadToken
from berth_operator.errors import NotFound
from berth_operator.gateway.delivery import Delivery
from berth_operator.gateway.directory import GatewayDirectory
from berth_operator.gateway.inbox import Inbox, Message
from berth_operator.gateway.routing import SessionView
from berth_operator.gateway.service import GatewayService
from berth_operator.handlers.memory import SessionMemories
from berth_operator.handlers.session_workers import SessionWorkers
from berth_operator.handlers.warm_state import WarmPoolState
from berth_operator.k8s.calls import with_backoff
from berth_operator.k8s.client import KubeClient
from berth_operator.k8s.disruption import DisruptionClient
from berth_operator.k8s.laneworker import LaneWorkerApi
from berth_operator.k8s.netpol import NamespacePolicies
from berth_operator.k8s.secrets import SecretApi
from berth_operator.metrics import PhaseTracker
from berth_operator.reconcile.migration import MigrationSlots
from berth_operator.reconcile.observe import ObservedPod, ended_as_reported
from berth_operator.reconcile.plan import CreateFailure, CreatePod
from berth_operator.redis_client import connect
from berth_operator.runtime_client import RuntimeClient
from berth_operator.settings import OperatorSettings


@dataclass
class LaneClients:
    """The clients of the LaneWorker handlers: Deployments and pods (``api``), Secrets, the
    operator's Redis connection (broker pressure) and an HTTP session (Prometheus pressure).
    Built once per process by :meth:`create` (inside the running event loop); :meth:`close`
    at shutdown."""

    settings: OperatorSettings
    kube: KubeClient
    api: LaneWorkerApi
    secrets: SecretApi
    redis: Redis[Any]
    http: aiohttp.ClientSession
    netpol: NamespacePolicies | None = None
    """The namespaces' NetworkPolicies, shared with the session handlers (None: none)."""

    @classmethod
    def create(cls, settings: OperatorSettings, kube: KubeClient) -> LaneClients:
        """Share ``kube``'s connection pool; Redis from ``settings.redis.for_operator``."""
        return cls(
            settings=settings,
            kube=kube,
            api=LaneWorkerApi(kube.session),
            secrets=SecretApi.from_kube(kube),
            redis=connect(settings.redis.for_operator),
            http=aiohttp.ClientSession(),
        )

    async def close(self) -> None:
        """Close the HTTP session and the Redis connection pool."""
        await self.http.close()
        client: Any = self.redis  # aclose() is newer than the redis stubs
        await client.aclose()


@dataclass
class BudgetClients:
    """The budget service (berth_operator.budget) as the operator runs it: its directory (filled
    by handlers.budgetpolicy from the watches; tokens from the session token cache), the ledger
    on the operator's Redis user, and the service. Built by :meth:`create`; :meth:`close`."""

    directory: BudgetDirectory
    ledger: Ledger
    service: BudgetService
    redis: Redis[Any]

    @classmethod
    def create(
        cls,
        settings: OperatorSettings,
        tokens: Callable[[str], str | None],
        load_token: LoadToken | None = None,
    ) -> BudgetClients:
        """Redis from ``settings.redis.for_operator``; tokens looked up in ``tokens``, filled by
        ``load_token(identity, uid)`` for a session whose token it does not hold yet."""
        redis: Redis[Any] = connect(settings.redis.for_operator)
        directory = BudgetDirectory(tokens)
        ledger = Ledger(redis)
        service = BudgetService(ledger, directory, load_token=load_token)
        return cls(directory, ledger, service, redis)

    async def close(self) -> None:
        """Close the Redis connection pool."""
        client: Any = self.redis
        await client.aclose()


@dataclass
class GatewayClients:
    """The session front door (berth_operator.gateway) as the operator runs it: its directory
    (filled by :meth:`prime` from a LIST, then by handlers.gateway from the AgentSession watch),
    the Redis inbox on the operator's user, the delivery loops and the HTTP service. Built by
    :meth:`create`; :meth:`close`."""

    directory: GatewayDirectory
    inbox: Inbox
    delivery: Delivery
    service: GatewayService
    redis: Redis[Any]
    list_sessions: Callable[[], Awaitable[list[dict[str, Any]]]]
    kopf_context: contextvars.Context | None = None
    """kopf's context (settings, event queue), captured by a handler, so the front door's own
    tasks can post Events through kopf's poster."""

    @classmethod
    def create(
        cls,
        settings: OperatorSettings,
        runtime: RuntimeClient,
        kube: KubeClient,
        tokens: Callable[[SessionView], Awaitable[str | None]],
        wake: Callable[[SessionView], Awaitable[None]],
        on_peer_call: Callable[[SessionView, SessionView, Message], None] | None = None,
    ) -> GatewayClients:
        """Redis from ``settings.redis.for_operator``; ``await tokens(view)`` is a session's API
        token; ``wake(view)`` wakes a session at rest; ``kube`` lists the watched namespaces'
        sessions for :meth:`prime` and confirms a session is gone."""
        gw = settings.gateway
        namespaces = list(settings.scope.namespaces)

        async def list_sessions() -> list[dict[str, Any]]:
            return await kube.list_sessions_in(namespaces)

        async def gone(key: str, uid: str) -> bool:
            namespace, _, name = key.partition("/")
            try:
                body = await kube.get_session(namespace, name)
            except NotFound:
                return True
            return str((body.get("metadata") or {}).get("uid")) != uid

        redis: Redis[Any] = connect(settings.redis.for_operator)
        directory = GatewayDirectory()
        inbox = Inbox(redis, gw.message_retention_seconds)
        delivery = Delivery(inbox, runtime, directory.by_uid, tokens, wake, gw.poll_seconds, gone)
        service = GatewayService(
            inbox,
            delivery,
            directory.lookup,
            directory.by_uid,
            tokens,
            max_wait_seconds=gw.max_wait_seconds,
            max_peer_depth=gw.max_peer_depth,
            on_peer_call=on_peer_call,
        )
        return cls(directory, inbox, delivery, service, redis, list_sessions)

    async def prime(self, attempt_for_seconds: float = 60) -> int:
        """Fill the directory from a LIST of the watched sessions (before the front door opens:
        a new leader's watch has not shown them yet); how many were added. A failed LIST is
        tried again with backoff for ``attempt_for_seconds``; then the last KubeError is
        raised."""
        return self.directory.fill(await with_backoff(self.list_sessions, attempt_for_seconds))

    async def close(self) -> None:
        """Stop the delivery loops and close the Redis connection pool."""
        await self.delivery.close()
        client: Any = self.redis
        await client.aclose()


@dataclass
class OperatorContext:
    """Everything a handler needs besides its kopf kwargs."""

    settings: OperatorSettings
    kube: KubeClient
    runtime: RuntimeClient
    phases: PhaseTracker = field(default_factory=PhaseTracker)
    wakeups: dict[str, asyncio.Event] = field(default_factory=dict)
    memory: SessionMemories = field(default_factory=SessionMemories)
    """What this process keeps about each session between passes (``handlers.memory``)."""
    disruption: DisruptionClient | None = None
    netpol: NamespacePolicies | None = None
    """The namespaces' NetworkPolicies (None: none configured)."""
    secrets: SecretApi | None = None
    lanes: LaneClients | None = None
    ready_claims: dict[tuple[str, str], tuple[float, tuple[bool, str, str]]] = field(
        default_factory=dict
    )
    llm_secrets: dict[tuple[str, str], tuple[float, dict[str, Any]]] = field(default_factory=dict)
    budget: BudgetClients | None = None
    gateway: GatewayClients | None = None
    warm: WarmPoolState = field(default_factory=WarmPoolState)
    migrations: MigrationSlots = field(default_factory=MigrationSlots)
    sessions: SessionWorkers = field(default_factory=SessionWorkers)
    background: set[asyncio.Task[None]] = field(default_factory=set)
    """Tasks started by :meth:`spawn` that have not ended."""
    outcome_waits: set[str] = field(default_factory=set)
    """Pod uids whose ``GET /v1/outcome`` is being awaited (one waiter per pod)."""

    def request_eviction(self, uid: str, pod_name: str) -> bool:
        """Remember an eviction request for ``pod_name``; True the first time."""
        pods = self.memory(uid).evictions
        first = pod_name not in pods
        pods.add(pod_name)
        return first

    async def api_token(self, namespace: str, name: str, uid: str) -> str | None:
        """Session ``uid``'s API token from the cache, read from its ``<name>-berth`` Secret
        the first time (a new leader has not read it yet). None when it cannot be read; raises
        BerthOperatorError for API errors."""
        memory = self.memory(uid)
        if memory.token is None and self.secrets is not None:
            token = await self.secrets.api_token(SessionRef(namespace, name, uid))
            if token is not None and memory.token is None:
                memory.token = token
        return memory.token

    def wakeup(self, key: str) -> asyncio.Event:
        """The wake-up event of ``key`` (a SessionWarmPool's; created on first use)."""
        event = self.wakeups.get(key)
        if event is None:
            event = self.wakeups[key] = asyncio.Event()
        return event

    def drop_wakeup(self, key: str, event: asyncio.Event) -> None:
        """Forget the wake-up event of ``key`` when it is still ``event`` (the stopped daemon's:
        a daemon of a pool made again under the same name may already have its own)."""
        if self.wakeups.get(key) is event:
            del self.wakeups[key]

    def wake_session(self, uid: str) -> None:
        """Make session ``uid`` reconcile now: queued for a worker (if the watch has shown it)
        instead of waiting for its next timer."""
        self.sessions.wake(uid)

    def wake(self, key: str) -> None:
        """Make the daemon waiting on the wake-up event of ``key`` (a SessionWarmPool's) run
        now; nothing when no daemon has asked for that event."""
        event = self.wakeups.get(key)
        if event is not None:
            event.set()

    def mark_inflight(self, uid: str, pod_name: str) -> None:
        """Remember a create until the cache shows the pod (and forget failed attempts)."""
        self.memory.set_inflight(uid, pod_name)

    def clear_inflight(self, uid: str) -> None:
        """Forget session ``uid``'s create in flight: its pod will not show (it was given up)."""
        self.memory.set_inflight(uid, None)

    def create_failed(self, uid: str, create: CreatePod, error: BaseException) -> CreateFailure:
        """Remember that placing ``create.epoch``'s pod of session ``uid`` failed with
        ``error`` after the epoch was stored; attempts count up while the epoch stays the
        same. ``decide`` reads it (``Observation.create_failure``) to try that epoch again."""
        before = self.memory(uid).create_failure
        same = before is not None and before.create.epoch == create.epoch
        failure = CreateFailure(
            create=create,
            message=str(error) or type(error).__name__,
            attempts=before.attempts + 1 if same and before is not None else 1,
            failed_at=datetime.now(UTC),
        )
        self.memory(uid).create_failure = failure
        return failure

    def inflight_for(self, uid: str, cached_names: set[str]) -> str | None:
        """The in-flight pod name of ``uid``, dropping it once cached or expired."""
        memory = self.memory.peek(uid)
        if memory is None or memory.inflight is None:
            return None
        name, since = memory.inflight
        if (
            name in cached_names
            or time.monotonic() - since > self.settings.placement.inflight_ttl_seconds
        ):
            self.memory.set_inflight(uid, None)
            return None
        return name

    def spawn(self, work: Coroutine[Any, Any, None]) -> None:
        """Run ``work`` in the background; a reference is kept until it ends (asyncio keeps
        only weak ones)."""
        task = asyncio.create_task(work)
        self.background.add(task)
        task.add_done_callback(self.background.discard)

    def reported_ends(self, uid: str, pods: Iterable[ObservedPod]) -> list[ObservedPod]:
        """Session ``uid``'s ``pods`` with the end its pod reported itself applied (see
        ``SessionMemory.outcome``); the report is dropped once the kubelet's shows or the pod is
        gone."""
        pods = list(pods)
        memory = self.memory.peek(uid)
        if memory is None or memory.outcome is None:
            return pods
        pod_uid, message, at = memory.outcome
        reported = next((p for p in pods if p.uid == pod_uid), None)
        if reported is None or reported.terminated is not None:
            memory.outcome = None
            return pods
        return [ended_as_reported(p, message, at) if p is reported else p for p in pods]

    def forget(self, uid: str) -> None:
        """Drop everything kept for a deleted session."""
        self.memory.forget(uid)
        self.migrations.forget(uid)
        self.phases.set(uid, None)
