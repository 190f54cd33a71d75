"""The cluster as the web view reads it: the user's own ``PluginClient`` (their kubeconfig, so
RBAC applies as for kubectl), called off the event loop, and what the view remembers while it
runs (token use, tool calls of pods that are gone, a LaneWorker's backlog and replicas).

Every read goes through the apiserver: the AgentSession and LaneWorker objects, Events, and the
session pod's ``GET /v1/state`` and ``GET /v1/runs/{runId}/events`` (with the session's API token
from its Secret) and ``/metrics`` through the pod proxy, as ``kubectl berth status``/``send`` do.
A read the user may not make (``view`` has neither ``get secrets`` nor ``pods/proxy``) leaves
that part out and says why.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import deque
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from berth_operator.errors import BerthOperatorError
from pydantic import ValidationError

from berth_contract.runview import RunEvents, ToolCallView, run_events_path
from kubectl_berth.client import PluginClient
from kubectl_berth.errors import PluginError
from kubectl_berth.session_api import (
    HTTP_TIMEOUT_SECONDS,
    call_session,
    describe,
    passivate_body,
    pod_proxy_path,
    send_waking,
)
from kubectl_berth.ui.links import Links
from kubectl_berth.ui.model import calls_cursor, merge_calls, tool_calls_by_lane

HISTORY = 3600
"""Samples kept per series (one a poll: an hour at one a second)."""
ACCESS_TTL_SECONDS = 30.0
"""How long an access review's answer is reused."""
ACTIONS = ("send", "passivate", "suspend", "resume")
"""What a user may do from a session page (each only when RBAC allows it)."""
SEND_WAIT_SECONDS = 60.0
"""How long ``send`` from the page waits for a session at rest to wake."""
RUN_VIEW_RUNS = 3
"""How many of a session's latest runs on its current pod a read asks the pod about."""
RUN_VIEW_LIMIT = 100
"""Tool calls per page and messages (the newest) asked of ``GET /v1/runs/{runId}/events``."""
RUN_CALLS_KEPT = 500
"""Tool calls the view keeps per run (the newest)."""


@dataclass
class SessionSnapshot:
    """One read of a session: its object, the runtime's state (or why there is none), tool
    calls by lane of each pod seen, its Events and the token samples so far."""

    body: dict[str, Any]
    state: dict[str, Any] | None
    state_note: str
    calls: dict[str, dict[str, int]]
    events: list[dict[str, Any]]
    tokens: list[tuple[datetime, int]]
    run_calls: dict[str, list[ToolCallView]] = field(default_factory=dict)
    last_run: RunEvents | None = None


@dataclass
class History:
    """Series the view samples while it runs, by ``namespace/name`` (pods: by pod name)."""

    tokens: dict[str, deque[tuple[datetime, int]]] = field(default_factory=dict)
    pod_calls: dict[str, dict[str, int]] = field(default_factory=dict)
    workers: dict[str, deque[tuple[datetime, int, int, int]]] = field(default_factory=dict)
    run_calls: dict[str, list[ToolCallView]] = field(default_factory=dict)
    """Tool calls by run id, as the runs' pods reported them while the view was open."""
    run_views: dict[str, RunEvents] = field(default_factory=dict)
    """The last answer about each run (a finished run read to its end is not asked again)."""

    def token_sample(self, key: str, at: datetime, total: int) -> list[tuple[datetime, int]]:
        """Record ``total`` tokens at ``at`` for session ``key``; return the series."""
        series = self.tokens.setdefault(key, deque(maxlen=HISTORY))
        if not series or series[-1][1] != total or (at - series[-1][0]).total_seconds() > 30:
            series.append((at, total))
        return list(series)

    def worker_sample(
        self, key: str, at: datetime, backlog: int, in_flight: int, replicas: int
    ) -> list[tuple[datetime, int, int, int]]:
        """Record a LaneWorker's backlog, in-flight tasks and replicas; return the series."""
        series = self.workers.setdefault(key, deque(maxlen=HISTORY))
        series.append((at, backlog, in_flight, replicas))
        return list(series)


class Source:
    """The user's view of the cluster for the pages (``namespace`` None: every namespace)."""

    def __init__(
        self, client: PluginClient, namespace: str | None, links: Links | None = None
    ) -> None:
        self.client = client
        self.namespace = namespace
        self.links = links or Links()
        self.history = History()
        self._tokens: dict[str, str] = {}
        self._access: dict[tuple[str, str], tuple[float, bool]] = {}

    def _in(self, namespace: str) -> PluginClient:
        return self.client.in_namespace(namespace)

    async def sessions(self) -> list[dict[str, Any]]:
        """The AgentSessions the view covers. Raises KubeError."""
        if self.namespace is None:
            return await asyncio.to_thread(self.client.list_sessions, True)
        return await asyncio.to_thread(self._in(self.namespace).list_sessions)

    async def session(self, namespace: str, name: str) -> SessionSnapshot:
        """Read session ``namespace/name`` now. Raises NotFound or KubeError for the object;
        the runtime's state and metrics are left out (with a note) when they cannot be read."""
        api = self._in(namespace)
        body = await asyncio.to_thread(api.get_session, name)
        state, note = await asyncio.to_thread(self._state, api, name, body)
        await asyncio.to_thread(self._sample_calls, api, body)
        last_run = await asyncio.to_thread(self._read_runs, api, name, body) if state else None
        events = await asyncio.to_thread(self._events, api, name, body)
        usage = (body.get("status") or {}).get("usage") or {}
        total = int(
            (state or {}).get("usage", {}).get("totalTokens") or usage.get("totalTokens") or 0
        )
        series = self.history.token_sample(f"{namespace}/{name}", datetime.now(UTC), total)
        calls = dict(self.history.pod_calls)
        runs = [str(r.get("runId")) for r in (body.get("status") or {}).get("runs") or []]
        run_calls = {r: self.history.run_calls[r] for r in runs if r in self.history.run_calls}
        return SessionSnapshot(body, state, note, calls, events, series, run_calls, last_run)

    def _state(
        self, api: PluginClient, name: str, body: dict[str, Any]
    ) -> tuple[dict[str, Any] | None, str]:
        status = body.get("status") or {}
        if not status.get("podName") or not status.get("podIP"):
            return None, "no pod now"
        try:
            token = self._token(api, name)
            path = pod_proxy_path(body, "/v1/state")
            code, answer = api.proxy_get(path, token, HTTP_TIMEOUT_SECONDS)
        except (BerthOperatorError, PluginError) as exc:
            return None, str(exc)
        if code in (401, 403):
            self._tokens.pop(f"{api.namespace}/{name}", None)
        if code != 200 or not isinstance(answer, dict):
            return None, f"the runtime's state is not readable: {describe(code, answer)}"
        return answer, ""

    def _token(self, api: PluginClient, name: str) -> str:
        key = f"{api.namespace}/{name}"
        if key not in self._tokens:
            self._tokens[key] = api.session_token(name)
        return self._tokens[key]

    def _sample_calls(self, api: PluginClient, body: dict[str, Any]) -> None:
        pod = (body.get("status") or {}).get("podName")
        if not pod:
            return
        try:
            code, text = api.proxy_get(pod_proxy_path(body, "/metrics"), "", HTTP_TIMEOUT_SECONDS)
        except (BerthOperatorError, PluginError):
            return
        if code == 200 and isinstance(text, str):
            counts = tool_calls_by_lane(text)
            if counts:
                self.history.pod_calls[str(pod)] = counts

    def _read_runs(self, api: PluginClient, name: str, body: dict[str, Any]) -> RunEvents | None:
        """Ask the current pod about the latest runs it ran (``RUN_VIEW_RUNS``; a run it said
        was over and whose calls were all read is not asked again): merge their new tool calls
        into the history; return the last run's answer (its conversation), or None when the pod
        does not answer (an older runtime: 404)."""
        status = body.get("status") or {}
        pod = status.get("podName")
        mine = [r for r in status.get("runs") or [] if r.get("podName") == pod and r.get("runId")]
        last = None
        for run in mine[-RUN_VIEW_RUNS:]:
            run_id = str(run["runId"])
            seen = self.history.run_views.get(run_id)
            if seen is not None and seen.status != "running" and seen.next is None:
                last = seen
                continue
            known = self.history.run_calls.get(run_id, [])
            path = run_events_path(run_id, calls_cursor(known), RUN_VIEW_LIMIT)
            try:
                code, answer = api.proxy_get(
                    pod_proxy_path(body, path), self._token(api, name), HTTP_TIMEOUT_SECONDS
                )
                view = RunEvents.model_validate(answer) if code == 200 else None
            except (BerthOperatorError, PluginError, ValidationError):
                view = None
            if view is None:
                continue
            merged = merge_calls(known, view.tool_calls)
            self.history.run_calls[run_id] = merged[-RUN_CALLS_KEPT:]
            self.history.run_views[run_id] = last = view
        return last

    def _events(self, api: PluginClient, name: str, body: dict[str, Any]) -> list[dict[str, Any]]:
        found = list(api.events_of("AgentSession", name))
        pod = (body.get("status") or {}).get("podName")
        if pod:
            with contextlib.suppress(BerthOperatorError):  # the pod may be gone already
                found += api.events_of("Pod", str(pod))
        return found

    async def worker(self, namespace: str, name: str) -> dict[str, Any]:
        """Read LaneWorker ``namespace/name`` and sample its backlog, in-flight and replicas.
        Raises NotFound or KubeError."""
        body = await asyncio.to_thread(self._in(namespace).get_laneworker, name)
        st = body.get("status") or {}
        pressure = st.get("pressure") or {}
        self.history.worker_sample(
            f"{namespace}/{name}",
            datetime.now(UTC),
            int(pressure.get("backlog") or 0),
            int(pressure.get("inFlight") or 0),
            int(st.get("replicas") or 0),
        )
        return body

    async def allowed(self, namespace: str) -> dict[str, bool]:
        """Which of ``ACTIONS`` the user may take in ``namespace`` (SelfSubjectAccessReviews,
        cached for ``ACCESS_TTL_SECONDS``): send and passivate need ``get secrets`` and
        ``create pods/proxy``; suspend and resume ``patch agentsessions``."""
        api = self._in(namespace)
        checks = {
            "secrets": ("get", "secrets", "", ""),
            "proxy": ("create", "pods", "proxy", ""),
            "patch": ("patch", "agentsessions", "", "berth.dev"),
        }
        got = {}
        for key, (verb, resource, sub, group) in checks.items():
            cached = self._access.get((namespace, key))
            if cached is None or time.monotonic() - cached[0] > ACCESS_TTL_SECONDS:
                ok = await asyncio.to_thread(api.can, verb, resource, sub, group)
                cached = (time.monotonic(), ok)
                self._access[(namespace, key)] = cached
            got[key] = cached[1]
        drive = got["secrets"] and got["proxy"]
        return {"send": drive, "passivate": drive, "suspend": got["patch"], "resume": got["patch"]}

    async def act(self, namespace: str, name: str, action: str, prompt: str = "") -> str:
        """Carry out ``action`` on session ``namespace/name``; the line to show. Raises
        PluginError for a refusal or an action the user may not take, KubeError for the API."""
        if not (await self.allowed(namespace)).get(action):
            raise PluginError(f"{action} is not allowed for you in namespace {namespace}")
        return await asyncio.to_thread(self._act, self._in(namespace), name, action, prompt)

    def _act(self, api: PluginClient, name: str, action: str, prompt: str) -> str:
        if action in ("suspend", "resume"):
            api.set_suspend(name, action == "suspend")
            return f"{name}: {action} requested"
        body = api.get_session(name)
        if action == "passivate":
            payload = passivate_body(body, None, int(time.time() * 1000))
            code, answer = call_session(api, name, body, "/v1/passivate", payload, None)
        elif action == "send":
            if not (body.get("spec") or {}).get("keepAlive"):
                raise PluginError(f"session {name} is not keepAlive: it takes no messages")
            if not prompt.strip():
                raise PluginError("an empty message is not sent")
            code, answer = send_waking(api, name, body, prompt, None, SEND_WAIT_SECONDS)
        else:
            raise PluginError(f"unknown action {action!r}")
        if code >= 300:
            raise PluginError(f"the session pod refused: {describe(code, answer)}")
        return f"{name}: {action} accepted (HTTP {code})"
