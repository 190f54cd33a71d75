"""Validating admission webhook on ``pods/eviction`` (docs/architecture.md §8 "Triggers").

An eviction request (``kubectl drain``, the cluster autoscaler, ``POST .../pods/<pod>/eviction``)
for a session pod that has not finished is denied with HTTP 429 (Too Many Requests — what the
Eviction API itself answers when a PodDisruptionBudget forbids it, so every evicting client already
retries) and the session is asked to passivate with reason ``eviction``: the handler records the
pod in the session's memory (``SessionMemory.evictions``) and queues the session for a worker,
which writes ``status.passivation`` and POSTs ``/v1/passivate``. Once the pod has passivated the
operator deletes it; the client's next retry finds the pod gone (404), which ``kubectl drain``
treats as done.

Pods that are not session pods of this operator (another namespace, no session labels) and
session pods that are done (terminal, their process reported its end, or being deleted already:
the Eviction API lets a deleting pod go past its PodDisruptionBudget too) are allowed: the
webhook never stands in the way of pods it does not protect. A done pod that is still Running
as far as the apiserver knows (its process reported its end before the kubelet did) is deleted
first, as the operator would do next anyway: the Eviction API checks a Running pod against its
PodDisruptionBudget, which forbids the disruption, and that refusal is a 429 with
``Retry-After: 10`` that the client's own retry honours (a drain then waited 10 s for a pod
that was done).
The ``session_pods_by_name`` index answers first; a pod it does not hold is read from the
apiserver when its namespace is watched, because a new leader serves admission before its pod
watch has listed anything (an eviction allowed then would end the pod without a passivation
request). A failed read allows, as ``failurePolicy: Ignore`` would. Dry-run requests are answered
the same way without side effects.

Serving (``register``, called by ``berth_operator.main`` when ``BERTH_WEBHOOK_ENABLED`` is true):
kopf's ``WebhookServer`` over HTTPS with the certificate in ``BERTH_WEBHOOK_CERT_DIR`` (``tls.crt``,
``tls.key``, ``ca.crt`` — made with openssl by ``hack/webhook-certs.sh``; kopf's own self-signed
generator is not used). With ``BERTH_WEBHOOK_CONFIGURATION`` set, kopf keeps the
ValidatingWebhookConfiguration of that name up to date (URL, caBundle, rule
``pods/eviction`` CREATE, ``failurePolicy: Ignore``, ``sideEffects: NoneOnDryRun``) and removes
the webhook when the operator stops. failurePolicy Ignore means an operator that is down never
blocks evictions by itself: the PodDisruptionBudget (``builders.pdb``) still keeps drains waiting.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any, cast

import kopf

from berth_operator.api.constants import COMPONENT_SESSION, LABEL_COMPONENT, LABEL_SESSION_UID
from berth_operator.errors import KubeError
from berth_operator.handlers.context import OperatorContext
from berth_operator.metrics import EVICTIONS_DENIED
from berth_operator.reconcile.observe import ObservedPod
from berth_operator.settings import OperatorSettings

log = logging.getLogger("berth.webhook")

WEBHOOK_ID = "eviction.berth.dev"
"""Handler id: the path of the webhook URL and (with the configuration name appended) the webhook's
name, which the apiserver requires to be a domain name with at least three segments."""
TERMINAL_PHASES = frozenset({"Succeeded", "Failed"})

_registered = False


async def pod_eviction(
    name: str,
    namespace: str | None,
    dryrun: bool,
    memo: kopf.Memo,
    **kwargs: Any,
) -> None:
    """Deny (429) the eviction of an unfinished session pod and start its passivation.

    Allowed: a pod that is no session pod, that has finished (terminal phase, or its container
    terminated), whose process reported its end to the operator ahead of the kubelet
    (``SessionMemory.outcome``: its run is checkpointed or over, the process exiting), or
    that is being deleted already (the operator deletes a passivated pod itself; an eviction
    adds nothing, and a denial would keep ``kubectl drain`` waiting for its next retry, 5 s).

    ``name``/``namespace`` are those of the Eviction object, i.e. of the pod.
    Raises ``kopf.AdmissionError(code=429)`` to deny; returning allows.
    """
    ctx: OperatorContext = memo.ctx
    by_name = cast("kopf.Index[tuple[str, str], str]", kwargs["session_pods_by_name"])
    ns = namespace or ""
    uids = list(by_name.get((ns, name), []))
    if uids:
        uid = uids[0]
        pods = cast("kopf.Index[str, Any]", kwargs["session_pods"])
        observed = [p for p in pods.get(uid, []) if getattr(p, "name", None) == name]
        if observed and _done(ctx, uid, observed[0]):
            if not dryrun:
                await _let_go(ctx, ns, observed[0])
            return
    else:
        found = await _read_session_pod(ctx, ns, name)
        if found is None:
            return
        uid = found
    if not dryrun:
        first = ctx.request_eviction(uid, name)
        ctx.wake_session(uid)
        if first:
            log.info("eviction of session pod %s/%s requested: passivating", ns, name)
    EVICTIONS_DENIED.inc()
    raise kopf.AdmissionError(
        f"berth: session pod {ns}/{name} is passivating (checkpointing its run); the operator "
        "deletes it when done — retry the eviction",
        code=429,
    )


def _done(ctx: OperatorContext, uid: str, pod: ObservedPod) -> bool:
    """Whether session ``uid``'s ``pod`` needs no passivation any more (``pod_eviction``)."""
    memory = ctx.memory.peek(uid)
    reported = None if memory is None else memory.outcome
    return (
        pod.phase in TERMINAL_PHASES
        or pod.terminated is not None
        or pod.deleting
        or (reported is not None and bool(pod.uid) and reported[0] == pod.uid)
    )


async def _let_go(ctx: OperatorContext, namespace: str, pod: ObservedPod) -> None:
    """Delete a done ``pod`` (``_done``) that is neither being deleted nor in a terminal phase,
    so that the eviction being admitted lets it go without its PodDisruptionBudget (module
    docstring). The uid precondition spares a newer pod of the same name. A failed delete is
    logged: the eviction goes on, and the budget decides."""
    if pod.deleting or pod.phase in TERMINAL_PHASES:
        return
    try:
        await ctx.kube.delete_pod(namespace, pod.name, uid=pod.uid)
    except KubeError as exc:
        log.warning("pod %s/%s done but not deleted: %s", namespace, pod.name, exc)
        return
    log.info("eviction of session pod %s/%s: done, deleted", namespace, pod.name)


def unfinished_session_pod(pod: dict[str, Any]) -> str | None:
    """The AgentSession uid of ``pod`` (a Pod as JSON) when it is a session pod that has not
    finished (phase neither Succeeded nor Failed) and is not being deleted; else None.
    A session pod carries ``LABEL_SESSION_UID`` and ``LABEL_COMPONENT`` = ``session``
    (``builders.names.session_labels``; a warm pod not adopted yet has no session uid)."""
    labels = (pod.get("metadata") or {}).get("labels") or {}
    uid = labels.get(LABEL_SESSION_UID)
    if not uid or labels.get(LABEL_COMPONENT) != COMPONENT_SESSION:
        return None
    if (pod.get("status") or {}).get("phase") in TERMINAL_PHASES:
        return None
    if (pod.get("metadata") or {}).get("deletionTimestamp"):
        return None  # being deleted already: an eviction adds nothing
    return str(uid)


async def _read_session_pod(ctx: OperatorContext, namespace: str, name: str) -> str | None:
    """``unfinished_session_pod`` of pod ``namespace/name`` read from the apiserver; None when
    its namespace is not watched, it does not exist, or the read fails (logged)."""
    watched = ctx.settings.scope.namespaces
    if watched and namespace not in watched:
        return None
    try:
        pod = await ctx.kube.get_pod(namespace, name)
    except KubeError as exc:
        log.warning("eviction of pod %s/%s allowed: cannot read the pod: %s", namespace, name, exc)
        return None
    return unfinished_session_pod(pod) if pod is not None else None


def register(settings: OperatorSettings) -> None:
    """Register ``pod_eviction`` with kopf (once per process)."""
    global _registered
    if _registered or not settings.webhook.enabled:
        return
    kopf.on.validate(
        "",
        "v1",
        "pods",
        id=WEBHOOK_ID,
        subresource="eviction",
        operations=["CREATE"],
        ignore_failures=True,
        side_effects=True,
    )(pod_eviction)
    _registered = True


def configure(kopf_settings: kopf.OperatorSettings, settings: OperatorSettings) -> None:
    """Point kopf's admission server at our certificate and (optionally) manage the configuration.

    Raises ``FileNotFoundError`` naming the missing file when the certificate directory is
    incomplete (a start-up error, not something to retry).
    """
    if not settings.webhook.enabled:
        return
    cert_dir = Path(settings.webhook.cert_dir)
    files = {n: cert_dir / n for n in ("tls.crt", "tls.key", "ca.crt")}
    for path in files.values():
        if not path.is_file():
            raise FileNotFoundError(f"webhook certificate file missing: {path}")
    kopf_settings.admission.server = kopf.WebhookServer(
        addr=settings.webhook.listen_host,
        port=settings.webhook.port,
        host=settings.webhook.host or settings.webhook.listen_host,
        certfile=str(files["tls.crt"]),
        pkeyfile=str(files["tls.key"]),
        cafile=str(files["ca.crt"]),
    )
    if settings.webhook.configuration:
        kopf_settings.admission.managed = settings.webhook.configuration
