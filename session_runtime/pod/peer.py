"""The ``call_peer`` tool: one session asks another through the operator's front door.

Owned by the ``berth-session`` entrypoint, which adds it as a host tool
(:mod:`session_runtime.tools.host`) when the options carry ``peerCalls`` (the AgentSession's
``spec.peers``). The call is ``POST <gateway>/v1/sessions/<namespace>/<peer>/messages`` with
``waitSeconds``, authenticated as this session (its API token and uid, the scheme of the budget
service); the front door checks that ``spec.peers`` allows the peer, refuses loops and deep
chains, wakes a peer at rest and answers with the peer's reply. The message id is derived from
the session, run, turn and tool call, so a retried call is delivered once. The request carries
the W3C ``traceparent`` of this tool call's span: the peer's run is its child, in one trace.

Tool arguments: ``{session: str (the peer's name, same namespace), prompt: str,
timeout_seconds?: int (default and cap: maxWaitSeconds)}``. Output: the peer's final answer;
refusals, timeouts and an unreachable front door are error results the run goes on with.
"""

from __future__ import annotations

import hashlib
from typing import Any

import aiohttp

from berth_contract.services import SESSION_UID_HEADER
from session_runtime.tools.base import ToolCall, ToolContext, ToolResult
from session_runtime.tools.host import HostTool
from session_runtime.tracing import tool_span, trace_fields

TOOL_NAME = "call_peer"
#: Header carrying the calling session's uid (with its token in ``Authorization: Bearer``).
#: Extra seconds the HTTP request may take beyond the wait it asked the front door for.
HTTP_SLACK_SECONDS = 15

DEFINITION: dict[str, Any] = {
    "type": "function",
    "function": {
        "name": TOOL_NAME,
        "description": (
            "Ask another agent session (a peer, by name) a question and wait for its answer. "
            "Only peers this session is allowed to call can be reached."
        ),
        "parameters": {
            "type": "object",
            "properties": {
                "session": {"type": "string", "description": "the peer session's name"},
                "prompt": {"type": "string", "description": "what to ask the peer"},
                "timeout_seconds": {
                    "type": "integer",
                    "description": "how long to wait for the answer",
                },
            },
            "required": ["session", "prompt"],
            "additionalProperties": False,
        },
    },
}


def peer_message_id(session_uid: str, ctx: ToolContext, call: ToolCall) -> str:
    """A message id unique to this tool call (``peer-`` + 40 hex digits), the same when the
    same call is made again."""
    key = f"{session_uid}/{ctx.run_id}/{ctx.turn}/{call.id}".encode()
    return "peer-" + hashlib.sha256(key).hexdigest()[:40]


def _error(call: ToolCall, text: str) -> ToolResult:
    return ToolResult(call.id, call.name, text, exit_code=1, is_error=True)


def peer_tool(
    gateway_url: str,
    namespace: str,
    session_uid: str,
    token: str,
    correlation_id: str | None,
    max_wait_seconds: int,
) -> HostTool:
    """The ``call_peer`` host tool of session ``session_uid`` in ``namespace``."""
    base = gateway_url.rstrip("/")

    async def run(call: ToolCall, ctx: ToolContext) -> ToolResult:
        args = call.arguments
        peer, prompt = args.get("session"), args.get("prompt")
        if not isinstance(peer, str) or not peer or not isinstance(prompt, str) or not prompt:
            return _error(call, "call_peer needs 'session' and 'prompt' (non-empty strings)")
        wait = args.get("timeout_seconds", max_wait_seconds)
        if not isinstance(wait, int) or isinstance(wait, bool) or wait < 1:
            return _error(call, "call_peer: 'timeout_seconds' must be a positive integer")
        wait = min(wait, max_wait_seconds)
        message_id = peer_message_id(session_uid, ctx, call)
        body: dict[str, Any] = {"prompt": prompt, "messageId": message_id}
        if correlation_id:
            body["correlationId"] = correlation_id
        url = f"{base}/v1/sessions/{namespace}/{peer}/messages"
        headers = {"Authorization": f"Bearer {token}", SESSION_UID_HEADER: session_uid}
        headers.update(trace_fields(tool_span(call.id)))  # the callee's run: this call's child
        timeout = aiohttp.ClientTimeout(total=wait + HTTP_SLACK_SECONDS)
        try:
            async with (
                aiohttp.ClientSession(timeout=timeout) as http,
                http.post(url, json=body, params={"waitSeconds": str(wait)}, headers=headers) as r,
            ):
                answer = await r.json(content_type=None)
                status = r.status
        except (aiohttp.ClientError, TimeoutError, ValueError) as exc:
            return _error(call, f"call_peer: the front door did not answer ({exc or 'timeout'})")
        if not isinstance(answer, dict):
            return _error(call, f"call_peer: unexpected answer (HTTP {status})")
        if status >= 300:
            return _error(call, f"call_peer refused: {answer.get('message') or answer}")
        if answer.get("state") == "done":
            return ToolResult(call.id, call.name, str(answer.get("resultText") or ""))
        if answer.get("state") == "failed":
            return _error(call, f"peer {peer} failed: {answer.get('error')}")
        return _error(
            call,
            f"peer {peer} did not answer within {wait} s (message {message_id} stays queued "
            "and will still be delivered once)",
        )

    return HostTool(DEFINITION, run)
