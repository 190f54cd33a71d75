"""kopf side of retention (``berth_operator.retention``; docs/sessions.md, "Retention").

- ``start_retention`` (startup): checks the operator's retention settings (a bad one stops the
  operator) and starts the sweep, every :data:`SWEEP_SECONDS`, on the leader only (kopf runs
  only there).
- ``retention_on_delete`` (AgentSession watch, DELETED): a deleted session whose policy is
  ``Delete`` gets its suspended store-cleanup Job, due ``afterSeconds`` from now. A session
  deleted with ``berth.dev/delete-store: "true"`` is left to that path (removed at once).
- one sweep: plans the Jobs of finished (Succeeded, Failed) sessions whose policy is ``Delete``
  (due ``afterSeconds`` after ``status.result.finishedAt``), then acts on every planned Job as
  ``retention.ledger.decide`` says; Normal Events ``StoreRemovalPlanned``, ``StoreRemoved``,
  ``StoreKept`` on the Job (and on the session while it exists); metrics in
  ``retention.metrics``.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any, Final, cast

import kopf
from pydantic import ValidationError

from berth_operator.api.agentsession import AgentSessionSpec
from berth_operator.api.common import SessionRef
from berth_operator.api.constants import (
    ANNOTATION_DELETE_STORE,
    GROUP,
    LABEL_SESSION_UID,
    SESSION_PLURAL,
    VERSION,
)
from berth_operator.builders.cleanup_job import build_store_cleanup_job, cleanup_job_name
from berth_operator.errors import BerthOperatorError
from berth_operator.handlers.context import OperatorContext
from berth_operator.k8s.jobs import delete_job, list_jobs, resume_job
from berth_operator.retention import ledger, policy
from berth_operator.retention.metrics import RETENTION_ACTIONS, RETENTION_PENDING

log = logging.getLogger("berth.operator.retention")

SWEEP_SECONDS: Final = 60.0
"""Seconds between sweeps (a removal runs at most this late after its due time)."""


def _policies(ctx: OperatorContext) -> tuple[dict[str, policy.RetentionPolicy], Any]:
    claims = ctx.settings.claims
    namespaces = policy.parse_namespaces(claims.retention_namespaces)
    return namespaces, policy.parse_setting(claims.retention)


def policy_of(ctx: OperatorContext, body: Mapping[str, Any]) -> policy.RetentionPolicy:
    """The effective policy of the AgentSession ``body`` (``retention.policy.effective``)."""
    namespaces, default = _policies(ctx)
    meta = body.get("metadata") or {}
    own = (body.get("spec") or {}).get("storeRetention")
    return policy.effective(own, meta.get("namespace") or "", namespaces, default)


def planned_job(
    ctx: OperatorContext, body: Mapping[str, Any], why: str, since: datetime
) -> dict[str, Any] | None:
    """The suspended cleanup Job of session ``body`` (``retention.ledger.plan_job``), or None
    when its policy keeps the store, it asked for removal at deletion (``delete-store``), or
    its name or spec is unusable (logged)."""
    meta = body.get("metadata") or {}
    if (meta.get("annotations") or {}).get(ANNOTATION_DELETE_STORE, "").lower() == "true":
        return None
    chosen = policy_of(ctx, body)
    if not chosen.delete:
        return None
    try:
        ref = ledger.checked_ref(SessionRef(meta["namespace"], meta["name"], meta["uid"]))
        spec = AgentSessionSpec.model_validate(dict(body.get("spec") or {}))
    except (KeyError, ValidationError, BerthOperatorError) as exc:
        log.warning("no store removal planned for %s: %s", meta.get("name"), exc)
        return None
    job = build_store_cleanup_job(ref, spec, ctx.settings)
    return ledger.plan_job(job, chosen, why, since)


async def _plan(ctx: OperatorContext, body: Mapping[str, Any], job: dict[str, Any]) -> None:
    await ctx.kube.create_job(job)
    RETENTION_ACTIONS.labels(action="planned").inc()
    due = job["metadata"]["annotations"][ledger.ANNOTATION_REMOVE_AFTER]
    message = f"store and workspace will be removed at {due} (Job {job['metadata']['name']})"
    _event(job, "StoreRemovalPlanned", message)
    if body.get("kind"):
        _event(dict(body), "StoreRemovalPlanned", message)
    log.info("%s/%s: %s", job["metadata"]["namespace"], job["metadata"]["name"], message)


@kopf.on.event(GROUP, VERSION, SESSION_PLURAL)
async def retention_on_delete(type: str | None, body: kopf.Body, memo: kopf.Memo, **_: Any) -> None:
    """A deleted session with a ``Delete`` policy: plan its removal (module docstring)."""
    if type != "DELETED":
        return
    ctx: OperatorContext = memo.ctx
    job = planned_job(ctx, body, "deleted", datetime.now(UTC))
    if job is not None:
        ctx.spawn(_plan_quietly(ctx, job))


async def _plan_quietly(ctx: OperatorContext, job: dict[str, Any]) -> None:
    """Plan ``job`` unless it exists (planned when the session finished: that earlier due time
    stands, the period runs from the first of the two)."""
    meta = job["metadata"]
    try:
        if await ctx.kube.get_job(meta["namespace"], meta["name"]) is not None:
            return
        await _plan(ctx, {}, job)
    except BerthOperatorError as exc:
        log.warning("store removal not planned: %s", exc)


@kopf.on.startup()
async def start_retention(memo: kopf.Memo, **_: Any) -> None:
    """Check the retention settings (SettingsError stops the operator) and start the sweep."""
    ctx = getattr(memo, "ctx", None)
    if not isinstance(ctx, OperatorContext):
        return
    _policies(ctx)
    ctx.spawn(_sweep_forever(ctx))


async def _sweep_forever(ctx: OperatorContext) -> None:
    while True:
        await asyncio.sleep(SWEEP_SECONDS)
        try:
            await sweep(ctx, datetime.now(UTC))
        except BerthOperatorError as exc:
            log.warning("retention sweep failed: %s", exc)


async def sweep(ctx: OperatorContext, now: datetime) -> None:
    """One sweep (module docstring)."""
    scope = ctx.settings.scope.namespaces
    jobs = await list_jobs(ctx.kube, f"{ledger.LABEL_RETENTION}=true", scope)
    sessions = await ctx.kube.list_sessions_in(scope)
    by_name = {(s["metadata"]["namespace"], s["metadata"]["name"]): s for s in sessions}
    known = {(j["metadata"]["namespace"], j["metadata"]["name"]) for j in jobs}
    for body in sessions:
        status = body.get("status") or {}
        if status.get("phase") not in ledger.TERMINAL_PHASES:
            continue
        meta = body["metadata"]
        ref = SessionRef(meta["namespace"], meta["name"], meta["uid"])
        if (ref.namespace, cleanup_job_name(ref)) in known:
            continue
        since = _finished_at(status) or now
        job = planned_job(ctx, body, "finished", since)
        if job is not None:
            await _plan(
                ctx, {"kind": "AgentSession", "apiVersion": f"{GROUP}/{VERSION}", **body}, job
            )
    pending = 0
    for job in jobs:
        pending += await _act(ctx, job, by_name, now)
    RETENTION_PENDING.set(pending)


def _finished_at(status: Mapping[str, Any]) -> datetime | None:
    text = (status.get("result") or {}).get("finishedAt")
    try:
        return datetime.fromisoformat(str(text).replace("Z", "+00:00")) if text else None
    except ValueError:
        return None


async def _act(
    ctx: OperatorContext,
    job: dict[str, Any],
    by_name: Mapping[tuple[str, str], Mapping[str, Any]],
    now: datetime,
) -> int:
    """Carry out ``ledger.decide`` for one Job; 1 if it stays pending (suspended), else 0."""
    meta = job["metadata"]
    namespace, name = meta["namespace"], meta["name"]
    session_name = (meta.get("labels") or {}).get("berth.dev/session", "")
    found = by_name.get((namespace, session_name))
    session = None
    if found is not None:
        session = (found["metadata"]["uid"], (found.get("status") or {}).get("phase") or "")
    uid = (meta.get("labels") or {}).get(LABEL_SESSION_UID, "")
    decision = ledger.decide(job, session, False, now)
    if decision.action == "remove" and session is None:
        pods = await ctx.kube.list_pods(namespace, f"{LABEL_SESSION_UID}={uid}")
        decision = ledger.decide(job, session, bool(pods), now)
    full = {"apiVersion": "batch/v1", "kind": "Job", **job}
    if decision.action == "remove":
        await resume_job(ctx.kube, namespace, name)
        RETENTION_ACTIONS.labels(action="removed").inc()
        _event(full, "StoreRemoved", decision.why)
        if found is not None:
            _event(
                {"apiVersion": f"{GROUP}/{VERSION}", "kind": "AgentSession", **found},
                "StoreRemoved",
                decision.why,
            )
    elif decision.action in ("cancel", "forget"):
        await delete_job(ctx.kube, namespace, name)
        action = "kept" if decision.action == "cancel" else "forgotten"
        RETENTION_ACTIONS.labels(action=action).inc()
        if decision.action == "cancel":
            _event(full, "StoreKept", decision.why)
    log.info("%s/%s: %s (%s)", namespace, name, decision.action, decision.why)
    return 1 if decision.action == "wait" and (job.get("spec") or {}).get("suspend") else 0


def _event(body: dict[str, Any], reason: str, message: str) -> None:
    kopf.event(cast(kopf.Body, body), type="Normal", reason=reason, message=message)
