"""``kubectl berth ui`` in a real browser (Debian's Chromium driven by Selenium) on the dev cluster.

Real pieces: the control plane, ``berth-operator`` (with its eviction webhook) and session pods
on the two real nodes, ``kubectl drain``, the scripted model (see test_passivation.py), and the
``kubectl-berth`` console script started as a user starts it, with an admin kubeconfig and with
one bound only to the ``view`` ClusterRole.

Asserted, during a session drained from node A onto node B: the session page shows run 1 on node A
passivated with reason ``node_drain``, run 2 on node B and tool calls on the execute lane, updated
live (no reload); a new Event of the session shows on the open page within 2 s; a ``view``-only
user sees the pages but no action; a cross-site POST from another origin is refused and changes
nothing. Screenshots of the three pages go to docs/ (docs/ui.md shows them). Printed figures: time
from starting ``kubectl berth ui`` to the first page rendered, page weight, live-update delay.
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.cluster import ROOT, DevCluster
from tests.e2e.passivation_support import (
    PrivateNodes,
    apply,
    delete_webhook_configurations,
    drain,
    operator_env,
    private_nodes,
    session_doc,
    status,
    step_script,
    wait,
    webhook_env,
)
from tests.e2e.test_passivation import place_on_a
from tests.integration.operator.harness import (
    SECRET,
    free_port,
    operator,
    scripted_model,
    token_kubeconfig,
)

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(600)]

CHROMIUM = Path("/usr/bin/chromium")
CHROMEDRIVER = Path("/usr/bin/chromedriver")
ROUNDS = 30
"""About 15 s of run: still mid-run when the drain starts (test_passivation.py's reasoning)."""
DOCS = ROOT / "docs"
VIEW_ROLE = "berth-ui-e2e-view"


@contextmanager
def ui(dc: DevCluster, namespace: str, kubeconfig: str) -> Iterator[tuple[str, float]]:
    """``kubectl-berth ui --port 0 -n NAMESPACE`` as a user starts it; (its URL, the time it
    was started, ``time.monotonic``)."""
    started = time.monotonic()
    proc = subprocess.Popen(
        [str(Path(sys.executable).parent / "kubectl-berth"), "ui", "--port", "0", "-n", namespace],
        env={**dc.proc_env, "KUBECONFIG": kubeconfig},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        assert "http://127.0.0.1:" in line, line + (proc.stderr.read() if proc.stderr else "")
        yield line.split("http://", 1)[1].split("/", 1)[0], started
    finally:
        proc.terminate()
        proc.wait(10)


@contextmanager
def browser() -> Iterator[Any]:
    """Headless Chromium (Debian's, with its chromedriver: hack/host-packages.sh) via Selenium."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    assert CHROMIUM.exists() and CHROMEDRIVER.exists(), "run hack/host-packages.sh (chromium)"
    opts = webdriver.ChromeOptions()
    opts.binary_location = str(CHROMIUM)
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--window-size=1200,1000"):
        opts.add_argument(arg)
    driver = webdriver.Chrome(service=Service(str(CHROMEDRIVER)), options=opts)
    try:
        yield driver
    finally:
        driver.quit()


def text_of(driver: Any, element_id: str) -> str:
    found: str = driver.execute_script(
        "var e = document.getElementById(arguments[0]); return e ? e.innerText : '';", element_id
    )
    return found


def html_of(driver: Any, element_id: str) -> str:
    found: str = driver.execute_script(
        "var e = document.getElementById(arguments[0]); return e ? e.innerHTML : '';", element_id
    )
    return found


def view_kubeconfig(dc: DevCluster, namespace: str, directory: Path) -> Path:
    """A kubeconfig of a ServiceAccount bound only to ``view`` in ``namespace`` (with Berth's
    kinds aggregated into ``view``, as the chart's ``<release>-view`` ClusterRole does)."""
    dc.apply(
        [
            {
                "apiVersion": "rbac.authorization.k8s.io/v1",
                "kind": "ClusterRole",
                "metadata": {
                    "name": VIEW_ROLE,
                    "labels": {"rbac.authorization.k8s.io/aggregate-to-view": "true"},
                },
                "rules": [
                    {
                        "apiGroups": ["berth.dev"],
                        "resources": ["agentsessions", "laneworkers"],
                        "verbs": ["get", "list", "watch"],
                    }
                ],
            }
        ]
    )
    dc.kubectl("-n", namespace, "create", "serviceaccount", "viewer")
    dc.kubectl(
        "-n", namespace, "create", "rolebinding", "viewer", "--clusterrole=view",
        f"--serviceaccount={namespace}:viewer",
    )  # fmt: skip
    token = dc.kubectl("-n", namespace, "create", "token", "viewer").stdout.strip()
    return token_kubeconfig(dc, "viewer", token, directory / "viewer.kubeconfig")


@contextmanager
def forging_site(target: str) -> Iterator[str]:
    """Another origin (a second local server) whose page auto-submits a POST to ``target``."""
    page = (
        f'<form id="f" method="post" action="{target}"><input name="csrf" value="forged">'
        "</form><script>document.getElementById('f').submit()</script>"
    ).encode()

    class Evil(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(200)
            self.send_header("Content-Type", "text/html")
            self.send_header("Content-Length", str(len(page)))
            self.end_headers()
            self.wfile.write(page)

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", free_port()), Evil)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/"
    finally:
        server.shutdown()
        server.server_close()


def record_event(dc: DevCluster, namespace: str, name: str, reason: str) -> None:
    """A new core/v1 Event of the session, as a controller records one."""
    uid = dc.kubectl("-n", namespace, "get", "agentsession", name, "-o", "jsonpath={.metadata.uid}")
    now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    event = {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"name": f"{name}.{reason.lower()}", "namespace": namespace},
        "involvedObject": {
            "apiVersion": "berth.dev/v1alpha1",
            "kind": "AgentSession",
            "name": name,
            "namespace": namespace,
            "uid": uid.stdout.strip(),
        },
        "reason": reason,
        "message": f"{reason}: recorded by the browser test",
        "type": "Normal",
        "count": 1,
        "firstTimestamp": now,
        "lastTimestamp": now,
        "source": {"component": "berth-ui-e2e"},
    }
    dc.kubectl("-n", namespace, "create", "-f", "-", input=json.dumps(event))


def runs_on_page(driver: Any) -> list[tuple[str, str]]:
    """(node, reason) of each run row of the open session page, oldest first."""
    rows: list[list[str]] = driver.execute_script(
        "return Array.from(document.querySelectorAll('#runs-table tr[data-run]'))"
        ".map(function (r) { return [r.dataset.node, r.dataset.reason]; });"
    )
    return [(node, reason) for node, reason in rows]


def page_weight(driver: Any) -> int:
    """Bytes the browser transferred for the open page (navigation and resources)."""
    total: int = driver.execute_script(
        "return performance.getEntriesByType('navigation').concat("
        "performance.getEntriesByType('resource'))"
        ".reduce(function (s, e) { return s + (e.transferSize || e.encodedBodySize || 0); }, 0);"
    )
    return total


@pytest.fixture
def nodes(dev_cluster: DevCluster) -> Iterator[PrivateNodes]:
    with private_nodes(dev_cluster) as n:
        yield n
    delete_webhook_configurations(dev_cluster, "berth-eviction-pz-")
    dev_cluster.kubectl("delete", "clusterrole", VIEW_ROLE, check=False)


def test_ui_shows_a_drained_session_live_and_guards_its_actions(
    dev_cluster: DevCluster, nodes: PrivateNodes, tmp_path: Path
) -> None:
    dc, name = dev_cluster, "ui-demo"
    with (
        dc.namespace("pz-ui") as ns,
        scripted_model(step_script(ROUNDS)) as srv,
        operator(dc, ns, **operator_env(**webhook_env(dc, ns, tmp_path / "certs"))),
        browser() as driver,
        ui(dc, ns, dc.proc_env.get("KUBECONFIG", "")) as (admin_host, started),
    ):
        worker = next(yaml.safe_load_all((ROOT / "examples/laneworker.yaml").read_text()))
        apply(dc, ns, [SECRET, worker])
        driver.get(f"http://{admin_host}/sessions")
        wait("the sessions page", lambda: driver.find_elements("id", "sessions"), cap=30)
        print(f"\nkubectl berth ui to the first page rendered: {time.monotonic() - started:.2f}s")

        place_on_a(dc, ns, nodes, [session_doc(name, srv.base_url, nodes, 60)])
        driver.get(f"http://{admin_host}/sessions/{ns}/{name}")
        wait("the session page live", lambda: driver.find_elements("id", "runs-table"), cap=30)
        weight = page_weight(driver)
        print(f"session page weight: {weight / 1024:.1f} KiB")

        # a forged cross-site POST (another origin's auto-submitting form) is refused
        with forging_site(f"http://{admin_host}/sessions/{ns}/{name}/passivate") as evil:
            driver.get(evil)
            wait("the refusal", lambda: "cross-site request refused" in driver.page_source)
        driver.get(f"http://{admin_host}/sessions/{ns}/{name}")
        assert "Passivate…" in driver.page_source  # the admin may act

        res, seconds = drain(dc, nodes.a)
        assert res.returncode == 0, res.stderr
        print(f"kubectl drain {nodes.a}: {seconds:.1f}s")

        def drained_on_page() -> bool:
            rows = runs_on_page(driver)
            return (
                len(rows) >= 2
                and rows[0][0] == nodes.a
                and "node_drain" in rows[0][1]
                and rows[1][0] == nodes.b
            )

        wait("run 1 on A (node_drain) and run 2 on B, live", drained_on_page, cap=240)
        wait(
            "tool calls on the execute lane",
            lambda: 'data-lane="execute"' in html_of(driver, "calls"),
        )
        st = status(dc, ns, name)
        reasons = [r.get("reason") or "" for r in st["runs"] if r.get("outcome") == "passivated"]
        assert len(reasons) == 1 and "node_drain" in reasons[0], st["runs"]  # none by the forgery

        record_event(dc, ns, name, "UiProbe")
        recorded = time.monotonic()
        wait(
            "the new Event on the open page",
            lambda: "UiProbe" in text_of(driver, "events"),
            cap=2.0,
            every=0.05,
        )
        print(f"live-update delay (Event recorded to shown): {time.monotonic() - recorded:.2f}s")

        driver.save_screenshot(str(DOCS / "ui-session.png"))
        driver.get(f"http://{admin_host}/sessions")
        driver.save_screenshot(str(DOCS / "ui-sessions.png"))
        driver.get(f"http://{admin_host}/workers/{ns}/exec")
        wait("the worker page", lambda: driver.find_elements("id", "worker"), cap=30)
        time.sleep(2)  # a few samples for the chart
        driver.save_screenshot(str(DOCS / "ui-worker.png"))

        viewer = view_kubeconfig(dc, ns, tmp_path)
        with ui(dc, ns, str(viewer)) as (view_host, _):
            driver.get(f"http://{view_host}/sessions/{ns}/{name}")
            wait("the session page for a viewer", lambda: driver.find_elements("id", "runs-table"))
            assert "node_drain" in text_of(driver, "runs")
            actions = text_of(driver, "actions")
            for label in ("Send", "Passivate", "Suspend", "Resume"):
                assert label not in actions, actions
            driver.get(f"http://{view_host}/sessions/{ns}/{name}/passivate")
            assert "not allowed" in driver.page_source
