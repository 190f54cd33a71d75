"""Berth's front door (the gateway) as ``send --gateway`` and ``logs --message`` call it.

``POST /v1/sessions/<ns>/<name>/messages?waitSeconds=N {prompt, messageId?}`` queues a message
durably and delivers it once; ``GET .../messages/<id>/events`` streams its states and its run's
events as server-sent events. The session's API token (Secret ``<name>-berth``) goes in
``X-Berth-Token``.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from collections.abc import Iterator
from typing import Any

from berth_operator.errors import RuntimeUnreachable

from berth_contract.state import API_TOKEN_HEADER
from kubectl_berth.client import PluginClient
from kubectl_berth.errors import PluginError
from kubectl_berth.session_api import describe, post_json


def gateway_message_url(gateway: str, namespace: str, name: str, message_id: str = "") -> str:
    """The front door URL of a session's messages (or of one message)."""
    url = f"{gateway.rstrip('/')}/v1/sessions/{namespace}/{name}/messages"
    return f"{url}/{message_id}" if message_id else url


def describe_message(answer: Any) -> str:
    """One line for a front door message body: the reply when done, else its state."""
    if not isinstance(answer, dict):
        return str(answer)
    state = answer.get("state")
    if state == "done":
        return str(answer.get("resultText") or "")
    if state == "failed":
        return f"message {answer.get('messageId')} failed: {answer.get('error')}"
    return f"message {answer.get('messageId')} is {state} (no reply yet)"


def send_through_gateway(
    api: PluginClient,
    gateway: str,
    name: str,
    prompt: str,
    message_id: str | None,
    wait_seconds: float,
) -> str:
    """Queue ``prompt`` for session ``name`` at the front door and wait up to ``wait_seconds``
    for its reply; return the line to print (the reply, or the message's state). Raises
    PluginError when the front door refuses or the message failed, RuntimeUnreachable when
    nothing answers."""
    payload: dict[str, Any] = {"prompt": prompt}
    if message_id:
        payload["messageId"] = message_id
    url = gateway_message_url(gateway, api.namespace, name) + f"?waitSeconds={wait_seconds:g}"
    code, answer = post_json(url, payload, api.session_token(name), timeout=wait_seconds + 15)
    if code >= 300 or not isinstance(answer, dict):
        raise PluginError(f"the front door refused the message: {describe(code, answer)}")
    if answer.get("state") == "failed":
        raise PluginError(describe_message(answer))
    return describe_message(answer)


def sse_lines(event: str, data: str) -> str:
    """One printable line of a front door event: ``[state] ...`` for message events, the run
    event's type and its most telling field otherwise."""
    try:
        body = json.loads(data)
    except json.JSONDecodeError:
        return f"{event}: {data}"
    if event == "message":
        return f"[{body.get('state')}] {describe_message(body)}"
    kind = body.get("type", "?")
    detail = body.get("text") or body.get("name") or body.get("output") or ""
    return f"{kind} {str(detail)[:200]}".rstrip()


def message_events(url: str, token: str) -> Iterator[str]:
    """Yield printable lines of a front door SSE stream until it ends. Raises
    RuntimeUnreachable when nothing answers, PluginError for a refusal."""
    req = urllib.request.Request(url, headers={API_TOKEN_HEADER: token})
    try:
        resp = urllib.request.urlopen(req, timeout=None)
    except urllib.error.HTTPError as exc:
        raise PluginError(f"the front door refused: HTTP {exc.code} {exc.read()[:300]!r}") from None
    except (urllib.error.URLError, OSError) as exc:
        raise RuntimeUnreachable(f"front door at {url} did not answer: {exc}") from exc
    event, data = "message", ""
    with resp:
        for raw in resp:
            line = raw.decode(errors="replace").rstrip("\n")
            if line.startswith("event: "):
                event = line[len("event: ") :]
            elif line.startswith("data: "):
                data = line[len("data: ") :]
            elif not line and data:
                yield sse_lines(event, data)
                event, data = "message", ""
