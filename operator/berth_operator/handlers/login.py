"""kopf's own connection to the apiserver: the operator's credentials over its one bounded pool.

kopf talks to the apiserver over its own aiohttp session (its watch streams, the finalizer it
adds to each new object, its progress annotations). Its built-in session has no bound on
connections (``TCPConnector(limit=0)``): each request made while the others are in flight opens
one more TLS connection, so a burst of new AgentSessions (kopf patches each one's finalizer at
once) leaves as many connections in the pool as requests overlapped, each holding asyncio's
256 KiB TLS read buffer and OpenSSL's state until it idles out (measured with
``bench/placement.py --memory``: 82 of them, 10 MiB of buffers, after 100 sessions).

``login`` (a kopf login handler) takes the operator's credentials (:func:`credentials`: the order
kopf's own default login uses) and returns them as a ``kopf.AiohttpSession`` over the operator's
connection pool (``k8s.connection.ApiSession``, which Berth's own requests use too), bounded by
:func:`connection_limit`: room for every watch stream kopf keeps open (each holds a connection
for its lifetime) plus ``server.kube_connection_pool`` connections for requests — kopf's and
Berth's — which wait their turn beyond that. kopf closes its session when it logs in again (e.g.
after a 401) and calls ``login`` for a new one; the pool stays.
"""

from __future__ import annotations

import dataclasses
import logging
import os
from typing import Any

import kopf

from berth_operator.k8s.connection import ApiSession
from berth_operator.settings import OperatorSettings

WATCHED_NAMESPACED_KINDS = 5
"""Namespaced kinds kopf watches: AgentSessions, LaneWorkers, SessionWarmPools, BudgetPolicies,
pods (one stream per kind and watched namespace)."""
CLUSTER_STREAMS = 4
"""Cluster-wide streams: nodes, and room for kopf's own (namespace and CRD observers)."""


def connection_limit(settings: OperatorSettings) -> int:
    """Connections of the operator's pool (kopf's session and Berth's): kopf's watch streams
    (one per namespaced kind and watched namespace — one per kind when cluster-wide — plus
    ``CLUSTER_STREAMS``) plus
    ``server.kube_connection_pool`` for requests. The streams' share is never below what they
    hold, so a request always gets a connection eventually."""
    namespaces = max(1, len(settings.scope.namespaces))
    streams = WATCHED_NAMESPACED_KINDS * namespaces + CLUSTER_STREAMS
    return streams + settings.server.kube_connection_pool


def credentials(
    settings: kopf.OperatorSettings | None = None,
    logger: logging.Logger | logging.LoggerAdapter[Any] | None = None,
) -> kopf.ConnectionInfo:
    """The operator's credentials, found in the order kopf's own default login uses: the
    ``kubernetes`` package's loaders when it is importable (they also run kubeconfig ``exec``
    plugins and auth providers; ``k8s.client_library`` keeps the package out of the process
    when nothing needs them), else the in-cluster service account (:func:`service_account`)
    and kopf's reader of the kubeconfig's current context.
    Raises ``kopf.LoginError`` when there is neither a service account nor a kubeconfig."""
    settings = settings or kopf.OperatorSettings()
    logger = logger or logging.getLogger(__name__)
    info = (
        kopf.login_via_client(logger=logger, settings=settings)
        or service_account(settings)
        or kopf.login_with_kubeconfig(settings=settings)
    )
    if info is None:
        raise kopf.LoginError(
            "no Kubernetes credentials: neither a service account nor a kubeconfig"
        )
    return info


def service_account(settings: kopf.OperatorSettings) -> kopf.ConnectionInfo | None:
    """kopf's reader of the pod's service account (token, CA, namespace), or None outside a
    pod, addressed as client-go's in-cluster config addresses the apiserver: at
    ``KUBERNETES_SERVICE_HOST``:``KUBERNETES_SERVICE_PORT``, which the kubelet sets in every
    container. kopf's reader names ``kubernetes.default.svc``, which only resolves where the
    pod has cluster DNS (not with ``hostNetwork``, nor on a cluster without a DNS add-on)."""
    info = kopf.login_with_service_account(settings=settings)
    host = os.environ.get("KUBERNETES_SERVICE_HOST", "")
    port = os.environ.get("KUBERNETES_SERVICE_PORT", "")
    if info is None or not host or not port:
        return info
    address = f"[{host}]" if ":" in host else host  # an IPv6 literal goes in brackets
    return dataclasses.replace(info, server=f"https://{address}:{port}")


def kopf_session(info: kopf.ConnectionInfo, pool: ApiSession) -> kopf.AiohttpSession:
    """A kopf session for ``info`` (server, credentials as kopf's built-in session uses them)
    over ``pool``'s connections."""
    return kopf.AiohttpSession(
        aiohttp_session=pool.client_session(info),
        server=info.server,
        default_namespace=info.default_namespace,
        priority=info.priority,
        expiration=info.expiration,
    )


@kopf.on.login()
async def login(
    logger: logging.Logger | logging.LoggerAdapter[Any],
    settings: kopf.OperatorSettings,
    memo: kopf.Memo,
    **_: Any,
) -> kopf.AiohttpSession:
    """The operator's credentials over its connection pool (module docstring).

    Raises ``kopf.LoginError`` when neither the service account nor a kubeconfig is found."""
    info = credentials(settings, logger)
    ctx = getattr(memo, "ctx", None)
    if ctx is None:
        raise kopf.LoginError("the operator's context (its connection pool) is not in kopf's memo")
    return kopf_session(info, ctx.kube.session)
