"""``kubectl-berth``: the kubectl plugin for AgentSessions (console script ``kubectl-berth``).

Commands::

    kubectl berth status NAME [-o json|yaml]  conditions, run lineage and usage as tables
    kubectl berth send NAME "prompt"          another prompt for a keepAlive session (wakes it
                                              first when it is at rest); with --gateway URL
                                              through the front door: queued durably, delivered
                                              once, the reply printed
    kubectl berth wake NAME                   wake a session at rest (idle passivation)
    kubectl berth passivate NAME              ask the session pod to checkpoint and exit
    kubectl berth suspend NAME | resume NAME  set spec.suspend (passivate and keep it at rest)
    kubectl berth logs NAME [-f]              the session's logs, following it across pods
    kubectl berth logs NAME --message ID      a front door message's states and run events
    kubectl berth events NAME                 the session's Events, oldest first
    kubectl berth version                     the plugin's version
    kubectl berth --install-completion        shell completion (bash, zsh, fish, PowerShell)

``status`` reads the AgentSession through the Kubernetes API (``berth_operator.k8s.plugin_client``,
the caller's kubeconfig). ``send`` and ``passivate`` talk to the session pod's HTTP API
(docs/architecture.md §5): ``POST /v1/messages {prompt}`` and ``POST /v1/passivate {reason:
"manual", deadlineMs}``, through the apiserver's pod proxy
(``/api/v1/namespaces/<ns>/pods/<status.podName>:8080/proxy/v1/...``), authenticated with the
session's API token read from its Secret ``<name>-berth`` and sent as ``X-Berth-Token``. The
operator notices the passivated pod and resumes it (or keeps it passivated when ``spec.suspend``
is true). ``--endpoint`` takes a base URL to call directly instead (e.g. a ``kubectl
port-forward``); the token is sent there too.

This module does not import kopf and does not call the Kubernetes API itself.
"""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from datetime import UTC, datetime
from typing import Annotated, Any

import typer
import yaml
from pydantic import ValidationError
from rich.console import Console
from rich.table import Table

from berth_contract.state import API_TOKEN_HEADER, HTTP_PORT
from berth_operator import __version__
from berth_operator.api.agentsession import AgentSessionStatus
from berth_operator.api.constants import (
    ANNOTATION_WAKE_REQUESTED_AT,
    SESSION_CONTAINER,
)
from berth_operator.errors import BerthOperatorError, RuntimeUnreachable
from berth_operator.k8s.plugin_client import PluginClient, connect

DEFAULT_DEADLINE_SECONDS = 120
"""Passivation deadline when neither ``--deadline-seconds`` nor spec.passivation sets one."""
HTTP_TIMEOUT_SECONDS = 10.0
"""How long ``send``/``passivate`` wait for the session pod to answer."""
WAKE_POLL_SECONDS = 0.5
"""How often ``send`` looks at a waking session."""

app = typer.Typer(
    name="kubectl-berth",
    help="Inspect and drive Berth AgentSessions.",
    no_args_is_help=True,
    add_completion=True,
)
out = Console()
err = Console(stderr=True)

NamespaceOpt = Annotated[
    str | None, typer.Option("--namespace", "-n", help="Namespace (default: the context's).")
]
KubeconfigOpt = Annotated[
    str | None, typer.Option("--kubeconfig", help="Path to the kubeconfig file.")
]
ContextOpt = Annotated[str | None, typer.Option("--context", help="Kubeconfig context to use.")]
EndpointOpt = Annotated[
    str | None,
    typer.Option(
        "--endpoint",
        help="Base URL of the session pod's API to call directly (default: through the "
        "apiserver's pod proxy).",
    ),
]


GatewayOpt = Annotated[
    str | None,
    typer.Option(
        "--gateway",
        envvar="BERTH_GATEWAY_URL",
        help="Base URL of Berth's front door (e.g. a port-forward of the <operator>-gateway "
        "Service); default: talk to the session pod directly.",
    ),
]


class PluginError(Exception):
    """A user-facing failure: printed as ``error: <message>`` with exit code 1."""


# --- pure helpers (unit-tested) -------------------------------------------------------------


def age(ts: datetime | None, now: datetime) -> str:
    """kubectl-style age (``45s``, ``12m``, ``3h``, ``2d``) of ``ts`` at ``now``; ``-`` if none."""
    if ts is None:
        return "-"
    seconds = max(0, int((now - ts).total_seconds()))
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{seconds // size}{unit}"
    return f"{seconds}s"


def parse_status(body: dict[str, Any]) -> AgentSessionStatus:
    """The AgentSession's status as the operator's model. Raises PluginError when malformed."""
    try:
        return AgentSessionStatus.model_validate(body.get("status") or {})
    except ValidationError as exc:
        raise PluginError(f"unexpected AgentSession status: {exc}") from exc


def status_tables(body: dict[str, Any], now: datetime) -> list[Table]:
    """Summary, conditions, lineage and usage tables of one AgentSession object (and the last
    error, when there is one)."""
    meta = body.get("metadata") or {}
    spec = body.get("spec") or {}
    st = parse_status(body)
    title = f"AgentSession {meta.get('namespace', '')}/{meta.get('name', '')}"
    tables = [
        _summary(title, st, spec),
        _conditions(st, now),
        _lineage(st, now),
        _usage(st, spec),
    ]
    if st.last_error:
        errors = Table(title="Last error")
        errors.add_column("Message")
        errors.add_row(st.last_error)
        tables.append(errors)
    return tables


def _summary(title: str, st: AgentSessionStatus, spec: dict[str, Any]) -> Table:
    summary = Table(title=title)
    cols = ("Phase", "Pod", "Node", "Epoch", "Run", "Turn", "Passivations", "KeepAlive", "At rest")
    for col in cols:
        summary.add_column(col)
    summary.add_row(
        st.phase or "-",
        st.pod_name or "-",
        st.node_name or "-",
        "-" if st.epoch is None else str(st.epoch),
        st.run_id or "-",
        "-" if st.checkpoint is None or st.checkpoint.turn is None else str(st.checkpoint.turn),
        str(st.passivations or 0),
        "yes" if spec.get("keepAlive") else "no",
        "-" if st.at_rest_since is None else "since " + st.at_rest_since.isoformat(),
    )
    if st.image:  # the current pod's session image (an upgrade migrates it)
        summary.caption = f"image {st.image}"
    return summary


def _conditions(st: AgentSessionStatus, now: datetime) -> Table:
    conditions = Table(title="Conditions")
    for col in ("Type", "Status", "Reason", "Age", "Message"):
        conditions.add_column(col)
    for c in st.conditions or []:
        conditions.add_row(
            c.type, c.status, c.reason, age(c.last_transition_time, now), c.message or ""
        )
    return conditions


def _lineage(st: AgentSessionStatus, now: datetime) -> Table:
    lineage = Table(title="Runs (oldest first)")
    for col in ("Run", "Resumed from", "Pod", "Node", "Started", "Ended", "Outcome", "Reason"):
        lineage.add_column(col)
    for r in st.runs or []:
        lineage.add_row(
            r.run_id,
            r.resumed_from or "-",
            r.pod_name or "-",
            r.node_name or "-",
            age(r.started_at, now),
            age(r.ended_at, now),
            r.outcome,
            r.reason or "",
        )
    return lineage


def _usage(st: AgentSessionStatus, spec: dict[str, Any]) -> Table:
    usage = Table(title="Usage")
    for col in ("Prompt tokens", "Completion tokens", "Total tokens", "Budget", "Tool calls"):
        usage.add_column(col, justify="right")
    u = st.usage
    budget = (spec.get("budget") or {}).get("maxTotalTokens")
    tool_calls = st.checkpoint.tool_calls_count if st.checkpoint else None
    usage.add_row(
        str(u.prompt_tokens if u else 0),
        str(u.completion_tokens if u else 0),
        str(u.total_tokens if u else 0),
        "-" if budget is None else str(budget),
        "-" if tool_calls is None else str(tool_calls),
    )
    return usage


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
    return {"reason": "manual", "deadlineMs": now_ms + deadline_seconds * 1000}


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


# --- commands ---------------------------------------------------------------------------------


def _client(kubeconfig: str | None, context: str | None, namespace: str | None) -> PluginClient:
    return connect(kubeconfig=kubeconfig, context=context, namespace=namespace)


def _fail(message: str) -> typer.Exit:
    err.print(f"[bold red]error:[/] {message}", highlight=False)
    return typer.Exit(code=1)


def _call_session(
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


def _describe(status: int, answer: Any) -> str:
    if isinstance(answer, dict):
        return str(answer.get("error") or answer.get("message") or json.dumps(answer))
    return f"HTTP {status}: {answer}"


@app.command()
def status(
    name: Annotated[str, typer.Argument(help="AgentSession name.")],
    namespace: NamespaceOpt = None,
    kubeconfig: KubeconfigOpt = None,
    context: ContextOpt = None,
    output: Annotated[
        str,
        typer.Option("--output", "-o", help="table (default), json or yaml (the raw status)."),
    ] = "table",
) -> None:
    """Show conditions, run lineage and token usage of an AgentSession."""
    try:
        body = _client(kubeconfig, context, namespace).get_session(name)
        if output == "json":
            out.print_json(data=body.get("status") or {})
            return
        if output == "yaml":
            typer.echo(yaml.safe_dump(body.get("status") or {}, sort_keys=False), nl=False)
            return
        if output != "table":
            raise PluginError(f"unknown output format {output!r}; use table, json or yaml")
        for table in status_tables(body, datetime.now(UTC)):
            out.print(table)
    except (BerthOperatorError, PluginError) as exc:
        raise _fail(str(exc)) from exc


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


def _send_through_gateway(
    api: PluginClient,
    gateway: str,
    name: str,
    prompt: str,
    message_id: str | None,
    wait_seconds: float,
) -> None:
    payload: dict[str, Any] = {"prompt": prompt}
    if message_id:
        payload["messageId"] = message_id
    url = gateway_message_url(gateway, api.namespace, name) + f"?waitSeconds={wait_seconds:g}"
    code, answer = post_json(url, payload, api.session_token(name), timeout=wait_seconds + 15)
    if code >= 300 or not isinstance(answer, dict):
        raise PluginError(f"the front door refused the message: {_describe(code, answer)}")
    if answer.get("state") == "failed":
        raise PluginError(describe_message(answer))
    out.print(describe_message(answer), highlight=False)


@app.command()
def send(
    name: Annotated[str, typer.Argument(help="AgentSession name (must have spec.keepAlive).")],
    prompt: Annotated[str, typer.Argument(help="The next prompt for the session.")],
    namespace: NamespaceOpt = None,
    kubeconfig: KubeconfigOpt = None,
    context: ContextOpt = None,
    endpoint: EndpointOpt = None,
    gateway: GatewayOpt = None,
    message_id: Annotated[
        str | None,
        typer.Option(
            "--message-id", help="Idempotency key (front door): the same id is delivered once."
        ),
    ] = None,
    wait_seconds: Annotated[
        float,
        typer.Option(
            "--wait-seconds",
            min=1,
            help="How long to wait for a session at rest to wake (with --gateway: for the reply).",
        ),
    ] = 300.0,
) -> None:
    """Send another prompt to a keepAlive session; a session at rest is woken first. With
    ``--gateway`` the front door queues it durably, delivers it once and prints the reply."""
    try:
        api = _client(kubeconfig, context, namespace)
        if gateway:
            _send_through_gateway(api, gateway, name, prompt, message_id, wait_seconds)
            return
        body = api.get_session(name)
        if not (body.get("spec") or {}).get("keepAlive"):
            raise PluginError(f"session {name} is not keepAlive: `send` needs spec.keepAlive: true")
        code, answer = _send_waking(api, name, body, prompt, endpoint, wait_seconds)
        if code >= 300:
            raise PluginError(f"session pod refused the prompt: {_describe(code, answer)}")
        out.print(f"prompt accepted by {name} (HTTP {code})", highlight=False)
    except (BerthOperatorError, PluginError) as exc:
        raise _fail(str(exc)) from exc


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


def _wake_stamp() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds")


def _send_waking(
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
            body = api.annotate(name, ANNOTATION_WAKE_REQUESTED_AT, _wake_stamp())
        st = parse_status(body)
        code, answer = 0, "no pod yet"
        if st.phase == "Running" and st.pod_ip and st.pod_name:
            try:
                code, answer = _call_session(
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


@app.command()
def wake(
    name: Annotated[str, typer.Argument(help="AgentSession name.")],
    namespace: NamespaceOpt = None,
    kubeconfig: KubeconfigOpt = None,
    context: ContextOpt = None,
) -> None:
    """Wake a session at rest (idle passivation): it resumes on a new pod and waits for
    messages."""
    try:
        api = _client(kubeconfig, context, namespace)
        api.annotate(name, ANNOTATION_WAKE_REQUESTED_AT, _wake_stamp())
    except BerthOperatorError as exc:
        raise _fail(str(exc)) from exc
    out.print(f"agentsession {api.namespace}/{name} asked to wake", highlight=False)


@app.command()
def passivate(
    name: Annotated[str, typer.Argument(help="AgentSession name.")],
    namespace: NamespaceOpt = None,
    kubeconfig: KubeconfigOpt = None,
    context: ContextOpt = None,
    endpoint: EndpointOpt = None,
    deadline_seconds: Annotated[
        int | None,
        typer.Option(
            "--deadline-seconds",
            min=1,
            help="Grace window for running tools (default spec.passivation.deadlineSeconds "
            "or 120).",
        ),
    ] = None,
) -> None:
    """Ask the session pod to checkpoint and exit (reason manual); the operator resumes it."""
    try:
        api = _client(kubeconfig, context, namespace)
        body = api.get_session(name)
        now_ms = int(time.time() * 1000)
        payload = passivate_body(body, deadline_seconds, now_ms)
        code, answer = _call_session(api, name, body, "/v1/passivate", payload, endpoint)
        if code >= 300:
            raise PluginError(f"session pod refused to passivate: {_describe(code, answer)}")
        out.print(
            f"passivation of {name} requested (deadline in "
            f"{(payload['deadlineMs'] - now_ms) // 1000}s, "
            f"HTTP {code})",
            highlight=False,
        )
    except (BerthOperatorError, PluginError) as exc:
        raise _fail(str(exc)) from exc


@app.command()
def suspend(
    name: Annotated[str, typer.Argument(help="AgentSession name.")],
    namespace: NamespaceOpt = None,
    kubeconfig: KubeconfigOpt = None,
    context: ContextOpt = None,
) -> None:
    """Suspend a session: it passivates at a safe point and stays at rest (spec.suspend)."""
    _set_suspend(name, True, namespace, kubeconfig, context)


@app.command()
def resume(
    name: Annotated[str, typer.Argument(help="AgentSession name.")],
    namespace: NamespaceOpt = None,
    kubeconfig: KubeconfigOpt = None,
    context: ContextOpt = None,
) -> None:
    """Resume a suspended session from its last checkpoint (spec.suspend false)."""
    _set_suspend(name, False, namespace, kubeconfig, context)


def _set_suspend(
    name: str, value: bool, namespace: str | None, kubeconfig: str | None, context: str | None
) -> None:
    try:
        api = _client(kubeconfig, context, namespace)
        api.set_suspend(name, value)
    except BerthOperatorError as exc:
        raise _fail(str(exc)) from exc
    verb = "suspended (it passivates, then stays at rest)" if value else "resumed"
    out.print(f"agentsession {api.namespace}/{name} {verb}", highlight=False)


@app.command()
def events(
    name: Annotated[str, typer.Argument(help="AgentSession name.")],
    namespace: NamespaceOpt = None,
    kubeconfig: KubeconfigOpt = None,
    context: ContextOpt = None,
) -> None:
    """List the Events of an AgentSession, oldest first."""
    try:
        items = _client(kubeconfig, context, namespace).events_of("AgentSession", name)
    except BerthOperatorError as exc:
        raise _fail(str(exc)) from exc
    out.print(events_table(items, datetime.now(UTC)))


@app.command()
def logs(
    name: Annotated[str, typer.Argument(help="AgentSession name.")],
    follow: Annotated[
        bool, typer.Option("--follow", "-f", help="Stream, following the session across pods.")
    ] = False,
    message: Annotated[
        str | None, typer.Option("--message", help="A front door message id to follow.")
    ] = None,
    gateway: GatewayOpt = None,
    namespace: NamespaceOpt = None,
    kubeconfig: KubeconfigOpt = None,
    context: ContextOpt = None,
) -> None:
    """Print the session's logs (its current pod). With ``-f``, keep streaming and continue with
    each new pod (epoch) until the session is Succeeded or Failed. With ``--message ID`` and
    ``--gateway``: stream that message's states and its run's events from the front door."""
    try:
        api = _client(kubeconfig, context, namespace)
        if message:
            if not gateway:
                raise PluginError("--message needs --gateway (or BERTH_GATEWAY_URL)")
            url = gateway_message_url(gateway, api.namespace, name, message) + "/events"
            for line in message_events(url, api.session_token(name)):
                typer.echo(line)
            return
        for line in session_log(api, name, follow):
            typer.echo(line, nl=False)
    except (BerthOperatorError, PluginError) as exc:
        raise _fail(str(exc)) from exc


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


def message_events(url: str, token: str) -> Any:
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


def session_log(api: PluginClient, name: str, follow: bool) -> Any:
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


def events_table(items: list[dict[str, Any]], now: datetime) -> Table:
    """Events as a table: LAST SEEN, TYPE, REASON, COUNT, MESSAGE (like kubectl events)."""
    table = Table("LAST SEEN", "TYPE", "REASON", "COUNT", "MESSAGE", box=None)
    for e in items:
        seen = e.get("lastTimestamp") or e.get("eventTime") or e.get("firstTimestamp")
        when = datetime.fromisoformat(str(seen).replace("Z", "+00:00")) if seen else None
        table.add_row(
            age(when, now),
            str(e.get("type") or ""),
            str(e.get("reason") or ""),
            str(e.get("count") or 1),
            str(e.get("message") or ""),
        )
    return table


@app.command()
def version() -> None:
    """Print the plugin's version (the berth-operator distribution's)."""
    typer.echo(f"kubectl-berth {__version__}")


@app.command("cleanup-lease", hidden=True)
def cleanup_lease(
    lease: Annotated[str, typer.Option("--lease", help="Name of the leader-election Lease.")],
    selector: Annotated[str, typer.Option("--selector", help="Label selector of operator pods.")],
    namespace: NamespaceOpt = None,
    kubeconfig: KubeconfigOpt = None,
    context: ContextOpt = None,
    timeout_seconds: Annotated[int, typer.Option("--timeout-seconds", min=1)] = 300,
) -> None:
    """Internal (the chart's post-delete hook): once no operator pod is left, delete the Lease.

    The operator creates its Lease itself, so ``helm uninstall`` would leave it behind; and a
    leader still shutting down could re-create it, hence the wait for the pods first.
    """
    try:
        api = _client(kubeconfig, context, namespace)
        deadline = time.monotonic() + timeout_seconds
        while (left := api.count_pods(selector)) > 0:
            if time.monotonic() > deadline:
                raise PluginError(f"{left} operator pod(s) still there after {timeout_seconds}s")
            time.sleep(1)
        deleted = api.delete_lease(lease)
        out.print(
            f"lease {api.namespace}/{lease} {'deleted' if deleted else 'already gone'}",
            highlight=False,
        )
    except (BerthOperatorError, PluginError) as exc:
        raise _fail(str(exc)) from exc


def main() -> None:
    """Console-script entry point (``kubectl-berth``)."""
    app()
