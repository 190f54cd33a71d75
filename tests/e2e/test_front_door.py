"""The session front door, end to end: wake on message, exactly-once delivery across an operator
restart, and peer invocation (docs/architecture.md §8 "At rest"; A3S ``peer_invocation``).

Real pieces: the control plane, ``berth-operator`` as a subprocess under its own ServiceAccount
(its leader serves the front door on the host's address, reachable from pods), the real Redis
(the operator's ACL user, the chart's ACL), ``berth-session`` pods on the dev cluster's real
nodes, the shared volume, the scripted OpenAI-compatible model over HTTP, and the
``kubectl-berth`` console script as a user runs it.

Asserted:

- ``test_wake_*``: messages posted to a session at rest are queued (202), wake it, and are
  answered in order; the operator is SIGKILLed right after they were queued and a new one
  delivers them; each message started exactly one run (the model was asked each prompt once;
  the store holds one run per message id); a repeated message id returns the stored message;
  ``kubectl berth send --gateway`` prints the reply and ``kubectl berth logs --message`` streams
  the message's states; the lineage records ``idle_reaper``.
- ``test_peer_*``: session A asks peer B (at rest) a question with ``call_peer``; B wakes and
  answers; A's run finishes with the answer as the tool result; B's run records
  ``peer_invocation`` with A's tenant and correlation id and its hooks saw the event; B's call
  back to A (A → B → A) is refused as a loop, with a clear message the model sees; a peer not
  in ``spec.peers`` is refused; PeerInvocation Events on both sessions.
"""

from __future__ import annotations

import base64
import json
import signal
import urllib.error
import urllib.request
from typing import Any

import pytest

from session_runtime.store.file import FileSessionStore
from tests.cluster import DevCluster, host_ip
from tests.e2e.passivation_support import (
    REAL_NODE_LABEL,
    apply,
    kubectl_berth,
    operator_env,
    session,
    wait,
)
from tests.integration.operator.harness import SECRET, free_port, operator, scripted_model

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(900)]

IDLE_AFTER_SECONDS = 3


def gateway_env() -> tuple[str, dict[str, str]]:
    """(the front door's base URL, the operator's settings that serve it to pods)."""
    port = free_port()
    url = f"http://{host_ip()}:{port}"
    return url, operator_env(
        BERTH_GATEWAY_ENABLED="true",
        BERTH_GATEWAY_PORT=str(port),
        BERTH_GATEWAY_URL=url,
        BERTH_GATEWAY_POLL_SECONDS="0.2",
        BERTH_HTTP_HOST="0.0.0.0",  # the front door must be reachable from pods
    )


def token_of(dc: DevCluster, ns: str, name: str) -> str:
    raw = dc.kubectl("-n", ns, "get", "secret", f"{name}-berth", "-o", "jsonpath={.data.api-token}")
    return base64.b64decode(raw.stdout).decode().strip()


def call(
    url: str, token: str, body: dict[str, Any] | None = None, timeout: float = 60
) -> tuple[int, dict[str, Any]]:
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(
        url,
        data=data,
        method="POST" if body is not None else "GET",
        headers={"Content-Type": "application/json", "Authorization": f"Bearer {token}"},
    )
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            return int(resp.status), json.loads(resp.read() or b"{}")
    except urllib.error.HTTPError as exc:
        return int(exc.code), json.loads(exc.read() or b"{}")


def serving(url: str, token: str) -> bool:
    try:
        call(url, token, timeout=5)
        return True
    except (urllib.error.URLError, OSError):
        return False


def keep_alive_session(name: str, base_url: str, prompt: str, **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "berth.dev/v1alpha1",
        "kind": "AgentSession",
        "metadata": {"name": name, "labels": {"team": "qa"}},
        "spec": {
            "prompt": prompt,
            "model": "openai/gpt-4o-mini",
            "llm": {
                "baseURL": base_url,
                "apiKeySecretRef": {"name": "llm-credentials", "key": "api-key"},
            },
            "placement": {"nodeSelector": {REAL_NODE_LABEL: "real"}},
            **spec,
        },
    }


def at_rest(dc: DevCluster, ns: str, name: str) -> dict[str, Any] | None:
    st: dict[str, Any] = session(dc, ns, name).get("status") or {}
    return st if st.get("phase") == "Passivated" and st.get("atRestSince") else None


def stored_runs(dc: DevCluster, ns: str, name: str) -> list[dict[str, Any]]:
    """The run records in the session's store on the shared volume (read-only)."""
    store = FileSessionStore(str(dc.claim_dir(ns) / "store" / ns), epoch=9_999_999_999)
    saved = store.load_session(name) or {}
    return list(saved.get("runs") or [])


def last_user_prompts(requests: list[dict[str, Any]]) -> list[str]:
    out = []
    for req in requests:
        users = [m for m in req["messages"] if m.get("role") == "user"]
        last = req["messages"][-1]
        if users and last.get("role") == "user":
            out.append(str(users[-1].get("content")))
    return out


WAKE_SCRIPT: dict[str, Any] = {
    "turns": [
        {"text": "ready"},
        {"text": "answer one"},
        {"text": "answer two"},
        {"text": "answer three"},
    ],
    "cursor": "history",
    "on_exhausted": "repeat_last",
}


def test_wake_messages_are_delivered_once_across_an_operator_restart(
    dev_cluster: DevCluster,
) -> None:
    dc = dev_cluster
    gateway, env = gateway_env()
    with (
        dc.namespace("wake") as ns,
        scripted_model(WAKE_SCRIPT) as srv,
        operator(dc, ns, **env) as op,
    ):
        doc = keep_alive_session(
            "inbox",
            srv.base_url,
            "get ready",
            keepAlive=True,
            idle={"afterSeconds": IDLE_AFTER_SECONDS},
        )
        apply(dc, ns, [SECRET, doc])
        st = wait("inbox at rest", lambda: at_rest(dc, ns, "inbox"), cap=300)
        assert st["passivation"]["reason"] == "idle_reaper"
        token = token_of(dc, ns, "inbox")
        base = f"{gateway}/v1/sessions/{ns}/inbox/messages"

        # refusals: no token, wrong token, malformed body, unknown session
        assert call(base, "", {"prompt": "x"})[0] == 401
        assert call(base, "wrong", {"prompt": "x"})[0] == 401
        assert call(base, token, {"prompt": ""})[0] == 400
        assert call(f"{gateway}/v1/sessions/{ns}/nobody/messages", token, {"prompt": "x"})[0] == 404

        # two messages queued while at rest, then the operator is killed and replaced
        status, first = call(base, token, {"prompt": "question one", "messageId": "m-1"})
        assert status == 202 and first["state"] == "queued", first
        status, second = call(base, token, {"prompt": "question two", "messageId": "m-2"})
        assert status == 202, second
        status, again = call(base, token, {"prompt": "question one", "messageId": "m-1"})
        assert (status, again["messageId"], again["createdMs"]) == (202, "m-1", first["createdMs"])
        op.stop(op.procs[-1], signal.SIGKILL)
        op.start()
        # the new replica serves once it holds the Lease (the killed one's must expire first)
        wait("the new leader's front door", lambda: serving(f"{base}/m-1", token), cap=120)

        status, done = call(f"{base}/m-1?waitSeconds=240", token, timeout=300)
        assert (status, done["state"], done["resultText"]) == (200, "done", "answer one"), done
        status, done = call(f"{base}/m-2?waitSeconds=240", token, timeout=300)
        assert (status, done["state"], done["resultText"]) == (200, "done", "answer two"), done
        asked = last_user_prompts(srv.requests)
        assert asked.count("question one") == 1 and asked.count("question two") == 1, asked
        assert asked.index("question one") < asked.index("question two")  # in order
        by_message = [r.get("message_id") for r in stored_runs(dc, ns, "inbox")]
        assert by_message.count("m-1") == 1 and by_message.count("m-2") == 1, by_message

        # the plugin: send through the front door prints the reply; logs follow a message
        sent = kubectl_berth(
            dc,
            "send",
            "inbox",
            "question three",
            "-n",
            ns,
            "--gateway",
            gateway,
            "--message-id",
            "m-3",
            "--wait-seconds",
            "240",
        )
        assert sent.returncode == 0, sent.stdout + sent.stderr
        assert "answer three" in sent.stdout, sent.stdout
        shown = kubectl_berth(
            dc, "logs", "inbox", "-n", ns, "--gateway", gateway, "--message", "m-3"
        )
        assert shown.returncode == 0, shown.stderr
        assert "[done] answer three" in shown.stdout, shown.stdout
        lineage = session(dc, ns, "inbox")["status"]["runs"]
        assert any("idle_reaper" in (r.get("reason") or "") for r in lineage), lineage


ASKER_SCRIPT: dict[str, Any] = {
    "turns": [
        {"tool_calls": [{"name": "call_peer", "arguments": {"session": "asker", "prompt": "hi"}}]},
        {
            "tool_calls": [
                {"name": "call_peer", "arguments": {"session": "answerer", "prompt": "6 x 7?"}}
            ]
        },
        {"text": "done asking"},
    ],
    "cursor": "history",
}

ANSWERER_SCRIPT: dict[str, Any] = {
    "turns": [
        {"text": "ready"},
        {
            "tool_calls": [
                {"name": "call_peer", "arguments": {"session": "asker", "prompt": "why?"}}
            ]
        },
        {"text": "the answer is 42"},
    ],
    "cursor": "history",
    "on_exhausted": "repeat_last",
}


def tool_outputs(requests: list[dict[str, Any]]) -> list[str]:
    """The tool results the model was shown, in the order it first saw them."""
    seen: list[str] = []
    for req in requests:
        for m in req["messages"]:
            if m.get("role") == "tool" and str(m.get("content")) not in seen:
                seen.append(str(m.get("content")))
    return seen


def test_peer_asks_a_peer_at_rest_and_a_loop_is_refused(dev_cluster: DevCluster) -> None:
    dc = dev_cluster
    _, env = gateway_env()
    with (
        dc.namespace("peer") as ns,
        scripted_model(ASKER_SCRIPT) as asker_llm,
        scripted_model(ANSWERER_SCRIPT) as answerer_llm,
        operator(dc, ns, **env),
    ):
        answerer = keep_alive_session(
            "answerer",
            answerer_llm.base_url,
            "be ready",
            keepAlive=True,
            idle={"afterSeconds": IDLE_AFTER_SECONDS},
            peers={"names": ["asker"]},
        )
        apply(dc, ns, [SECRET, answerer])
        wait("answerer at rest", lambda: at_rest(dc, ns, "answerer"), cap=300)
        asker = keep_alive_session(
            "asker",
            asker_llm.base_url,
            "ask your peer",
            keepAlive=True,
            identity={"tenantId": "acme", "correlationId": "corr-a"},
            peers={"selector": {"matchLabels": {"team": "qa"}}, "names": ["answerer"]},
        )
        asker["metadata"]["labels"] = {"team": "asking"}
        apply(dc, ns, [asker])

        def asked() -> list[str] | None:
            outs = tool_outputs(asker_llm.requests)
            return outs if len(outs) >= 2 else None

        outs = wait("asker got both tool results", asked, cap=400)
        assert f"spec.peers of {ns}/asker does not allow calling {ns}/asker" in outs[0], outs
        assert outs[1] == "the answer is 42", outs  # the peer's answer is the tool result
        # the answerer's own call back to the asker was a loop, and its model was told so
        loop = tool_outputs(answerer_llm.requests)
        assert len(loop) == 1 and "loop" in loop[0], loop
        assert f"{ns}/asker → {ns}/answerer → {ns}/asker" in loop[0], loop

        runs = [r for r in stored_runs(dc, ns, "answerer") if r.get("invoked_by")]
        assert len(runs) == 1, runs
        assert runs[0]["invoked_by"] == {
            "from_session_id": f"{ns}/asker",
            "from_tenant_id": "acme",
            "correlation_id": "corr-a",
        }
        events = dc.kubectl(
            "-n", ns, "get", "events", "--field-selector", "reason=PeerInvocation", "-o", "json"
        )
        messages = [e["message"] for e in json.loads(events.stdout)["items"]]
        assert any(m.startswith(f"asked peer {ns}/answerer") for m in messages), messages
        assert any(m.startswith(f"asked by peer {ns}/asker") for m in messages), messages
