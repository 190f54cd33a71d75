"""BudgetPolicy handlers: keep the budget service's directory current and report status.

- Every BudgetPolicy event puts the parsed policy into the directory (or drops it on deletion),
  so an edit applies to running sessions from their next LLM call.
- Every AgentSession event records the session's identity and model (its API token stays in the
  operator's token cache, ``SessionMemory.token``); deletion forgets it.
- :func:`prime` fills the directory from a LIST of the watched policies and sessions before a new
  leader's budget service opens (its watches have not shown them yet: every call would be
  refused, and a ``Closed`` policy turns that into a denied LLM call); :func:`token_loader` reads
  the token of a listed session the first time it calls.
- One daemon per policy refreshes status (consumed / limit per resource and period, sessions
  denied, last reset, conditions), posts Events on soft and hard crossings and sets the gauges,
  every ``STATUS_INTERVAL_SECONDS``.

Nothing here runs unless the budget service is enabled (``BERTH_BUDGET_ENABLED``).
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any, cast

import kopf
from pydantic import ValidationError

from berth_operator import budget_metrics as metrics
from berth_operator.api.budgetpolicy import BudgetPolicyStatus, parse_spec, to_policy
from berth_operator.api.constants import BUDGETPOLICY_PLURAL, GROUP, SESSION_PLURAL, VERSION
from berth_operator.budget.ledger import window_key
from berth_operator.budget.policy import Identity
from berth_operator.budget.service import LoadToken, TokenUnavailable
from berth_operator.errors import BerthOperatorError
from berth_operator.handlers.context import BudgetClients, OperatorContext
from berth_operator.k8s.budgetpolicy import BudgetPolicyApi
from berth_operator.k8s.calls import with_backoff
from berth_operator.reconcile.budget_status import budget_status

STATUS_INTERVAL_SECONDS = 10.0
"""How often a policy's status, conditions and gauges are refreshed (seconds)."""


def _budget(memo: Any) -> BudgetClients | None:
    ctx: OperatorContext = memo.ctx
    return ctx.budget


@kopf.on.event(GROUP, VERSION, BUDGETPOLICY_PLURAL)
async def budgetpolicy_event(
    type: str | None,
    name: str,
    namespace: str | None,
    spec: kopf.Spec,
    memo: Any,
    logger: kopf.Logger,
    **_: Any,
) -> None:
    """Put the policy into the directory (drop it when deleted)."""
    budget = _budget(memo)
    if budget is None or namespace is None:
        return
    if type == "DELETED":
        budget.directory.drop_policy(namespace, name)
        return
    try:
        budget.directory.put_policy(to_policy(namespace, name, parse_spec(dict(spec))))
    except ValidationError as exc:  # the CRD rejects this at apply; an older schema may not
        budget.directory.drop_policy(namespace, name)
        logger.error(f"BudgetPolicy {namespace}/{name} is invalid and not enforced: {exc}")


def session_identity(namespace: str, name: str, spec: Mapping[str, Any]) -> Identity:
    """The budget identity of an AgentSession from its raw spec (pure)."""
    ident = spec.get("identity") or {}
    return Identity(
        namespace=namespace,
        session=name,
        tenant_id=str(ident.get("tenantId") or ""),
        principal=str(ident.get("principal") or ""),
        agent_template_id=str(ident.get("agentTemplateId") or ""),
        model=str(spec.get("model") or ""),
    )


@kopf.on.event(GROUP, VERSION, SESSION_PLURAL)
async def budget_session_event(
    type: str | None,
    name: str,
    namespace: str | None,
    uid: str,
    spec: kopf.Spec,
    memo: Any,
    logger: kopf.Logger,
    **_: Any,
) -> None:
    """Record (or forget) a session's identity in the budget directory, and make sure its API
    token is in the operator's cache (a new leader has not read it yet; without it the
    session's budget calls would be refused)."""
    budget = _budget(memo)
    if budget is None or namespace is None or not uid:
        return
    if type == "DELETED":
        budget.directory.drop_session(uid)
        return
    budget.directory.put_identity(uid, session_identity(namespace, name, dict(spec)))
    ctx: OperatorContext = memo.ctx
    try:
        await ctx.api_token(namespace, name, uid)
    except BerthOperatorError as exc:
        logger.warning(f"cannot read the API token of {namespace}/{name}: {exc}")


def fill(
    budget: BudgetClients, policies: list[dict[str, Any]], sessions: list[dict[str, Any]]
) -> None:
    """Put listed BudgetPolicies and AgentSessions (raw LIST items) into the directory, as
    their watch events would; a policy the CRD would refuse is left out (not enforced)."""
    for obj in policies:
        meta = obj.get("metadata") or {}
        try:
            policy = to_policy(meta["namespace"], meta["name"], parse_spec(obj.get("spec") or {}))
        except (KeyError, ValidationError):
            continue
        budget.directory.put_policy(policy)
    for obj in sessions:
        meta = obj.get("metadata") or {}
        if meta.get("uid") and meta.get("namespace") and meta.get("name"):
            who = session_identity(meta["namespace"], meta["name"], obj.get("spec") or {})
            budget.directory.put_identity(str(meta["uid"]), who)


async def prime(ctx: OperatorContext, attempt_for_seconds: float = 60) -> tuple[int, int]:
    """Fill the budget directory from LISTs of the watched namespaces; (policies, sessions)
    listed. A failed LIST is tried again with backoff for ``attempt_for_seconds``, then its
    KubeError is raised."""
    budget = ctx.budget
    if budget is None:
        return 0, 0
    namespaces = list(ctx.settings.scope.namespaces)
    api = BudgetPolicyApi(ctx.kube.session)
    policies = await with_backoff(lambda: api.list_in(namespaces), attempt_for_seconds)
    sessions = await with_backoff(
        lambda: ctx.kube.list_sessions_in(namespaces), attempt_for_seconds
    )
    fill(budget, policies, sessions)
    return len(policies), len(sessions)


def token_loader(ctx: OperatorContext) -> LoadToken:
    """The budget service's ``load_token``: a session's API token into the operator's cache
    (read from its ``<name>-berth`` Secret); TokenUnavailable when the apiserver cannot say."""

    async def load(who: Identity, uid: str) -> None:
        try:
            await ctx.api_token(who.namespace, who.session, uid)
        except BerthOperatorError as exc:
            raise TokenUnavailable(f"cannot read the session's token: {exc}") from None

    return load


def _target(namespace: str, name: str, uid: str) -> dict[str, Any]:
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "BudgetPolicy",
        "metadata": {"name": name, "namespace": namespace, "uid": uid},
    }


@kopf.daemon(GROUP, VERSION, BUDGETPOLICY_PLURAL, cancellation_timeout=10.0)
async def budgetpolicy_status(
    name: str,
    namespace: str | None,
    uid: str,
    spec: kopf.Spec,
    meta: kopf.Meta,
    status: kopf.Status,
    stopped: kopf.DaemonStopped,
    logger: kopf.Logger,
    memo: Any,
    **_: Any,
) -> None:
    """Refresh one policy's status until it is deleted or the operator stops."""
    budget = _budget(memo)
    ctx: OperatorContext = memo.ctx
    if budget is None or namespace is None:
        return
    api = BudgetPolicyApi(ctx.kube.session)
    try:
        before = BudgetPolicyStatus.model_validate(dict(status or {}))
    except ValidationError:
        before = BudgetPolicyStatus()
    try:
        while not stopped:
            try:
                policy = to_policy(namespace, name, parse_spec(dict(spec)))
                now = time.time()
                key = window_key(namespace, name, policy.window(now))
                state = await budget.ledger.state(key)
                after, events = budget_status(
                    policy, state, before, now=now, generation=meta.get("generation")
                )
                for event in events:
                    target = cast(kopf.Body, _target(namespace, name, uid))
                    kopf.event(
                        target, type=event.type, reason=event.reason, message=event.message[:1024]
                    )
                metrics.set_budget(namespace, name, after)
                if after.wire() != before.wire():
                    await api.patch_status(namespace, name, after.wire())
                    before = after
            except ValidationError as exc:
                logger.error(f"cannot report budget status: {exc}")
            except (BerthOperatorError, OSError) as exc:
                logger.warning(f"budget status refresh failed, retrying: {exc}")
            except Exception as exc:  # Redis errors (redis-py's own hierarchy)
                logger.warning(
                    f"budget status refresh failed, retrying: {type(exc).__name__}: {exc}"
                )
            await stopped.wait(STATUS_INTERVAL_SECONDS)
    finally:
        metrics.forget_budget(namespace, name)
