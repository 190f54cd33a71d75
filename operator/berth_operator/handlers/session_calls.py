"""The passivation's calls to a session pod's runtime API (docs/architecture.md §8).

- ``passivate``       ``POST /v1/passivate``; before it, ``await_outcome`` is started once per pod.
- ``await_outcome``   long polls ``GET /v1/outcome`` until the pod reports its end (its
                      termination message), keeps it (``SessionMemory.outcome``) and wakes the
                      session, so its pass places the replacement before the kubelet reports it.
"""

from __future__ import annotations

import logging
import math
import time

from berth_operator.api.common import SessionRef
from berth_operator.errors import RuntimeUnreachable
from berth_operator.handlers.context import OperatorContext
from berth_operator.handlers.session_reads import api_token, now_ms
from berth_operator.reconcile.plan import PassivateCall
from berth_operator.reconcile.replacement import parse_termination
from berth_operator.tracing import PASSIVATE, active, decision_span

log = logging.getLogger("berth.operator")


OUTCOME_WAIT_SECONDS = 30
"""The longest single ``GET /v1/outcome`` long poll of a passivating pod."""
OUTCOME_SLACK_SECONDS = 10
"""How long past a passivation's deadline its pod's own report of its end is still awaited."""


async def passivate(ctx: OperatorContext, ref: SessionRef, call: PassivateCall) -> None:
    """POST /v1/passivate; an undelivered request is retried by the next decision (the deadline
    in status still applies: the pod is deleted at the latest then). The pod's own report of
    its end is awaited beside the passes (``await_outcome``), asked for before the POST: a
    passivation that ends at once still finds the question waiting (a question that came after
    the process closed its port would go unanswered). The first request (not its repeats) is a
    ``berth.passivate`` span (``berth_operator.tracing``)."""
    if call.resend:
        await _passivate(ctx, ref, call)
        return
    span = decision_span(
        PASSIVATE,
        ref,
        epoch=call.epoch,
        reason=call.reason,
        node=call.node,
        identity=call.identity,
        parent=call.run_trace,
        **{"k8s.pod.uid": call.pod_uid or None, "berth.deadline_ms": call.deadline_ms},
    )
    ctx.memory(ref.uid).run_trace = call.run_trace  # the resume's placement: its child too
    with active(span):
        await _passivate(ctx, ref, call)


async def _passivate(ctx: OperatorContext, ref: SessionRef, call: PassivateCall) -> None:
    """The request itself (:func:`passivate`)."""
    try:
        token = await api_token(ctx, ref)
        if call.pod_uid and call.pod_uid not in ctx.outcome_waits:
            ctx.outcome_waits.add(call.pod_uid)
            ctx.spawn(await_outcome(ctx, ref, call, token))
        await ctx.runtime.passivate(call.pod_ip, call.reason, call.deadline_ms, token)
    except RuntimeUnreachable as exc:
        # A repeat that finds the port closed is the usual end of a passivation (the process
        # is done, its report on the way): not worth an INFO line per pass.
        level = logging.DEBUG if call.resend else logging.INFO
        log.log(level, "%s: passivate not delivered yet: %s", ref.key, exc)


async def await_outcome(
    ctx: OperatorContext, ref: SessionRef, call: PassivateCall, token: str | None
) -> None:
    """Ask the passivating pod ``GET /v1/outcome`` (long polls of at most
    ``OUTCOME_WAIT_SECONDS``) until it answers with its termination message or its deadline
    (+ ``OUTCOME_SLACK_SECONDS``) passes. The answer is kept (``SessionMemory.outcome``) and the
    session reconciled at once: its pass treats the pod as ended, as the kubelet will report it
    moments later, and places the replacement. A pod that cannot answer (its process already
    gone, a runtime without the route) is left to the kubelet's report."""
    try:
        while time.time() * 1000 < call.deadline_ms + OUTCOME_SLACK_SECONDS * 1000:
            left = call.deadline_ms / 1000 - time.time() + OUTCOME_SLACK_SECONDS
            wait = max(1, min(OUTCOME_WAIT_SECONDS, math.ceil(left)))
            try:
                message = await ctx.runtime.outcome(call.pod_ip, token, wait)
            except RuntimeUnreachable as exc:
                log.debug("%s: no outcome from pod %s: %s", ref.key, call.pod_ip, exc)
                return
            if message is None:
                continue
            if parse_termination(message) is None:
                log.warning("%s: pod %s reported an end that does not parse", ref.key, call.pod_ip)
                return
            ctx.memory(ref.uid).outcome = (call.pod_uid, message, now_ms())
            ctx.wake_session(ref.uid)
            log.info("%s: pod %s reported its end before the kubelet", ref.key, call.pod_ip)
            return
    finally:
        ctx.outcome_waits.discard(call.pod_uid)
