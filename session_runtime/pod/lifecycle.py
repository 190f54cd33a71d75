"""``SessionPod``: one session pod's session, its lifecycle phase and the pod API's behaviour.

Owned by the ``berth-session`` entrypoint (``session_runtime.server``), which builds one per
process, serves :func:`session_runtime.pod.http.make_app` for it and returns its termination
message. The contract it keeps (start plan, passivation, messages, termination) is described in
the ``session_runtime.server`` module docstring.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from berth_contract.options import SessionPodOptions
from berth_contract.state import (
    Passivation,
    PeerInvocation,
    Phase,
    state_body,
)
from berth_contract.termination import Outcome, TerminationMessage, Usage
from session_runtime import Agent, SessionOptions, SessionRetentionLimits
from session_runtime.agent.session import Session
from session_runtime.errors import (
    ConfigError,
    FencedError,
    RunPassivatedError,
    SessionRuntimeError,
)
from session_runtime.metrics import SessionMetrics
from session_runtime.pod.budget import session_guard
from session_runtime.pod.config import PodConfig, read_secret_file
from session_runtime.pod.metered import MeteredBudgetGuard, MeteredStore
from session_runtime.pod.peer import peer_tool
from session_runtime.pod.resume import resume_or_restart
from session_runtime.pod.runview import run_events
from session_runtime.pod.start import StartPlan, plan_start
from session_runtime.pod.wiring import build_executor
from session_runtime.store.file import FileSessionStore
from session_runtime.store.fscheck import checked_store_dir
from session_runtime.store.health import store_failure_code
from session_runtime.store.ids import check_id
from session_runtime.store.incarnation import open_incarnation, record_inherited
from session_runtime.tools.base import lane_for_tool
from session_runtime.tools.host import HostTool

log = logging.getLogger("berth.session")

#: How long after a passivation deadline the process still waits for the runtime's checkpoint.
PASSIVATION_SLACK_MS = 3000

#: How often ``post_message`` looks for the new run's record (it appears within one loop turn).
RECORD_POLL_SECONDS = 0.005

#: Appended to the termination ``reason`` when passivation hit its deadline with tools running.
CUT_OFF_SUFFIX = " (deadline passed: running tools were cut off; the last durable round stands)"


def now_ms() -> int:
    """Wall clock in epoch milliseconds (the unit of ``deadlineMs``)."""
    return time.time_ns() // 1_000_000


class SessionPod:
    """One session pod: the agent session, its lifecycle phase and the pod API's behaviour.

    Built by :func:`run`; its HTTP handlers and signal handlers call :meth:`request_passivation`
    and :meth:`post_message`. :meth:`wait` returns the termination message. Single event loop:
    every method runs on it (no locks).
    """

    def __init__(self, cfg: PodConfig, opts: SessionPodOptions, metrics: SessionMetrics) -> None:
        self.cfg = cfg
        self.opts = opts
        self.metrics = metrics
        self.phase: Phase = "starting"
        self.idle_since_ms: int | None = None
        """When the pod last became idle (epoch ms), None while not idle (``idleSinceMs``)."""
        self.run_started_ms: int | None = None
        """When the pod started its latest run (epoch ms; ``runStartedMs``): the operator dates a
        resume by it rather than by when it next looked."""
        self.session: Session | None = None
        self.agent: Agent | None = None
        self.passivation: Passivation | None = None
        self.fenced: FencedError | None = None
        self._result_text: str | None = None
        self.plan = StartPlan("send", None, "not built yet")
        self._finished: asyncio.Future[TerminationMessage] | None = None
        self._run_task: asyncio.Task[None] | None = None
        self._passivate_task: asyncio.Task[None] | None = None

    @property
    def live(self) -> Session:
        """The session :meth:`build` made. Raises RuntimeError before that: runs, passivation
        and messages start only once it is built, so reaching this early is a bug."""
        if self.session is None:
            raise RuntimeError("the session is not built yet")
        return self.session

    # ---- lifecycle ---------------------------------------------------------------------

    def _set_phase(self, phase: Phase) -> None:
        if phase != "idle":
            self.idle_since_ms = None
        elif self.phase != "idle" or self.idle_since_ms is None:
            self.idle_since_ms = now_ms()  # the operator's idle reaper counts from here
        self.phase = phase
        self.metrics.set_state(phase)

    def _future(self) -> asyncio.Future[TerminationMessage]:
        if self._finished is None:
            self._finished = asyncio.get_running_loop().create_future()
        return self._finished

    def finish(self, message: TerminationMessage) -> None:
        """Record the outcome (first call wins) and let :meth:`wait` return."""
        fut = self._future()
        if fut.done():
            return
        if self.fenced is not None and message.outcome == "failed":
            message = self._message("fenced", reason=str(self.fenced))
        self._set_phase(message.outcome)
        fut.set_result(message)

    async def wait(self) -> TerminationMessage:
        """The termination message, once the session has ended."""
        return await self._future()

    def _on_fenced(self, exc: FencedError) -> None:
        if self.fenced is None:
            log.error("fenced: %s", exc)
            self.fenced = exc

    def runtime_state(self) -> dict[str, Any] | None:
        """``Session.state()`` or None (no session yet, or the call failed)."""
        if self.session is None:
            return None
        try:
            state = self.session.state()
        except Exception:
            log.debug("state() failed", exc_info=True)
            return None
        return dict(state)

    def _run_field(self, run_id: str | None, name: str) -> str | None:
        """Field ``name`` of run ``run_id``'s record (``resumed_from``: the run it continues;
        ``traceparent``: its span's), or None."""
        if self.session is None or not run_id:
            return None
        try:
            snapshot = self.session.run_snapshot(run_id)
        except Exception:
            return None
        value = snapshot.get(name) if snapshot is not None else None
        return str(value) if value else None

    def _message(
        self,
        outcome: Outcome,
        *,
        reason: str | None = None,
        run_id: str | None = None,
        turn: int | None = None,
        code: str | None = None,
    ) -> TerminationMessage:
        """A termination message; run id, turn and usage default to ``Session.state()`` (the
        session's cumulative usage and its last run), the text to the last finished run's."""
        rt = self.runtime_state() or {}
        if run_id is None:
            run_id = rt.get("run_id") or self.cfg.resume_run_id
        if turn is None:
            rt_turn = rt.get("turn")
            turn = rt_turn if isinstance(rt_turn, int) else 0
        return TerminationMessage(
            outcome=outcome,
            run_id=run_id,
            turn=turn,
            usage=Usage.from_mapping(rt.get("usage")),
            reason=reason,
            result_text=self._result_text,
            resumed_from=self._run_field(run_id, "resumed_from"),
            code=code,
        )

    # ---- building the session ----------------------------------------------------------

    def build_failed(self, exc: SessionRuntimeError | ValueError | OSError) -> TerminationMessage:
        """The termination message for an error of :meth:`build`: ``fenced`` for a newer epoch,
        ``failed`` as bad input for unusable configuration, else ``failed`` (with the code of a
        store failure, :func:`~session_runtime.store.health.store_failure_code`)."""
        if isinstance(exc, FencedError):
            self._on_fenced(exc)
            return self._message("fenced", reason=str(exc))
        if isinstance(exc, ConfigError | ValueError):
            return TerminationMessage(outcome="failed", reason=str(exc), bad_input=True)
        return self._message("failed", reason=str(exc), code=store_failure_code(exc))

    def build(self) -> None:
        """Claim the session's lease for this epoch, create the agent and the session (resumed
        when the store holds it, else fresh) and decide :attr:`plan` (:func:`plan_start`).

        Raises ``FencedError`` when a newer epoch already owns the session, the runtime's other
        errors, and ``ValueError`` for unusable options."""
        cfg = self.cfg
        store_root = cfg.store_dir / cfg.namespace
        session_dir = checked_store_dir(store_root / check_id("session id", cfg.name))
        incarnation = open_incarnation(session_dir, cfg.session_uid)
        raw_store = FileSessionStore(str(store_root), epoch=incarnation.store_epoch(cfg.epoch))
        raw_store.acquire(cfg.name)  # claim the lease now: older epochs are fenced from here on
        self.metrics.watch_store(session_dir)
        guard = MeteredBudgetGuard(self.opts.budget, self.metrics)
        store = MeteredStore(raw_store, self.metrics, self._on_fenced)
        options = self._session_options(store, guard)
        executor = build_executor(cfg, self.opts, self.metrics.observe_rejected_reply)
        self.agent = Agent.create(self.agent_config())
        cfg.workspace.mkdir(parents=True, exist_ok=True)
        workspace = str(cfg.workspace)
        saved = raw_store.load_session(cfg.name) is not None
        if saved:
            self.session = self.agent.resume_session(
                cfg.name, options, workspace=workspace, executor=executor
            )
        else:
            self.session = self.agent.session(workspace, options, executor=executor)
        every_run = self.session.runs()
        incarnation = record_inherited(
            session_dir, incarnation, [str(r["id"]) for r in every_run if r.get("id")]
        )
        runs = incarnation.own_runs(every_run)  # a deleted object's runs are never this one's
        self.plan = plan_start(
            cfg.resume_run_id,
            saved,
            runs,
            self.opts.keep_alive,
            has_checkpoint=lambda run_id: raw_store.load_checkpoint(cfg.name, run_id) is not None,
            inherited=len(every_run) - len(runs),
        )
        log.info("start plan: %s (%s)", self.plan.action, self.plan.why)
        restored = self.runtime_state() or {}  # the saved session's totals over finished runs
        guard.carry(
            Usage.from_mapping(restored.get("usage")).total_tokens,
            int(restored.get("tool_calls_count") or 0),
        )
        if self.plan.action == "resume" and self.plan.run_id:
            cp = raw_store.load_checkpoint(cfg.name, self.plan.run_id)
            if cp is not None:  # the interrupted run's own carried-forward counts
                guard.carry(int(cp.total_usage.get("total_tokens", 0)), cp.tool_calls_count)
                store.resume_start_turn = cp.turn
        target = next((r for r in runs if r.get("id") == self.plan.run_id), None)
        if self.plan.action in ("idle", "done") and target is not None:
            self._result_text = target.get("result_text")
        self.session.register_hook("berth-session-metrics", "tool_end", self._on_tool_end)
        self.session.register_hook(
            "berth-session-log", "passivation_requested", self._on_passivation_requested
        )

    def agent_config(self) -> dict[str, Any] | None:
        """Agent config: the options' ``llm.baseUrl`` wins over ``OPENAI_BASE_URL``; the key is
        read by the runtime from the env var the options name (default ``OPENAI_API_KEY``) or
        the mounted key file; timeout, retries, organization, project, headers and CA bundle
        come from the options' ``llm`` (``spec.llm``). None when everything is the default."""
        llm = self.opts.llm
        base_url = llm.base_url or self.cfg.openai_base_url
        provider, _, model = self.opts.model.partition("/")
        if base_url is None and llm == type(llm)():
            return None  # the runtime's default: openai/<model> from OPENAI_* env vars
        return {
            "default_model": self.opts.model,
            "providers": {provider: llm.provider(base_url, model)},
        }

    def _session_options(self, store: Any, guard: MeteredBudgetGuard) -> SessionOptions:
        """``SessionOptions`` from the pod options: identity labels, limits (unset = the A3S
        default), retention caps, the budget guard and the store; ``auto_save`` on so run records
        survive a crash (docs/architecture.md §10 "Persistence")."""
        opts, cfg = self.opts, self.cfg
        ident = opts.identity
        return SessionOptions(
            model=opts.model,
            session_id=cfg.name,
            session_store=store,
            auto_save=True,
            tenant_id=ident.tenant_id,
            principal=ident.principal,
            agent_template_id=ident.agent_template_id,
            correlation_id=ident.correlation_id,
            budget_guard=session_guard(cfg, guard),
            retention_limits=SessionRetentionLimits(**opts.retention.model_dump()),
            host_tools=self._host_tools(),
            **opts.limits.session_options(),
        )

    def _host_tools(self) -> tuple[HostTool, ...]:
        """``call_peer`` when the options allow peer calls (``spec.peers``), else none. Raises
        PodConfigError when the API token file (its credential) cannot be read."""
        calls, cfg = self.opts.peer_calls, self.cfg
        if calls is None or cfg.api_token_file is None:
            return ()
        token = read_secret_file(cfg.api_token_file, "BERTH_API_TOKEN_FILE").decode()
        tool = peer_tool(
            calls.gateway_url,
            cfg.namespace,
            cfg.session_uid,
            token,
            self.opts.identity.correlation_id,
            calls.max_wait_seconds,
        )
        return (tool,)

    def _on_tool_end(self, event: Mapping[str, Any]) -> None:
        self.metrics.observe_tool_call(lane_for_tool(str(event.get("name", ""))))

    def _on_passivation_requested(self, event: Mapping[str, Any]) -> None:
        """Log the runtime's ``passivation_requested`` as the session's hooks see it (§8)."""
        log.info(
            "hook event passivation_requested reason=%s deadline_ms=%s run_id=%s",
            event.get("reason"),
            event.get("deadline_ms"),
            event.get("run_id"),
        )

    # ---- runs ----------------------------------------------------------------------------

    def start(self) -> None:
        """Carry out :attr:`plan` (see :mod:`session_runtime.pod.start`), or end passivated at
        once if passivation was asked for while the session was being built."""
        if self.passivation is not None:
            self._set_phase("passivating")
            self.finish(self._message("passivated", reason=self.passivation.reason))
            return
        plan = self.plan
        if plan.action == "idle":
            self._set_phase("idle")
        elif plan.action == "done":
            self.finish(self._message("completed", run_id=plan.run_id))
        elif plan.action == "resume" and plan.run_id:
            run_id = plan.run_id
            self._start_run(lambda: resume_or_restart(self.live, run_id, self.opts.prompt))
        else:
            prompt = self.opts.prompt
            self._start_run(lambda: self.live.send_async(prompt))

    def _start_run(self, factory: Callable[[], Awaitable[Any]]) -> None:
        self.run_started_ms = now_ms()
        self._set_phase("running")
        self._run_task = asyncio.get_running_loop().create_task(self._drive(factory))

    async def _drive(self, factory: Callable[[], Awaitable[Any]]) -> None:
        """Await one run and turn its end into a phase change or a termination message."""
        try:
            result = await factory()
        except RunPassivatedError as exc:
            if self.passivation is None:  # passivated by someone else (e.g. a host event)
                self.finish(
                    self._message("passivated", reason=str(exc), run_id=exc.run_id, turn=exc.turn)
                )
            return  # else the passivation task finishes
        except FencedError as exc:
            self._on_fenced(exc)
            self.finish(self._message("fenced", reason=str(exc)))
            return
        except SessionRuntimeError as exc:
            self.finish(self._message("failed", reason=str(exc), code=store_failure_code(exc)))
            return
        except Exception as exc:
            log.exception("run failed unexpectedly")
            self.finish(
                self._message("failed", reason=f"internal error: {type(exc).__name__}: {exc}")
            )
            return
        self._result_text = getattr(result, "text", None)
        if self.fenced is not None:
            self.finish(self._message("fenced", reason=str(self.fenced)))
        elif not self.opts.keep_alive:
            self.finish(self._message("completed"))
        elif self.passivation is not None:
            self._set_phase("passivating")  # the passivation task finishes
        else:
            self._set_phase("idle")

    # ---- pod API behaviour ---------------------------------------------------------------

    def request_passivation(self, reason: str, deadline_ms: int | None) -> Passivation:
        """Accept a passivation request (idempotent: the first request wins)."""
        if self.passivation is not None:
            return self.passivation
        now = now_ms()
        if deadline_ms is None:
            deadline_ms = now + self.opts.passivation.deadline_seconds * 1000
        self.passivation = Passivation(reason, deadline_ms, now)
        self.metrics.observe_passivation(reason)
        log.info("passivation requested: reason=%s deadline_ms=%d", reason, deadline_ms)
        if self.phase in ("running", "idle"):
            self._set_phase("passivating")
            self._passivate_task = asyncio.get_running_loop().create_task(
                self._passivate(self.passivation)
            )
        # "starting": start() sees the request and ends passivated without starting a run.
        return self.passivation

    async def _passivate(self, p: Passivation) -> None:
        """Run ``Session.passivate_async`` until the deadline (+ slack), then finish."""
        timeout = max(0, p.deadline_ms - now_ms() + PASSIVATION_SLACK_MS) / 1000
        try:
            answer = await asyncio.wait_for(
                self.live.passivate_async(p.reason, p.deadline_ms), timeout
            )
        except TimeoutError:
            log.warning("passivation outlived its deadline; exiting on the last durable round")
            self.finish(self._message("passivated", reason=p.reason + CUT_OFF_SUFFIX))
            return
        except FencedError as exc:
            self._on_fenced(exc)
            self.finish(self._message("fenced", reason=str(exc)))
            return
        except Exception as exc:
            log.exception("passivation failed")
            reason, code = f"passivation failed: {exc}", store_failure_code(exc)
            self.finish(self._message("failed", reason=reason, code=code))
            return
        if self._run_task is not None:  # let the run end on its boundary so state() is final
            remaining = max(0, p.deadline_ms - now_ms() + PASSIVATION_SLACK_MS) / 1000
            await asyncio.wait({self._run_task}, timeout=remaining)
        info = answer
        turn = info.get("turn")
        cut_off = info.get("outcome") == "timeout"  # the runtime cancelled tools at the deadline
        self.finish(
            self._message(
                "passivated",
                reason=p.reason + CUT_OFF_SUFFIX if cut_off else p.reason,
                run_id=info.get("run_id"),
                turn=turn if isinstance(turn, int) else None,
            )
        )

    @property
    def built(self) -> bool:
        """Whether :meth:`build` made the session."""
        return self.session is not None

    def message_runs(self, message_id: str) -> list[dict[str, Any]]:
        """The retained runs message ``message_id`` started (oldest first; [] if none)."""
        return [] if self.session is None else list(self.session.runs_of_message(message_id))

    def run_events(self, run_id: str) -> list[dict[str, Any]]:
        """The retained events of run ``run_id`` ([] if none, or no session yet)."""
        return [] if self.session is None else list(self.session.run_events(run_id))

    def run_view(self, run_id: str, after: int, limit: int) -> dict[str, Any] | None:
        """``GET /v1/runs/{id}/events`` (:func:`session_runtime.pod.runview.run_events`)."""
        return None if self.session is None else run_events(self.session, run_id, after, limit)

    async def post_message(
        self,
        prompt: str,
        message_id: str | None = None,
        peer: PeerInvocation | None = None,
    ) -> tuple[int, dict[str, Any]]:
        """``POST /v1/messages`` behaviour: (HTTP status, body). See the module docstring.

        A known ``message_id`` answers 200 ``{"accepted", "duplicate": true, "runId"}`` without
        a new run (exactly-once delivery by the front door). A new message on an idle keepAlive
        session answers 202 ``{"accepted", "messageId", "runId"}`` once its run record is in
        the store (so a retry after a lost answer finds it); with ``peer`` the run records the
        caller (``invoked_by``) and the hooks get a ``peer_invocation`` event as the run starts
        (``Session.send_async``). Busy, passivating or finished pods answer 409."""
        if message_id is not None:
            known = self.message_runs(message_id)
            if known:
                return 200, {
                    "accepted": True,
                    "duplicate": True,
                    "messageId": message_id,
                    "runId": known[-1].get("id"),
                    "state": self.phase,
                }
        if not self.opts.keep_alive:
            return 409, {"error": "not_keep_alive", "state": self.phase}
        if self.phase == "idle":
            invoked_by = peer.event_fields() if peer is not None else None
            self._start_run(
                lambda: self.live.send_async(prompt, message_id=message_id, invoked_by=invoked_by)
            )
            run_id = await self._recorded(message_id) if message_id is not None else None
            return 202, {
                "accepted": True,
                "messageId": message_id,
                "runId": run_id,
                "state": self.phase,
            }
        if self.phase in ("starting", "running"):
            return 409, {"error": "busy", "state": self.phase}
        if self.phase == "passivating":
            return 409, {"error": "passivating", "state": self.phase}
        return 409, {"error": "finished", "state": self.phase}

    async def _recorded(self, message_id: str) -> str | None:
        """The id of the run ``message_id`` started, once its record is saved (the run saves it
        before its first model call); None if the run ended first (it failed to start)."""
        task = self._run_task
        while True:
            runs = self.message_runs(message_id)
            if runs:
                return str(runs[-1].get("id"))
            if task is None or task.done():
                return None
            await asyncio.sleep(RECORD_POLL_SECONDS)

    def state_json(self) -> dict[str, Any]:
        """The ``GET /v1/state`` body."""
        rt = self.runtime_state()
        return state_body(
            self.phase,
            rt,
            session=self.cfg.session_key,
            epoch=self.cfg.epoch,
            identity=self.opts.identity,
            pod_name=self.cfg.pod_name,
            node_name=self.cfg.node_name,
            passivation=self.passivation,
            resumed_from=self._run_field(rt.get("run_id") if rt else None, "resumed_from"),
            traceparent=self._run_field(rt.get("run_id") if rt else None, "traceparent"),
            result_text=self._result_text,
            idle_since_ms=self.idle_since_ms,
            run_started_ms=self.run_started_ms,
        )

    def settled(self) -> bool:
        """After :meth:`close`: nothing of the session runs any more — the pod's run and
        passivation tasks have ended and the session holds no operation — so nothing touches
        its store again. False when a run outlived its cancellation (``close`` waits 10 s)."""
        if any(t is not None and not t.done() for t in (self._passivate_task, self._run_task)):
            return False
        return self.session is None or bool(self.session.quiescent)

    async def close(self) -> None:
        """Cancel what still runs and close the session and agent (errors are logged)."""
        for task in (self._passivate_task, self._run_task):
            if task is not None and not task.done():
                task.cancel()
                with contextlib.suppress(BaseException):
                    await task
        for obj in (self.session, self.agent):
            if obj is None:
                continue
            try:
                closer = getattr(obj, "close_async", None)
                if closer is not None:
                    await closer()
                else:
                    obj.close()
            except Exception:
                log.debug("close failed", exc_info=True)


# ---- process ---------------------------------------------------------------------------------
