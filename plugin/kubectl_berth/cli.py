"""The console script ``kubectl-berth`` (``kubectl berth ...``): the Typer app and its commands.

Commands::

    kubectl berth status NAME [-o json|yaml]  phase, conditions, runs and usage (describe-style)
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
    kubectl berth import NAME --from-a3s F    an a3s-code-core 9.x checkpoint as a new session
                                              that resumes its run (:mod:`.a3s_import`)
    kubectl berth ui [--port N] [-n NS | -A]  a local web view of sessions, runs and workers
        [--trace-url-template URL] [--grafana-url URL]  (links from a session to both)
    kubectl berth version                     the plugin's version
    kubectl berth --install-completion        shell completion (bash, zsh, fish, PowerShell)

Every command reads the cluster with the caller's kubeconfig (:mod:`kubectl_berth.client`), so
RBAC applies as for kubectl; the session pod is reached through the apiserver's pod proxy
(:mod:`kubectl_berth.session_api`). Help texts are plain text: Typer shows them as written.
"""

from __future__ import annotations

import shutil
import time
from datetime import UTC, datetime
from typing import Annotated

import typer
import yaml
from berth_operator.api.constants import ANNOTATION_WAKE_REQUESTED_AT
from berth_operator.errors import BerthOperatorError
from rich.console import Console

from kubectl_berth import __version__
from kubectl_berth.a3s_import import import_command
from kubectl_berth.client import PluginClient, connect
from kubectl_berth.errors import PluginError
from kubectl_berth.front_door import gateway_message_url, message_events, send_through_gateway
from kubectl_berth.session_api import (
    call_session,
    describe,
    passivate_body,
    send_waking,
    session_log,
    wake_stamp,
)
from kubectl_berth.views import events_table, status_text

app = typer.Typer(
    name="kubectl-berth",
    help="Inspect and drive Berth AgentSessions.",
    no_args_is_help=True,
    add_completion=True,
    # Help as click writes it: paragraphs re-wrapped to the terminal, words never cut.
    rich_markup_mode=None,
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


def _client(kubeconfig: str | None, context: str | None, namespace: str | None) -> PluginClient:
    return connect(kubeconfig=kubeconfig, context=context, namespace=namespace)


def _fail(message: str) -> typer.Exit:
    err.print(f"[bold red]error:[/] {message}", highlight=False)
    return typer.Exit(code=1)


@app.command()
def status(
    name: Annotated[str, typer.Argument(help="AgentSession name.")],
    namespace: NamespaceOpt = None,
    kubeconfig: KubeconfigOpt = None,
    context: ContextOpt = None,
    output: Annotated[
        str,
        typer.Option(
            "--output",
            "-o",
            help="table (default: one field a line, as kubectl describe), or json or yaml "
            "(the raw status, for scripts).",
        ),
    ] = "table",
) -> None:
    """Show a session's phase, conditions, runs and token usage.

    One field a line, as kubectl describe prints an object: long values wrap, none is cut.
    """
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
        width = shutil.get_terminal_size((80, 24)).columns
        typer.echo(status_text(body, datetime.now(UTC), width), nl=False)
    except (BerthOperatorError, PluginError) as exc:
        raise _fail(str(exc)) from exc


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
    """Send another prompt to a keepAlive session.

    A session at rest is woken first. With --gateway the front door queues it durably,
    delivers it once and prints the reply.
    """
    try:
        api = _client(kubeconfig, context, namespace)
        if gateway:
            reply = send_through_gateway(api, gateway, name, prompt, message_id, wait_seconds)
            out.print(reply, highlight=False)
            return
        body = api.get_session(name)
        if not (body.get("spec") or {}).get("keepAlive"):
            raise PluginError(f"session {name} is not keepAlive: `send` needs spec.keepAlive: true")
        code, answer = send_waking(api, name, body, prompt, endpoint, wait_seconds)
        if code >= 300:
            raise PluginError(f"session pod refused the prompt: {describe(code, answer)}")
        out.print(f"prompt accepted by {name} (HTTP {code})", highlight=False)
    except (BerthOperatorError, PluginError) as exc:
        raise _fail(str(exc)) from exc


@app.command()
def wake(
    name: Annotated[str, typer.Argument(help="AgentSession name.")],
    namespace: NamespaceOpt = None,
    kubeconfig: KubeconfigOpt = None,
    context: ContextOpt = None,
) -> None:
    """Wake a session at rest (idle passivation).

    It resumes on a new pod and waits for messages.
    """
    try:
        api = _client(kubeconfig, context, namespace)
        api.annotate(name, ANNOTATION_WAKE_REQUESTED_AT, wake_stamp())
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
    """Ask the session pod to checkpoint and exit (reason manual).

    The operator resumes it on a new pod.
    """
    try:
        api = _client(kubeconfig, context, namespace)
        body = api.get_session(name)
        now_ms = int(time.time() * 1000)
        payload = passivate_body(body, deadline_seconds, now_ms)
        code, answer = call_session(api, name, body, "/v1/passivate", payload, endpoint)
        if code >= 300:
            raise PluginError(f"session pod refused to passivate: {describe(code, answer)}")
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
    """Suspend a session: passivate it and keep it at rest.

    It passivates at a safe point and stays at rest while spec.suspend is true.
    """
    _set_suspend(name, True, namespace, kubeconfig, context)


@app.command()
def resume(
    name: Annotated[str, typer.Argument(help="AgentSession name.")],
    namespace: NamespaceOpt = None,
    kubeconfig: KubeconfigOpt = None,
    context: ContextOpt = None,
) -> None:
    """Resume a suspended session from its last checkpoint.

    Sets spec.suspend to false.
    """
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
    """Print the session's logs (its current pod).

    With -f, keep streaming and continue with each new pod (epoch) until the session is
    Succeeded or Failed. With --message ID and --gateway, stream that message's states and its
    run's events from the front door.
    """
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


@app.command()
def version() -> None:
    """Print the plugin's version."""
    typer.echo(f"kubectl-berth {__version__}")


@app.command()
def ui(
    port: Annotated[
        int, typer.Option("--port", min=0, max=65535, help="Local port (0: a free one).")
    ] = 8765,
    namespace: NamespaceOpt = None,
    all_namespaces: Annotated[
        bool, typer.Option("--all-namespaces", "-A", help="Show every namespace's sessions.")
    ] = False,
    trace_url_template: Annotated[
        str | None,
        typer.Option(
            "--trace-url-template",
            envvar="BERTH_UI_TRACE_URL_TEMPLATE",
            help="Link each session to its trace: a URL in which {namespace}, {name}, {session} "
            "(namespace/name), {uid}, {runId} and {correlationId} are replaced. Default: no link.",
        ),
    ] = None,
    grafana_url: Annotated[
        str | None,
        typer.Option(
            "--grafana-url",
            envvar="BERTH_UI_GRAFANA_URL",
            help="Link each session to this Grafana dashboard URL (var-namespace is added unless "
            "the URL uses the placeholders above). Default: no link.",
        ),
    ] = None,
    kubeconfig: KubeconfigOpt = None,
    context: ContextOpt = None,
) -> None:
    """Serve a web view of sessions, runs and workers on 127.0.0.1.

    It reads the cluster with your kubeconfig, so RBAC applies as for kubectl; actions show
    only where you may take them, each behind a confirmation.
    """
    try:
        from kubectl_berth.ui.links import Links
        from kubectl_berth.ui.serve import run
    except ImportError as exc:
        raise _fail(
            f"the ui needs aiohttp, jinja2 and leather (install kubectl-berth): {exc}"
        ) from exc
    if all_namespaces and namespace:
        raise _fail("give either --namespace or --all-namespaces")
    try:
        links = Links(trace_url_template, grafana_url)
        api = _client(kubeconfig, context, namespace)
        run(api, None if all_namespaces else api.namespace, port, links)
    except (BerthOperatorError, PluginError, OSError) as exc:
        raise _fail(str(exc)) from exc


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

    The operator creates its Lease itself, so helm uninstall would leave it behind; and a
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


app.command("import")(import_command)


def main() -> None:
    """Console-script entry point (``kubectl-berth``)."""
    app()
