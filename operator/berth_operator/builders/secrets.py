"""Secrets the operator creates (pure; docs/architecture.md §11).

- ``berth-task-key`` (one per namespace, label ``app.kubernetes.io/managed-by: berth``): key
  ``master`` = 32 random bytes. Created when a namespace first needs it (a session with an
  external lane, or a LaneWorker); worker pods mount it.
- ``<session>-berth`` (one per AgentSession, owned by it, label ``berth.dev/session``): key
  ``api-token`` (43-character urlsafe token the session's HTTP API demands) and, when the
  namespace master exists, ``task-key`` = ``derive_session_key(master, ns, name)`` (raw 32 bytes),
  and ``redis-url``, the Redis URL of the session role (its ACL user's password in it). Session
  pods mount it and read ``redis-url`` by secretKeyRef.
- ``berth-worker-redis`` (one per namespace): key ``url``, the Redis URL of the worker role;
  worker pods read it by secretKeyRef. Secrets cannot be referenced across namespaces, so the
  operator copies each role's URL into the namespaces that run sessions and workers.

Bodies carry ``data`` base64-encoded as the core/v1 API wants; :func:`decode_data` reverses it.
Nothing here logs, and no value built here may go to status, Events or metrics.
"""

from __future__ import annotations

import base64
import secrets
from collections.abc import Mapping
from typing import Any, Final

from berth_contract.taskauth import derive_session_key
from berth_operator.api.agentsession import AgentSessionSpec
from berth_operator.api.common import SessionRef
from berth_operator.api.constants import (
    LABEL_LLM_CREDENTIALS,
    LABEL_MANAGED_BY,
    LABEL_SESSION,
    SECRET_API_TOKEN_KEY,
    SECRET_OPTIONS_KEY,
    SECRET_REDIS_URL_KEY,
    SECRET_TASK_KEY_KEY,
    TASK_MASTER_KEY,
    TASK_MASTER_SECRET,
    WORKER_REDIS_SECRET,
    WORKER_REDIS_URL_KEY,
)
from berth_operator.builders.names import owner_reference, session_secret_name

MASTER_KEY_BYTES: Final = 32
MASTER_MANAGED_BY: Final = "berth"
"""``app.kubernetes.io/managed-by`` of ``berth-task-key`` (as docs/architecture.md §11 fixes it)."""
DEFAULT_OPENAI_BASE_URL: Final = "https://api.openai.com/v1"
"""The endpoint an unset spec.llm.baseURL means (the openai client's default)."""


def new_api_token() -> str:
    """A fresh API token: 32 random bytes, urlsafe base64 without padding (43 characters)."""
    return secrets.token_urlsafe(32)


def new_master_key() -> bytes:
    """32 random bytes for ``berth-task-key``."""
    return secrets.token_bytes(MASTER_KEY_BYTES)


def _b64(raw: bytes) -> str:
    return base64.b64encode(raw).decode()


def decode_data(secret: Mapping[str, Any]) -> dict[str, bytes]:
    """``data`` of a Secret read from the API, decoded (bad entries are skipped)."""
    out: dict[str, bytes] = {}
    for key, value in (secret.get("data") or {}).items():
        try:
            out[str(key)] = base64.b64decode(str(value), validate=True)
        except ValueError:
            continue
    return out


def build_task_master_secret(namespace: str, master: bytes) -> dict[str, Any]:
    """The namespace's ``berth-task-key`` Secret holding ``master``."""
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "type": "Opaque",
        "metadata": {
            "name": TASK_MASTER_SECRET,
            "namespace": namespace,
            "labels": {LABEL_MANAGED_BY: MASTER_MANAGED_BY},
        },
        "data": {TASK_MASTER_KEY: _b64(master)},
    }


def master_of(secret: Mapping[str, Any] | None) -> bytes | None:
    """The master key in a ``berth-task-key`` Secret, or None (absent or not 32 bytes)."""
    if secret is None:
        return None
    master = decode_data(secret).get(TASK_MASTER_KEY)
    return master if master is not None and len(master) == MASTER_KEY_BYTES else None


def session_data(
    ref: SessionRef,
    api_token: str,
    master: bytes | None,
    redis_url: str = "",
    options: bytes | None = None,
) -> dict[str, bytes]:
    """Decoded data of ``<session>-berth``: the token, the session role's Redis URL (when
    given), with a master the task key, and the pod's rendered options.json (when given)."""
    data = {SECRET_API_TOKEN_KEY: api_token.encode()}
    if options is not None:
        data[SECRET_OPTIONS_KEY] = options
    if redis_url:
        data[SECRET_REDIS_URL_KEY] = redis_url.encode()
    if master is not None:
        data[SECRET_TASK_KEY_KEY] = derive_session_key(master, ref.namespace, ref.name)
    return data


def build_session_secret(ref: SessionRef, data: Mapping[str, bytes]) -> dict[str, Any]:
    """The Secret ``<session>-berth`` with ``data`` (owned by the AgentSession)."""
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "type": "Opaque",
        "metadata": {
            "name": session_secret_name(ref.name),
            "namespace": ref.namespace,
            "labels": {LABEL_SESSION: ref.name, LABEL_MANAGED_BY: MASTER_MANAGED_BY},
            "ownerReferences": [owner_reference(ref)],
        },
        "data": {k: _b64(v) for k, v in sorted(data.items())},
    }


def session_secret_update(
    ref: SessionRef,
    current: Mapping[str, Any],
    master: bytes | None,
    redis_url: str = "",
    options: bytes | None = None,
) -> dict[str, bytes] | None:
    """The data ``<session>-berth`` must get, or None when ``current`` is already right.

    The token is kept once issued (a running pod has it mounted); it is only (re)generated when
    missing or empty. The task key follows the master (added once the namespace has one).
    options.json follows ``options`` (the spec's generation); kept when None.
    """
    data = decode_data(current)
    token = data.get(SECRET_API_TOKEN_KEY, b"").decode(errors="replace").strip()
    wanted = session_data(ref, token or new_api_token(), master, redis_url, options)
    if master is None and SECRET_TASK_KEY_KEY in data:
        wanted[SECRET_TASK_KEY_KEY] = data[SECRET_TASK_KEY_KEY]
    if options is None and SECRET_OPTIONS_KEY in data:
        wanted[SECRET_OPTIONS_KEY] = data[SECRET_OPTIONS_KEY]
    return None if wanted == data else wanted


def build_worker_redis_secret(namespace: str, url: str) -> dict[str, Any]:
    """The namespace's ``berth-worker-redis`` Secret holding the workers' Redis URL."""
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "type": "Opaque",
        "metadata": {
            "name": WORKER_REDIS_SECRET,
            "namespace": namespace,
            "labels": {LABEL_MANAGED_BY: MASTER_MANAGED_BY},
        },
        "data": {WORKER_REDIS_URL_KEY: _b64(url.encode())},
    }


def api_token_of(secret: Mapping[str, Any] | None) -> str | None:
    """The API token in ``<session>-berth``, or None."""
    if secret is None:
        return None
    token = decode_data(secret).get(SECRET_API_TOKEN_KEY, b"").decode(errors="replace").strip()
    return token or None


def needs_task_master(spec: AgentSessionSpec) -> bool:
    """Whether a session needs the namespace master: it has a lane served by a LaneWorker."""
    return any(
        lane.lane_worker_ref is not None and lane.mode != "internal"
        for lane in (spec.lanes or {}).values()
    )


def llm_credentials_problem(
    spec: AgentSessionSpec,
    secret: Mapping[str, Any] | None,
    allowed_base_urls: list[str],
) -> tuple[str, str] | None:
    """(reason, message) when the session's LLM settings must not be used, else None.

    ``secret`` is the Secret spec.llm.apiKeySecretRef names as read from the API (None when it
    does not exist). Refused: a Secret without the label ``berth.dev/llm-credentials: "true"``
    (reason ``SecretNotAllowed``), a missing Secret or key (``SecretNotFound``), and a baseURL
    outside ``allowed_base_urls`` when that list is not empty (``BaseURLNotAllowed``). The
    message names the fix; it never contains a secret value.
    """
    llm = spec.llm
    if allowed_base_urls:
        url = (llm.base_url if llm is not None else None) or DEFAULT_OPENAI_BASE_URL
        if not any(url.startswith(prefix) for prefix in allowed_base_urls):
            return (
                "BaseURLNotAllowed",
                f"spec.llm.baseURL {url!r} is not allowed by the operator; use an endpoint "
                f"starting with one of: {', '.join(allowed_base_urls)}",
            )
    ref = llm.api_key_secret_ref if llm is not None else None
    if ref is None:
        return None
    if secret is None:
        return (
            "SecretNotFound",
            f"Secret {ref.name!r} (spec.llm.apiKeySecretRef) does not exist; create it with the "
            f'label {LABEL_LLM_CREDENTIALS}: "true"',
        )
    labels = (secret.get("metadata") or {}).get("labels") or {}
    if labels.get(LABEL_LLM_CREDENTIALS) != "true":
        return (
            "SecretNotAllowed",
            f"Secret {ref.name!r} (spec.llm.apiKeySecretRef) is not marked for Berth; label it: "
            f"kubectl label secret {ref.name} {LABEL_LLM_CREDENTIALS}=true",
        )
    if ref.key not in (secret.get("data") or {}):
        return (
            "SecretNotFound",
            f"Secret {ref.name!r} has no key {ref.key!r} (spec.llm.apiKeySecretRef.key)",
        )
    return None


def credentials_view(secret: Mapping[str, Any]) -> dict[str, Any]:
    """What :func:`llm_credentials_problem` reads of a Secret — its labels and the names of
    its keys — without any value, so it may be remembered: ``{"metadata": {"labels": ...},
    "data": {key: ""}}``."""
    labels = dict((secret.get("metadata") or {}).get("labels") or {})
    return {"metadata": {"labels": labels}, "data": dict.fromkeys(secret.get("data") or {}, "")}


def credentials_allowed(secret: Mapping[str, Any] | None) -> bool:
    """Whether ``secret`` exists and carries the label ``berth.dev/llm-credentials: "true"``."""
    labels = ((secret or {}).get("metadata") or {}).get("labels") or {}
    return secret is not None and labels.get(LABEL_LLM_CREDENTIALS) == "true"
