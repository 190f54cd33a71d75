"""The session pod's HTTP API as the plugin calls it (docs/architecture.md §5).

``POST /v1/messages {prompt}`` and ``POST /v1/passivate {reason: "manual", deadlineMs}`` go
through the apiserver's pod proxy (``/api/v1/namespaces/<ns>/pods/<status.podName>:8080/proxy/
v1/...``), authenticated with the session's API token read from its Secret ``<name>-berth`` and
sent as ``X-Berth-Token``; or, given an endpoint (e.g. a ``kubectl port-forward``), directly to
it with the same token. The operator notices a passivated pod and resumes it (or keeps it at
rest when ``spec.suspend`` is true). Also here: waking a session at rest before a prompt, and
following a session's logs across its pods.
"""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

from berth_operator.api.agentsession import AgentSessionStatus
from berth_operator.api.constants import (
    ANNOTATION_WAKE_REQUESTED_AT,
    SESSION_CONTAINER,
)
from berth_operator.errors import BerthOperatorError, RuntimeUnreachable
from pydantic import ValidationError

from berth_contract.state import API_TOKEN_HEADER, HTTP_PORT, PassivateRequest
from kubectl_berth.client import PluginClient
from kubectl_berth.errors import PluginError

DEFAULT_DEADLINE_SECONDS = 120
"""Passivation deadline when neither ``--deadline-seconds`` nor spec.passivation sets one."""
HTTP_TIMEOUT_SECONDS = 10.0
"""How long ``send``/``passivate`` wait for the session pod to answer."""
WAKE_POLL_SECONDS = 0.5
"""How often ``send`` looks at a waking session."""


def parse_status(body: dict[str, Any]) -> AgentSessionStatus:
    """The AgentSession's status as the operator's model. Raises PluginError when malformed."""
    try:
        return AgentSessionStatus.model_validate(body.get("status") or {})
    except ValidationError as exc:
        raise PluginError(f"unexpected AgentSession status: {exc}") from exc


def session_endpoint(body: dict[str, Any], override: str | None) -> str:
    """Base URL of the session pod's API. Raises PluginError when the pod has no IP.

    The IP is read through the operator's status model, so it follows the CRD's field name.
    """
    if override:
        return override.rstrip("/")
    st = parse_status(body)
    if not st.pod_ip:
        name = (body.get("metadata") or {}).get("name", "?")
        raise PluginError(
            f"session {name} has no running pod (phase {st.phase or 'unknown'}); nothing to talk to"
        )
    host = f"[{st.pod_ip}]" if ":" in st.pod_ip else st.pod_ip
    return f"http://{host}:{HTTP_PORT}"


def pod_proxy_path(body: dict[str, Any], path: str) -> str:
    """The apiserver pod-proxy path of ``path`` on the session's current pod:
    ``/api/v1/namespaces/<ns>/pods/<pod>:8080/proxy<path>``. Raises PluginError without a pod."""
    st = parse_status(body)
    meta = body.get("metadata") or {}
    if not st.pod_name or not st.pod_ip:
        raise PluginError(
            f"session {meta.get('name', '?')} has no running pod (phase "
            f"{st.phase or 'unknown'}); nothing to talk to"
        )
    ns = meta.get("namespace", "")
    return f"/api/v1/namespaces/{ns}/pods/{st.pod_name}:{HTTP_PORT}/proxy{path}"


def passivate_body(
    body: dict[str, Any], deadline_seconds: int | None, now_ms: int
) -> dict[str, Any]:
    """``POST /v1/passivate`` body: reason manual, ``deadlineMs`` an absolute epoch time in
    milliseconds (docs/architecture.md §5, as the operator sends it): ``now_ms`` plus the grace
    window from the flag, else ``spec.passivation.deadlineSeconds``, else 120 s."""
    if deadline_seconds is None:
        passivation = (body.get("spec") or {}).get("passivation") or {}
        deadline_seconds = int(passivation.get("deadlineSeconds") or DEFAULT_DEADLINE_SECONDS)
    deadline_ms = now_ms + deadline_seconds * 1000
    return PassivateRequest(reason="manual", deadline_ms=deadline_ms).wire()


def post_json(
    url: str, payload: dict[str, Any], token: str = "", timeout: float = HTTP_TIMEOUT_SECONDS
) -> tuple[int, Any]:
    """POST ``payload`` as JSON (with ``token`` in ``X-Berth-Token`` when given); return (HTTP
    status, decoded body or text).

    Raises RuntimeUnreachable when nothing answers. HTTP error statuses are returned, not raised.
    """
    data = json.dumps(payload).encode()
    headers = {"Content-Type": "application/json"}
    if token:
        headers[API_TOKEN_HEADER] = token
    req = urllib.request.Request(url, data=data, method="POST", headers=headers)
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            status, raw = int(resp.status), resp.read()
    except urllib.error.HTTPError as exc:
        status, raw = int(exc.code), exc.read()
    except (urllib.error.URLError, OSError) as exc:
        raise RuntimeUnreachable(f"session pod at {url} did not answer: {exc}") from exc
    text = raw.decode(errors="replace")
    try:
        return status, json.loads(text) if text else None
    except json.JSONDecodeError:
        return status, text


def call_session(
    api: PluginClient,
    name: str,
    body: dict[str, Any],
    path: str,
    payload: dict[str, Any],
    endpoint: str | None,
) -> tuple[int, Any]:
    """POST to the session's API: directly to ``endpoint`` when given, else through the pod
    proxy; either way with the session's token from its Secret."""
    token = api.session_token(name)
    if endpoint:
        return post_json(f"{session_endpoint(body, endpoint)}{path}", payload, token)
    return api.proxy_post(pod_proxy_path(body, path), payload, token, HTTP_TIMEOUT_SECONDS)


def describe(status: int, answer: Any) -> str:
    """One line for a refusal: the answer's ``error`` or ``message``, else its status and body."""
    if isinstance(answer, dict):
        return str(answer.get("error") or answer.get("message") or json.dumps(answer))
    return f"HTTP {status}: {answer}"


def wake_needed(body: dict[str, Any]) -> bool:
    """Whether the session is at rest and no wake was asked for since it came to rest."""
    st = parse_status(body)
    if st.at_rest_since is None or st.phase != "Passivated":
        return False
    asked = ((body.get("metadata") or {}).get("annotations") or {}).get(
        ANNOTATION_WAKE_REQUESTED_AT
    )
    try:
        at = datetime.fromisoformat(asked.replace("Z", "+00:00")) if asked else None
    except ValueError:
        at = None
    return at is None or at < st.at_rest_since


def wake_stamp() -> str:
    """Now as the wake annotation's value (ISO 8601, UTC, milliseconds)."""
    return datetime.now(UTC).isoformat(timespec="milliseconds")


def send_waking(
    api: PluginClient,
    name: str,
    body: dict[str, Any],
    prompt: str,
    endpoint: str | None,
    wait_seconds: float,
) -> tuple[int, Any]:
    """POST the prompt; while the session is at rest or waking (no pod, pod starting, 409
    ``busy`` from a pod still starting) ask it to wake and try again until ``wait_seconds``."""
    deadline = time.monotonic() + wait_seconds
    while True:
        if wake_needed(body):
            body = api.annotate(name, ANNOTATION_WAKE_REQUESTED_AT, wake_stamp())
        st = parse_status(body)
        code, answer = 0, "no pod yet"
        if st.phase == "Running" and st.pod_ip and st.pod_name:
            try:
                code, answer = call_session(
                    api, name, body, "/v1/messages", {"prompt": prompt}, endpoint
                )
            except (BerthOperatorError, RuntimeUnreachable) as exc:
                code, answer = 0, str(exc)
            starting = isinstance(answer, dict) and answer.get("state") == "starting"
            if code > 0 and code not in (502, 503) and not starting:  # 502/503: proxy, not ready
                return code, answer
        if time.monotonic() > deadline:
            return (code or 504), f"session did not wake in {wait_seconds:g}s ({answer})"
        time.sleep(WAKE_POLL_SECONDS)
        body = api.get_session(name)


def session_log(api: PluginClient, name: str, follow: bool) -> Iterator[str]:
    """Yield the log text of the session's pods: the current one, and with ``follow`` every
    later one (a ``--- pod <name>`` line marks each), until the session is terminal."""
    shown: set[str] = set()
    while True:
        st = api.get_session(name).get("status") or {}
        pod = st.get("podName")
        if pod and pod not in shown:
            shown.add(pod)
            if follow or len(shown) > 1:
                yield f"--- pod {pod} (epoch {st.get('epoch')})\n"
            for chunk in api.pod_log_lines(pod, SESSION_CONTAINER, follow):
                yield chunk.decode(errors="replace") if isinstance(chunk, bytes) else str(chunk)
        elif not pod and not shown and not follow:
            raise PluginError(f"agentsession {name} has no pod now (phase {st.get('phase')})")
        if not follow or st.get("phase") in ("Succeeded", "Failed"):
            return
        time.sleep(1.0)
