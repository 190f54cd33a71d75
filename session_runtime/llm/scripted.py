"""A scripted OpenAI-compatible chat server for tests and the demo (real HTTP, real SSE).

Owned by ``session_runtime.llm``; used by the runtime's tests, the benchmark, and the operator's
integration/e2e tests and demo. Run it as a program::

    python -m session_runtime.llm.scripted --script conv.json --host 127.0.0.1 --port 8099

or import it (``async with ScriptedServer(script) as srv: srv.base_url``; or
``srv.start_in_thread()`` / ``srv.stop_thread()`` for synchronous tests).

Script format (JSON, or YAML when the file ends in .yaml/.yml) — keep it stable, others use it::

    {
      "turns": [                                   # or the file is just this list
        {"text": "Let me look."},
        {"tool_calls": [{"name": "bash", "arguments": {"command": "ls"}},
                        {"name": "read", "arguments": "{not json", "id": "call_x"}]},
        {"text": "Done.", "usage": {"prompt_tokens": 120, "completion_tokens": 9}},
        {"text": "part one", "finish_reason": "length"},
        {"error": {"status": 500, "message": "overloaded"}},
        {"text": "found it", "when_last_tool_output_contains": "needle", "delay_ms": 50}
      ],
      "on_exhausted": "error",                     # or "repeat_last"
      "cursor": "server"                           # or "history"
    }

Turn keys:
- ``text``: assistant text (streamed in ``chunk_chars`` pieces, default 16).
- ``tool_calls``: list of ``{name, arguments, id?}``; ``arguments`` is an object (sent as JSON)
  or a string sent verbatim (to script malformed arguments). Default id ``call_<turn>_<i>``.
- ``finish_reason``: override (default ``tool_calls`` when there are tool calls, else ``stop``).
- ``usage``: ``{prompt_tokens, completion_tokens}``; default: bytes/4 of the request messages and
  of the reply (deterministic, so usage assertions can be computed).
- ``delay_ms``: wait this long before answering (simulates model latency).
- ``error``: ``{status, message, retry_after?}``: answer with that HTTP error instead (the turn
  is consumed); ``retry_after`` (seconds) is sent as the ``Retry-After`` header.
- ``when_last_tool_output_contains``: matching mode. The turn is only eligible if the last
  ``tool`` message of the request contains this string; the server takes the next eligible turn
  at or after its cursor, skipping (and consuming) turns whose condition does not hold.

Conversations: each conversation replays the script from its first turn. The key is the
``X-Scripted-Conversation`` header, else the request's ``user`` field, else a hash of the first
user message. So concurrent sessions with different prompts each replay from the start, and a
resumed session (same first prompt) continues where its conversation stopped.

Cursor modes: ``server`` (default) keeps a cursor per conversation, as above. ``history`` keeps
no state: the turn answered is the number of assistant messages already in the request (each turn
yields one assistant message). A run resumed from a checkpoint on another pod, after the first pod
abandoned an in-flight call, then gets exactly the turn its history calls for — what the demo's
drain needs. ``when_last_tool_output_contains`` still skips ineligible turns from there.

Replaying a recorded conversation: :func:`script_from_history` turns an OpenAI-format message
list (``Session.history()``, a checkpoint's messages, a logged request) into a script.

Other endpoints: ``GET /v1/models``; ``GET /_scripted/requests`` (the request log: arrival time
``at`` (epoch seconds), key, turn index, message count, stream flag, and the messages);
``POST /_scripted/reset``.
Exhausted script: ``on_exhausted: error`` answers HTTP 400 ``script exhausted``.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import math
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from aiohttp import web


@dataclass(slots=True)
class Script:
    """A parsed script: ``turns`` (dicts as documented above) and ``on_exhausted``."""

    turns: list[dict[str, Any]]
    on_exhausted: str = "error"
    chunk_chars: int = 16
    cursor: str = "server"


def parse_script(data: Any) -> Script:
    """Build a Script from a list of turns or a ``{"turns": ..., "on_exhausted": ...}`` dict.

    Raises ValueError for anything else or for a turn without text/tool_calls/error.
    """
    if isinstance(data, list):
        data = {"turns": data}
    if not isinstance(data, dict) or not isinstance(data.get("turns"), list):
        raise ValueError("a script is a list of turns or an object with a 'turns' list")
    for i, turn in enumerate(data["turns"]):
        if not isinstance(turn, dict) or not ({"text", "tool_calls", "error"} & set(turn)):
            raise ValueError(f"turn {i} needs 'text', 'tool_calls' or 'error'")
    mode = str(data.get("on_exhausted", "error"))
    if mode not in ("error", "repeat_last"):
        raise ValueError("on_exhausted must be 'error' or 'repeat_last'")
    cursor = str(data.get("cursor", "server"))
    if cursor not in ("server", "history"):
        raise ValueError("cursor must be 'server' or 'history'")
    return Script(list(data["turns"]), mode, int(data.get("chunk_chars", 16)), cursor)


def load_script(path: str | Path) -> Script:
    """Read a script file (JSON, or YAML by extension)."""
    p = Path(path)
    text = p.read_text(encoding="utf-8")
    if p.suffix in (".yaml", ".yml"):
        import yaml

        return parse_script(yaml.safe_load(text))
    return parse_script(json.loads(text))


def script_from_history(messages: list[dict[str, Any]]) -> dict[str, Any]:
    """A script that replays the assistant side of a recorded conversation.

    ``messages`` is an OpenAI-format history (``Session.history()``, a ``LoopCheckpoint``'s
    ``messages``, or the ``messages`` of a request in ``/_scripted/requests``); every assistant
    message becomes one turn, tool calls keep their ids and raw arguments.
    """
    turns: list[dict[str, Any]] = []
    for msg in messages:
        if msg.get("role") != "assistant":
            continue
        turn: dict[str, Any] = {}
        if msg.get("content"):
            turn["text"] = str(msg["content"])
        calls = msg.get("tool_calls") or []
        if calls:
            turn["tool_calls"] = [
                {
                    "id": c.get("id"),
                    "name": c["function"]["name"],
                    "arguments": c["function"].get("arguments", ""),
                }
                for c in calls
            ]
        turns.append(turn or {"text": ""})
    return {"turns": turns}


def _estimate(obj: Any) -> int:
    return math.ceil(len(json.dumps(obj, ensure_ascii=False).encode()) / 4)


def conversation_key(request_headers: Any, body: dict[str, Any]) -> str:
    """Header, then ``user`` field, then sha256 of the first user message (first 16 hex)."""
    explicit = request_headers.get("X-Scripted-Conversation") or body.get("user")
    if explicit:
        return str(explicit)
    for msg in body.get("messages", []):
        if msg.get("role") == "user":
            content = msg.get("content")
            raw = content if isinstance(content, str) else json.dumps(content, sort_keys=True)
            return hashlib.sha256(raw.encode()).hexdigest()[:16]
    return "default"


def _last_tool_output(messages: list[dict[str, Any]]) -> str | None:
    for msg in reversed(messages):
        if msg.get("role") == "tool":
            return str(msg.get("content", ""))
    return None


class ScriptedServer:
    """The server. ``port=0`` picks a free port; read ``port``/``base_url`` after ``start``."""

    def __init__(
        self, script: Script | list[Any] | dict[str, Any], host: str = "127.0.0.1", port: int = 0
    ) -> None:
        self.script = script if isinstance(script, Script) else parse_script(script)
        self.host = host
        self.port = port
        self.cursors: dict[str, int] = {}
        self.requests: list[dict[str, Any]] = []
        self._runner: web.AppRunner | None = None
        self._thread: threading.Thread | None = None
        self._thread_loop: asyncio.AbstractEventLoop | None = None

    @property
    def base_url(self) -> str:
        """``http://host:port/v1`` — pass as the provider ``base_url`` / ``OPENAI_BASE_URL``."""
        return f"http://{self.host}:{self.port}/v1"

    def app(self) -> web.Application:
        """The aiohttp application (routes documented in the module docstring)."""
        app = web.Application()
        app.router.add_post("/v1/chat/completions", self._chat)
        app.router.add_get("/v1/models", self._models)
        app.router.add_get("/_scripted/requests", self._requests)
        app.router.add_post("/_scripted/reset", self._reset)
        return app

    async def start(self) -> None:
        """Bind and serve on the current event loop."""
        self._runner = web.AppRunner(self.app(), access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, self.host, self.port)
        await site.start()
        server = site._server
        if self.port == 0 and server is not None:
            sockets = getattr(server, "sockets", None) or []
            self.port = int(sockets[0].getsockname()[1])

    async def stop(self) -> None:
        """Stop serving."""
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    async def __aenter__(self) -> ScriptedServer:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    def start_in_thread(self) -> None:
        """Serve from a private event loop in a daemon thread (for synchronous callers)."""
        ready = threading.Event()

        def main() -> None:
            loop = asyncio.new_event_loop()
            self._thread_loop = loop
            loop.run_until_complete(self.start())
            ready.set()
            loop.run_forever()
            loop.run_until_complete(self.stop())
            loop.close()

        self._thread = threading.Thread(target=main, name="scripted-llm", daemon=True)
        self._thread.start()
        ready.wait()

    def stop_thread(self) -> None:
        """Stop a server started with :meth:`start_in_thread`."""
        if self._thread_loop is not None and self._thread is not None:
            self._thread_loop.call_soon_threadsafe(self._thread_loop.stop)
            self._thread.join()
            self._thread = None

    def _pick(self, key: str, messages: list[dict[str, Any]]) -> tuple[int, dict[str, Any]] | None:
        turns = self.script.turns
        if self.script.cursor == "history":
            cursor = sum(1 for m in messages if m.get("role") == "assistant")
        else:
            cursor = self.cursors.get(key, 0)
        last_out = _last_tool_output(messages)
        while cursor < len(turns):
            turn = turns[cursor]
            cond = turn.get("when_last_tool_output_contains")
            cursor += 1
            if cond is None or (last_out is not None and str(cond) in last_out):
                self.cursors[key] = cursor
                return cursor - 1, turn
        self.cursors[key] = cursor
        if self.script.on_exhausted == "repeat_last" and turns:
            return len(turns) - 1, turns[-1]
        return None

    async def _models(self, request: web.Request) -> web.Response:
        return web.json_response(
            {"object": "list", "data": [{"id": "scripted", "object": "model"}]}
        )

    async def _requests(self, request: web.Request) -> web.Response:
        return web.json_response(self.requests)

    async def _reset(self, request: web.Request) -> web.Response:
        self.cursors.clear()
        self.requests.clear()
        return web.json_response({"ok": True})

    async def _chat(self, request: web.Request) -> web.StreamResponse:
        try:
            return await self._answer(request)
        except ConnectionResetError:
            # The client went away (a cancelled or abandoned call); nothing to answer.
            return web.Response(status=499)

    async def _answer(self, request: web.Request) -> web.StreamResponse:
        body = await request.json()
        messages: list[dict[str, Any]] = body.get("messages", [])
        key = conversation_key(request.headers, body)
        picked = self._pick(key, messages)
        self.requests.append(
            {
                "at": time.time(),  # wall clock of arrival (benchmarks: when a run started)
                "key": key,
                "turn_index": None if picked is None else picked[0],
                "message_count": len(messages),
                "stream": bool(body.get("stream")),
                "messages": messages,
                "headers": {  # what a test may check; never the credentials
                    k.lower(): v
                    for k, v in request.headers.items()
                    if k.lower() not in ("authorization", "api-key", "x-api-key")
                },
            }
        )
        if picked is None:
            return _error(400, "script exhausted")
        index, turn = picked
        if turn.get("delay_ms"):
            await asyncio.sleep(float(turn["delay_ms"]) / 1000)
        if "error" in turn:
            err = turn["error"]
            answer = _error(int(err.get("status", 500)), str(err.get("message", "scripted error")))
            if "retry_after" in err:
                answer.headers["Retry-After"] = str(err["retry_after"])
            return answer
        reply = _reply(index, turn, messages, str(body.get("model", "scripted")))
        if body.get("stream"):
            return await self._stream(
                request, reply, bool((body.get("stream_options") or {}).get("include_usage"))
            )
        return web.json_response(_completion_json(reply))

    async def _stream(
        self, request: web.Request, reply: dict[str, Any], include_usage: bool
    ) -> web.StreamResponse:
        resp = web.StreamResponse(
            headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"}
        )
        await resp.prepare(request)
        base = {
            "id": reply["id"],
            "object": "chat.completion.chunk",
            "created": 0,
            "model": reply["model"],
        }

        async def send(delta: dict[str, Any], finish: str | None = None) -> None:
            chunk = {**base, "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}
            await resp.write(f"data: {json.dumps(chunk)}\n\n".encode())

        await send({"role": "assistant", "content": ""})
        text = reply["text"]
        step = max(self.script.chunk_chars, 1)
        for i in range(0, len(text), step):
            await send({"content": text[i : i + step]})
        for idx, call in enumerate(reply["tool_calls"]):
            args = call["function"]["arguments"]
            half = len(args) // 2
            await send(
                {
                    "tool_calls": [
                        {
                            "index": idx,
                            "id": call["id"],
                            "type": "function",
                            "function": {
                                "name": call["function"]["name"],
                                "arguments": args[:half],
                            },
                        }
                    ]
                }
            )
            await send({"tool_calls": [{"index": idx, "function": {"arguments": args[half:]}}]})
        await send({}, reply["finish_reason"])
        if include_usage:
            chunk = {**base, "choices": [], "usage": reply["usage"]}
            await resp.write(f"data: {json.dumps(chunk)}\n\n".encode())
        await resp.write(b"data: [DONE]\n\n")
        await resp.write_eof()
        return resp


def _error(status: int, message: str) -> web.Response:
    return web.json_response(
        {"error": {"message": message, "type": "scripted_error", "code": status}}, status=status
    )


def _reply(
    index: int, turn: dict[str, Any], messages: list[dict[str, Any]], model: str
) -> dict[str, Any]:
    calls = []
    for i, tc in enumerate(turn.get("tool_calls") or []):
        args = tc.get("arguments", {})
        calls.append(
            {
                "id": str(tc.get("id") or f"call_{index}_{i}"),
                "type": "function",
                "function": {
                    "name": str(tc["name"]),
                    "arguments": args if isinstance(args, str) else json.dumps(args),
                },
            }
        )
    text = str(turn.get("text") or "")
    usage = dict(turn.get("usage") or {})
    prompt = int(usage.get("prompt_tokens", _estimate(messages)))
    completion = int(
        usage.get("completion_tokens", _estimate([text, calls]) if (text or calls) else 0)
    )
    finish = turn.get("finish_reason") or ("tool_calls" if calls else "stop")
    return {
        "id": f"chatcmpl-scripted-{index}",
        "model": model,
        "text": text,
        "tool_calls": calls,
        "finish_reason": finish,
        "usage": {
            "prompt_tokens": prompt,
            "completion_tokens": completion,
            "total_tokens": prompt + completion,
        },
    }


def _completion_json(reply: dict[str, Any]) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": reply["text"] or None}
    if reply["tool_calls"]:
        message["tool_calls"] = reply["tool_calls"]
    return {
        "id": reply["id"],
        "object": "chat.completion",
        "created": 0,
        "model": reply["model"],
        "choices": [{"index": 0, "message": message, "finish_reason": reply["finish_reason"]}],
        "usage": reply["usage"],
    }


def main(argv: list[str] | None = None) -> None:
    """CLI: ``--script FILE --host H --port N``; serves until interrupted."""
    parser = argparse.ArgumentParser(description="Scripted OpenAI-compatible chat server")
    parser.add_argument("--script", required=True)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8099)
    args = parser.parse_args(argv)
    server = ScriptedServer(load_script(args.script), args.host, args.port)
    web.run_app(
        server.app(), host=args.host, port=args.port, access_log=None, print=lambda *_: None
    )


if __name__ == "__main__":
    main()
