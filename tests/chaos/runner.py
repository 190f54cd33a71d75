"""Runs scenarios: starts the session processes, injects each attempt's fault, resumes the way the
product does, and checks the invariants.

Owned by the chaos harness; :class:`Campaign` holds one job's resources (zygote, ledger service,
model server, Redis) and :meth:`Campaign.run` plays one :class:`~tests.chaos.scenario.Scenario`,
returning a JSON-able result. Used by ``python -m tests.chaos`` and the CI-sized pytest.

How a session is driven: attempt after attempt, a session process is forked (see
:mod:`tests.chaos.child`) with the session's epoch; the attempt's fault is applied; the harness
waits for the process to end, checks :func:`~tests.chaos.invariants.after_attempt`, and starts
the next attempt as the operator would place the next pod: with the epoch bumped after a
passivation or a lost placement (a new pod), or kept half the time after a crash (the container
restarted in place). Once the planned faults are used up, clean attempts resume the session until
its run completes in the store (at most :data:`MAX_CLEAN` of them; a process that finished its run
but could not make that durable, on a full volume, must end failed with the store code instead of
reporting completed: ``dishonest_completion`` otherwise, and the session is resumed); then
:func:`~tests.chaos.invariants.after_session` checks the final history against the ledger.

Harness-side faults: ``kill_session`` and the kill after ``clock_skew``/``slow_volume`` (SIGKILL
of the session process after ``at_ms``), ``zombie`` (the next attempt, one epoch up, starts
``at_ms`` in while the old process runs on; the old one is killed once the new one ends),
``kill_worker`` (SIGKILL of the worker holding a pending task, a replacement started),
``redis_restart`` and ``redis_loss`` (``XTRIM`` of the task stream to 0 and/or ``DEL`` of the
session's reply stream). An attempt that runs longer than :data:`ATTEMPT_TIMEOUT_S` is killed and
reported as ``hung``.
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import shutil
import signal
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import redis

from berth_contract import names
from berth_contract.termination import STORE_CODES, STORE_FULL
from tests.chaos import invariants
from tests.chaos.infra import RedisServer, Zygote
from tests.chaos.ledger import LedgerServer
from tests.chaos.model import ChaosModel, final_text
from tests.chaos.scenario import Fault, Scenario, SessionPlan

NAMESPACE = "chaos"
MAX_CLEAN = 4
ATTEMPT_TIMEOUT_S = 90.0
LANE_TIMEOUT_MS = 2500
REPLY_GRACE_MS = 500
WORKERS = 2
#: Exit statuses a session process may end with, and when each is expected.
EXIT_OK, EXIT_FENCED, EXIT_FAILED, KILLED = 0, 3, 4, -signal.SIGKILL
#: Fault kinds whose attempt may end ``failed`` (the run stops on the fault and is resumed).
MAY_FAIL = frozenset({"full_volume", "llm_fail"})


@dataclass(slots=True)
class SessionReport:
    """What happened to one session: attempts, faults that landed, violations, settle counts."""

    attempts: int = 0
    applied: Counter[str] = field(default_factory=Counter)
    landed: Counter[str] = field(default_factory=Counter)
    violations: list[invariants.Violation] = field(default_factory=list)
    stats: Counter[str] = field(default_factory=Counter)


class Workers:
    """The ``berth-worker`` processes of one scenario's LaneWorker pool."""

    def __init__(self, campaign: Campaign, root: Path, laneworker: str) -> None:
        self.campaign = campaign
        self.root = root
        self.laneworker = laneworker
        self.pids: dict[str, int] = {}
        self._n = 0
        self._lock = threading.Lock()

    def start(self) -> str:
        """Start one more worker; returns its pod name."""
        with self._lock:
            self._n += 1
            name = f"w{self._n}"
        env = {
            "BERTH_REDIS_URL": self.campaign.redis().url,
            "BERTH_NAMESPACE": NAMESPACE,
            "BERTH_LANEWORKER": self.laneworker,
            "POD_NAME": name,
            "POD_IP": "127.0.0.1",
            "BERTH_WORKER_CONCURRENCY": "1",
            "BERTH_WORKSPACES_ROOT": str(self.root / "shared" / "workspaces"),
            "BERTH_TASK_MASTER_KEY_FILE": str(self.campaign.master_key),
            "BERTH_TASK_TIMEOUT_SECONDS": "30",
            "BERTH_METRICS_PORT": "0",
            "BERTH_WORKER_HEARTBEAT_SECONDS": "1",
            "BERTH_RECLAIM_INTERVAL_SECONDS": "0.2",
            "BERTH_REPLY_TTL_SECONDS": "600",
            "BERTH_LOG_LEVEL": "WARNING",
        }
        log = str(self.root / "logs" / f"worker-{name}.log")
        pid = self.campaign.zygote.worker({"env": env, "log": log})
        with self._lock:
            self.pids[name] = pid
        return name

    def kill(self, name: str) -> bool:
        """SIGKILL worker ``name``; True if it was running."""
        pid = self.pids.pop(name, None)
        if pid is None:
            return False
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
        return self.campaign.wait(pid, 30) == KILLED

    def stop_all(self) -> None:
        """SIGKILL every worker (a scenario's pool is disposable) and reap them."""
        for name in list(self.pids):
            self.kill(name)


class Campaign:
    """One campaign job: zygote, ledger service, model server and (on first use) Redis, under
    ``root``. :meth:`run` plays a scenario; :meth:`close` stops everything."""

    def __init__(self, root: Path) -> None:
        self.root = root
        root.mkdir(parents=True, exist_ok=True)
        self.master_key = root / "master"
        self.master_key.write_bytes(b"chaos-master-key-of-32-bytes-xxx")
        self.ledger = LedgerServer(root / "ledger.txt")
        self.model = ChaosModel(self.ledger.port)
        self.model.start_in_thread()
        self.zygote = Zygote()
        self._redis: RedisServer | None = None
        self._redis_lock = threading.Lock()

    def redis(self) -> RedisServer:
        """The job's redis-server (started on first use)."""
        with self._redis_lock:
            if self._redis is None:
                self._redis = RedisServer(self.root / "redis", self.zygote)
            return self._redis

    def close(self) -> None:
        """Stop Redis, the model, the zygote (which kills what it forked) and the ledger
        service; each step runs even if an earlier one failed."""
        with contextlib.ExitStack() as steps:
            steps.callback(self.ledger.close)
            steps.callback(self.zygote.close)
            steps.callback(self.model.stop_thread)
            if self._redis is not None:
                steps.callback(self._redis.stop)

    def wait(self, pid: int, timeout_s: float) -> int | None:
        """The exit status of ``pid`` once it ended, or None after ``timeout_s`` seconds."""
        deadline = time.monotonic() + timeout_s
        while True:
            status = self.zygote.poll(pid)
            if status is not None:
                return status
            if time.monotonic() > deadline:
                return None
            time.sleep(0.005)

    # ---- a scenario ----------------------------------------------------------------------

    def run(self, scenario: Scenario) -> dict[str, Any]:
        """Play ``scenario``; returns ``{seed, lanes, sessions, attempts, applied, landed,
        violations, stats, seconds}`` (JSON-able). Its files are removed unless it violated an
        invariant (then they stay under ``root/x<seed>`` for inspection)."""
        t0 = time.monotonic()
        sdir = self.root / f"x{scenario.seed}"
        shutil.rmtree(sdir, ignore_errors=True)
        (sdir / "logs").mkdir(parents=True)
        workers = None
        if scenario.lanes:
            workers = Workers(self, sdir, f"lw{scenario.seed}")
            for _ in range(WORKERS):
                workers.start()
        reports = [SessionReport() for _ in scenario.sessions]
        threads = [
            threading.Thread(
                target=self._drive_safely, args=(scenario, i, sdir, workers, reports[i])
            )
            for i in range(len(scenario.sessions))
        ]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        if workers is not None:
            workers.stop_all()
            self._forget_streams(scenario)
        violations = [v.as_dict() for r in reports for v in r.violations]
        for plan in scenario.sessions:
            self.model.forget(plan.name)
            self.ledger.forget(plan.name + "-")
        if not violations:
            shutil.rmtree(sdir, ignore_errors=True)
        applied: Counter[str] = Counter()
        landed: Counter[str] = Counter()
        stats: Counter[str] = Counter()
        for r in reports:
            applied.update(r.applied)
            landed.update(r.landed)
            stats.update(r.stats)
        return {
            "seed": scenario.seed,
            "lanes": scenario.lanes,
            "sessions": len(scenario.sessions),
            "attempts": sum(r.attempts for r in reports),
            "applied": dict(applied),
            "landed": dict(landed),
            "violations": violations,
            "stats": dict(stats),
            "seconds": round(time.monotonic() - t0, 3),
        }

    def _forget_streams(self, scenario: Scenario) -> None:
        with contextlib.suppress(redis.RedisError):
            client = redis.Redis.from_url(self.redis().url)
            try:
                keys = list(client.scan_iter(f"berth:{NAMESPACE}:*", count=1000))
                if keys:
                    client.delete(*keys)
            finally:
                client.close()

    def _drive_safely(
        self,
        scenario: Scenario,
        index: int,
        sdir: Path,
        workers: Workers | None,
        report: SessionReport,
    ) -> None:
        plan = scenario.sessions[index]
        try:
            self._drive(scenario, index, sdir, workers, report)
        except Exception as exc:  # a harness failure is reported, never hidden
            report.violations.append(
                invariants.Violation("harness_error", plan.name, f"{type(exc).__name__}: {exc}")
            )

    def _drive(
        self,
        scenario: Scenario,
        index: int,
        sdir: Path,
        workers: Workers | None,
        report: SessionReport,
    ) -> None:
        plan = scenario.sessions[index]
        rng = random.Random(scenario.seed * 7919 + index)
        if scenario.lanes:
            workspace = sdir / "shared" / "workspaces" / NAMESPACE / plan.name
        else:
            workspace = sdir / "ws" / plan.name
        workspace.mkdir(parents=True)
        self.model.register(plan)
        ctx = _SessionCtx(self, scenario, plan, index, sdir, workspace, workers, report)
        faults = list(plan.faults)
        epoch, clean = 1, 0
        while True:
            fault = faults.pop(0) if faults else None
            if fault is None:
                clean += 1
                if clean > MAX_CLEAN:
                    break
            epoch, outcome = ctx.attempt(epoch, fault)
            self.ledger.sync()
            report.violations.extend(
                invariants.after_attempt(sdir / "store", plan.name, self._ledger(plan))
            )
            if outcome in ("completed", "done"):
                if invariants.final_history(sdir / "store", plan.name)[0] == "completed":
                    break
                # The process said the run completed but the store does not hold it so: a
                # report the operator would turn into Succeeded while a replacement would
                # find the run unfinished. A run whose end cannot be saved must end failed
                # with a store code instead (see _outcome).
                ctx.violation(
                    "dishonest_completion",
                    f"attempt {ctx.n} reported {outcome} but the store holds the run unfinished",
                )
            if fault is not None and (fault.kind == "passivate" or rng.random() < 0.5):
                epoch += 1  # a new placement; else the container restarted in place
        self.ledger.sync()
        found, stats = invariants.after_session(
            sdir / "store", plan.name, self._ledger(plan), final_text(plan.name)
        )
        report.violations.extend(found)
        report.stats.update(stats)

    def _ledger(self, plan: SessionPlan) -> list[Any]:
        return self.ledger.entries(plan.name + "-")


class _SessionCtx:
    """One session's attempts within a scenario (see the module docstring)."""

    def __init__(
        self,
        campaign: Campaign,
        scenario: Scenario,
        plan: SessionPlan,
        index: int,
        sdir: Path,
        workspace: Path,
        workers: Workers | None,
        report: SessionReport,
    ) -> None:
        self.c = campaign
        self.scenario = scenario
        self.plan = plan
        self.sdir = sdir
        self.workspace = workspace
        self.workers = workers
        self.report = report
        self.uid = f"u{scenario.seed:x}x{index}"
        self.n = 0

    def job(self, epoch: int, faults: dict[str, Any]) -> dict[str, Any]:
        """The zygote job of the next attempt."""
        self.n += 1
        self.report.attempts += 1
        name = f"{self.plan.name}-a{self.n}"
        job: dict[str, Any] = {
            "store": str(self.sdir / "store"),
            "workspace": str(self.workspace),
            "session_id": self.plan.name,
            "session_uid": self.uid,
            "epoch": epoch,
            "attempt": self.n,
            "base_url": self.c.model.base_url_for(self.plan.name, epoch, self.n),
            "prompt": f"chaos session {self.plan.name}",
            "result": str(self.sdir / "logs" / f"{name}.json"),
            "log": str(self.sdir / "logs" / f"{name}.log"),
            "faults": faults,
        }
        if self.scenario.lanes:
            job["lanes"] = {
                "redis_url": self.c.redis().url,
                "namespace": NAMESPACE,
                "laneworker": f"lw{self.scenario.seed}",
                "master_key_file": str(self.c.master_key),
                "timeout_ms": LANE_TIMEOUT_MS,
                "grace_ms": REPLY_GRACE_MS,
            }
        return job

    def violation(self, kind: str, detail: str) -> None:
        self.report.violations.append(invariants.Violation(kind, self.plan.name, detail))

    def attempt(self, epoch: int, fault: Fault | None) -> tuple[int, str]:
        """Run one attempt with ``fault``; returns (the epoch now in place, its outcome:
        ``completed``, ``done``, ``passivated``, ``fenced``, ``failed``, ``killed``)."""
        kind = fault.kind if fault else "clean"
        self.report.applied[kind] += fault is not None
        faults: dict[str, Any] = {}
        kill_at: int | None = None
        if fault is not None:
            if fault.kind == "kill_store_op":
                faults["store_op_kill"] = fault.param
            elif fault.kind == "clock_skew":
                faults["clock_skew_ms"] = fault.param
                kill_at = fault.at_ms
            elif fault.kind == "slow_volume":
                faults["fsync_delay_ms"] = fault.param
                kill_at = fault.at_ms
            elif fault.kind == "full_volume":
                faults["enospc_after"] = fault.param
            elif fault.kind == "passivate":
                if fault.at_ms < 0:
                    last = len(self.plan.rounds) - 1
                    faults["passivate_after_call"] = (
                        f"{self.plan.name}-{last}-{len(self.plan.rounds[last]) - 1}"
                    )
                else:
                    faults["passivate_at_ms"] = fault.at_ms
                faults["passivate_deadline_ms"] = fault.param
            elif fault.kind == "kill_session":
                kill_at = fault.at_ms
        job = self.job(epoch, faults)
        if fault is not None and fault.kind == "llm_fail":
            self.c.model.fail_attempt(self.plan.name, job["attempt"], fault.param)
        pid = self.c.zygote.session(job)
        if fault is not None and fault.kind == "zombie":
            return self._zombie(pid, job, epoch, fault)
        ended: int | None = None
        if fault is not None and fault.kind in ("kill_worker", "redis_restart", "redis_loss"):
            time.sleep(fault.at_ms / 1000)
            ended = self.c.zygote.poll(pid)  # reaped if it ended: its status is kept here
            if self._lane_fault(fault) and ended is None:  # landed: the session still ran
                self.report.landed[fault.kind] += 1
        if kill_at is not None:
            time.sleep(kill_at / 1000)
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        status = ended if ended is not None else self._finish(pid, job)
        outcome = self._outcome(status, job, kind)
        if fault is not None and self._landed(fault, outcome):
            self.report.landed[fault.kind] += 1
        return epoch, outcome

    def _landed(self, fault: Fault, outcome: str) -> bool:
        if fault.kind in ("kill_session", "kill_store_op", "clock_skew", "slow_volume"):
            return outcome == "killed" or fault.kind in ("clock_skew", "slow_volume")
        if fault.kind == "passivate":
            return outcome == "passivated"
        return fault.kind in ("full_volume", "llm_fail")

    def _finish(self, pid: int, job: dict[str, Any]) -> int:
        status = self.c.wait(pid, ATTEMPT_TIMEOUT_S)
        if status is None:
            self.violation("hung", f"attempt {job['attempt']} ran over {ATTEMPT_TIMEOUT_S} s")
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
            status = self.c.wait(pid, 30)
        return KILLED if status is None else status

    def _outcome(self, status: int, job: dict[str, Any], kind: str) -> str:
        if status == KILLED:
            return "killed"
        if status == EXIT_OK:
            try:
                return str(json.loads(Path(job["result"]).read_text())["outcome"])
            except (OSError, ValueError, KeyError) as exc:
                self.violation("crash", f"attempt {job['attempt']}: no result ({exc})")
                return "failed"
        if status == EXIT_FAILED and kind in MAY_FAIL:
            if kind == "full_volume":
                self._store_failure_named(job)
            return "failed"
        tail = Path(job["log"]).read_text(errors="replace")[-1500:] if job.get("log") else ""
        what = {EXIT_FENCED: "fenced", EXIT_FAILED: "failed"}.get(status, f"exit {status}")
        self.violation(
            "unexpected_exit", f"attempt {job['attempt']} ({kind}) ended {what}; log: {tail}"
        )
        return "failed"

    def _store_failure_named(self, job: dict[str, Any]) -> None:
        """A session process that failed on a full volume must say why as a session pod does
        (termination code StoreFull, or StoreUnavailable for what the torn writes left)."""
        try:
            code = json.loads(Path(job["result"]).read_text()).get("code")
        except (OSError, ValueError, AttributeError):
            code = None
        if code not in STORE_CODES:
            self.violation(
                "unnamed_store_failure",
                f"attempt {job['attempt']} failed on a full volume with code {code!r}",
            )
            return
        self.report.stats["store_full_reported" if code == STORE_FULL else "store_unavailable"] += 1

    def _zombie(self, old: int, job: dict[str, Any], epoch: int, fault: Fault) -> tuple[int, str]:
        """The old process runs on while the next placement (epoch + 1) takes over."""
        time.sleep(fault.at_ms / 1000)
        new_job = self.job(epoch + 1, {})
        new = self.c.zygote.session(new_job)
        new_status = self._finish(new, new_job)
        old_status = self.c.wait(old, 0)
        if old_status is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(old, signal.SIGKILL)
            old_status = self._finish(old, job)
        if old_status in (EXIT_OK, EXIT_FENCED, KILLED):
            self.report.landed["zombie"] += old_status != EXIT_OK
        else:
            self._outcome(old_status, job, "zombie")
        return epoch + 1, self._outcome(new_status, new_job, "clean")

    def _lane_fault(self, fault: Fault) -> bool:
        """Apply a Redis/worker fault; True if it hit something."""
        server = self.c.redis()
        stream = names.task_stream(NAMESPACE, f"lw{self.scenario.seed}")
        if fault.kind == "redis_restart":
            with self.c._redis_lock:
                server.restart()
            return True
        client = redis.Redis.from_url(server.url)
        try:
            if fault.kind == "redis_loss":
                if fault.param in (0, 2):
                    client.xtrim(stream, maxlen=0)
                if fault.param in (1, 2):
                    client.delete(names.reply_stream(NAMESPACE, self.uid))
                return True
            assert self.workers is not None
            holder = self._holder(client, stream)
            if holder is None:
                return False
            killed = self.workers.kill(holder)
            self.workers.start()
            return killed
        except redis.RedisError:
            return False
        finally:
            client.close()

    def _holder(self, client: redis.Redis[bytes], stream: str) -> str | None:
        """A worker holding a pending task of the pool (waits up to 1 s for one)."""
        deadline = time.monotonic() + 1.0
        while time.monotonic() < deadline:
            with contextlib.suppress(redis.ResponseError):
                pending = client.xpending_range(stream, "workers", min="-", max="+", count=10)
                for entry in pending:
                    consumer = entry["consumer"]
                    name = consumer.decode() if isinstance(consumer, bytes) else str(consumer)
                    if self.workers is not None and name in self.workers.pids:
                        return name
            time.sleep(0.01)
        return None
