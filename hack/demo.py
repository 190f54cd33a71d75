"""The main job end to end: an agent fixes a real bug in a real project on a cluster.

Run by ``make demo`` (through hack/demo.sh, after ``make cluster-up``) and by the e2e test
``tests/e2e/test_demo.py``. Steps, each printed as it happens:

1. Berth is installed with Helm from ``charts/berth`` (the operator runs as pods on a real node).
2. The workspace on the shared volume gets the sdist of ``inflection`` 0.5.1 from PyPI with the bug
   of ``examples/demo/inflection-ordinal-bug.patch`` applied (``ordinal()`` tests ``% 10`` where it
   must test ``% 100``, so 11/12/13 get "st"/"nd"/"rd").
3. The LLM: a real OpenAI-compatible one when ``OPENAI_API_KEY`` is set (``OPENAI_BASE_URL`` and
   ``BERTH_DEMO_MODEL`` optional), else the scripted local model replaying
   ``examples/demo/conversation.json``. A LaneWorker (``minReplicas: 0``) serves the execute lane.
4. The AgentSession asks the agent to run the tests, find the failure and fix it. Once its first
   tool round is durable, node A (where the session runs) is drained with ``kubectl drain``: the
   session passivates and resumes on node B.
5. The report: conditions and lineage, tokens, tool calls by lane, worker replicas over time,
   passivation and resume latency, and the project's test suite run in the workspace. The exit
   code is 0 only if every check holds.

Pods are containers on the dev cluster's real nodes; "the shared volume" is a hostPath
PersistentVolume, so the driver seeds and inspects the workspace through that host directory.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import threading
import time
import urllib.parse
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from berth_operator.builders.claim import build_shared_claim
from berth_operator.settings import OperatorSettings, SharedClaimSettings

ROOT = Path(__file__).resolve().parent.parent
DEV = Path(os.environ.get("BERTH_DEV_DIR", ROOT / ".berth" / "dev"))
NS = os.environ.get("BERTH_DEMO_NAMESPACE", "berth-demo")
POD_UID = 10001  # the image's user, which Berth's pods run as
SESSION = "fix-inflection"
LANEWORKER = "demo-exec"
#: The Helm release is named after the namespace, so its cluster-scoped objects (ClusterRoles,
#: bindings) never collide with another install or with config/rbac applied by hand or by tests.
RELEASE = NS if "berth" in NS else f"berth-{NS}"
PROJECT = ("inflection", "0.5.1")
PROMPT = (
    "The project in your workspace is the Python package `inflection`. Run its test suite with "
    "`python -m pytest -q test_inflection.py`, find the cause of the failure in the package's "
    "code (not in the tests), fix it with a minimal edit, and run the whole suite again to show "
    "that it passes. Reply with a short explanation of the bug and the fix."
)
T0 = time.monotonic()


def say(msg: str) -> None:
    """Print one progress line with the time since the demo started."""
    print(f"[demo +{time.monotonic() - T0:6.1f}s] {msg}", flush=True)


def load_env() -> dict[str, str]:
    """``os.environ`` plus ``.berth/dev/env`` (written by hack/cluster-up.sh)."""
    env = dict(os.environ)
    for line in (DEV / "env").read_text().splitlines():
        if line.startswith("export "):
            key, _, value = line[7:].partition("=")
            env[key] = value.strip('"').replace("$PATH", os.environ.get("PATH", ""))
    return env


ENV: dict[str, str] = {}


def sh(*args: str, check: bool = True, input: str | None = None, timeout: float = 300) -> str:
    """Run a command with the dev-cluster env; return stdout; raise with stderr on failure."""
    proc = subprocess.run(
        args, env=ENV, input=input, capture_output=True, text=True, timeout=timeout, check=False
    )
    if check and proc.returncode != 0:
        raise RuntimeError(f"{' '.join(args)} failed ({proc.returncode}):\n{proc.stderr}")
    return proc.stdout


def kubectl_json(*args: str) -> dict[str, Any]:
    out: dict[str, Any] = json.loads(sh("kubectl", *args, "-o", "json"))
    return out


def wait(what: str, predicate: Any, timeout: float, interval: float = 1.0) -> Any:
    """Poll ``predicate`` until truthy; raise TimeoutError naming ``what``."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            value = predicate()
        except (RuntimeError, json.JSONDecodeError, KeyError):
            value = None
        if value:
            return value
        time.sleep(interval)
    raise TimeoutError(f"timed out after {timeout:.0f}s waiting for {what}")


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


# --- steps ---------------------------------------------------------------------------------------


def install_berth(node_b: str) -> None:
    """Helm-install the chart with the dev values; operator pods pinned to node B."""
    values = DEV / "values.yaml"
    if not values.exists():
        sh("bash", str(ROOT / "hack" / "dev-values.sh"))
    wait(
        f"namespace {NS} left by an earlier run to finish terminating",
        lambda: "Terminating" not in sh("kubectl", "get", "namespace", NS, "-o",
                                        "jsonpath={.status.phase}", check=False),
        180,
    )  # fmt: skip
    sh("kubectl", "create", "namespace", NS, check=False)
    say(f"helm install {RELEASE} charts/berth (namespace {NS}, operator pods on {node_b})")
    sh(
        "helm", "upgrade", "--install", RELEASE, str(ROOT / "charts" / "berth"),
        "-n", NS, "-f", str(values),
        "--set-json", f'operator.nodeSelector={{"kubernetes.io/hostname":"{node_b}"}}',
        "--set", f"operator.watchNamespaces={{{NS}}}",
        "--wait", "--timeout", "180s",
    )  # fmt: skip
    pods = kubectl_json("get", "pods", "-n", NS, "-l", "app.kubernetes.io/component=operator")
    for pod in pods["items"]:
        say(f"  operator pod {pod['metadata']['name']} on {pod['spec'].get('nodeName')}")


def shared_claim_dir() -> Path:
    """Host directory of the volume behind the namespace's claim berth-shared. The demo seeds a
    workspace before the session exists, so the claim is created here when missing, with the
    operator's own body (class berth-shared: the dev cluster's provisioner, which makes its
    volumes as directories on this machine); the operator sets it up as a claim it manages."""
    if sh("kubectl", "-n", NS, "get", "pvc", "berth-shared", check=False) == "":
        claims = SharedClaimSettings(storage_class="berth-shared")
        body = build_shared_claim(NS, "berth-shared", OperatorSettings(claims=claims))
        sh("kubectl", "create", "-f", "-", input=json.dumps(body), check=False)
    pv = wait(
        f"claim {NS}/berth-shared bound",
        lambda: sh("kubectl", "-n", NS, "get", "pvc", "berth-shared", "-o",
                   "jsonpath={.spec.volumeName}", check=False),
        180,
    )  # fmt: skip
    spec = kubectl_json("get", "pv", pv)["spec"]
    return Path((spec.get("hostPath") or spec.get("local"))["path"])


def remove_previous_run() -> None:
    """Delete a session left by an earlier demo run. Its store is kept (the default): the new
    object's prompt starts a new run in the kept conversation (store.incarnation)."""
    sh("kubectl", "-n", NS, "delete", "agentsession", SESSION, "--ignore-not-found",
       "--wait=true", "--timeout=120s")  # fmt: skip


def seed_workspace(claim_dir: Path) -> Path:
    """Download the project's sdist from PyPI, unpack it, apply the bug patch; return the dir."""
    name, version = PROJECT
    workspace = claim_dir / "workspaces" / NS / SESSION
    if workspace.exists():
        shutil.rmtree(workspace)
    workspace.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        say(f"downloading the sdist of {name}=={version} from PyPI")
        subprocess.run(
            [sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--no-binary", ":all:",
             f"{name}=={version}", "-d", tmp],
            check=True,
        )  # fmt: skip
        archive = next(Path(tmp).glob(f"{name}-{version}.tar.gz"))
        with tarfile.open(archive) as tar:
            tar.extractall(tmp, filter="data")
        shutil.copytree(Path(tmp) / f"{name}-{version}", workspace)
    patch = ROOT / "examples" / "demo" / "inflection-ordinal-bug.patch"
    subprocess.run(["patch", "-s", "-p1", "-i", str(patch)], cwd=workspace, check=True)
    # The pods run as uid/gid 10001 (the image's user): hand them the workspace, as a user would
    # by copying it in from a pod.
    for p in [workspace.parent, workspace, *workspace.rglob("*")]:
        os.chown(p, POD_UID, POD_UID, follow_symlinks=False)
    failing = project_tests(workspace)
    say(f"workspace seeded with the bug; its test suite now says: {failing['summary']}")
    return workspace


def project_tests(workspace: Path) -> dict[str, Any]:
    """Run the project's own test suite in the workspace; return rc and pytest's summary line."""
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "test_inflection.py"],
        cwd=workspace, capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    lines = [ln for ln in proc.stdout.splitlines() if ln.strip()]
    return {"rc": proc.returncode, "summary": lines[-1] if lines else proc.stderr[-200:]}


def start_model() -> tuple[str, str, subprocess.Popen[bytes] | None]:
    """Return (base_url, model, process): a real endpoint from env, else the scripted model."""
    if os.environ.get("OPENAI_API_KEY"):
        base = os.environ.get("OPENAI_BASE_URL", "https://api.openai.com/v1")
        model = os.environ.get("BERTH_DEMO_MODEL", "openai/gpt-4o-mini")
        say(f"LLM: real endpoint {base}, model {model}")
        return base, model, None
    host = ENV.get("BERTH_HOST_IP", "127.0.0.1")  # where pods can reach this machine
    port = free_port()
    script = ROOT / "examples" / "demo" / "conversation.json"
    log = open(DEV / "demo-model.log", "ab")  # noqa: SIM115 - owned by the child process
    proc = subprocess.Popen(
        [sys.executable, "-m", "session_runtime.llm.scripted", "--script", str(script),
         "--host", host, "--port", str(port)],
        stdout=log, stderr=log, cwd=ROOT,
    )  # fmt: skip
    base = f"http://{host}:{port}/v1"
    wait("the scripted model", lambda: _http_ok(f"{base}/models"), 30, 0.2)
    say(f"LLM: scripted local model replaying {script.relative_to(ROOT)} at {base}")
    return base, "openai/scripted-demo", proc


def _http_ok(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2) as resp:
            return bool(resp.status == 200)
    except OSError:
        return False


def apply_session(base_url: str, model: str) -> None:
    key = os.environ.get("OPENAI_API_KEY", "sk-scripted-demo")
    manifests = [
        {
            "apiVersion": "v1", "kind": "Secret",
            "metadata": {"name": "demo-llm", "namespace": NS,
                         "labels": {"berth.dev/llm-credentials": "true"}},
            "stringData": {"api-key": key},
        },
        {
            "apiVersion": "berth.dev/v1alpha1", "kind": "LaneWorker",
            "metadata": {"name": LANEWORKER, "namespace": NS},
            "spec": {
                "lane": "execute", "concurrency": 2, "minReplicas": 0, "maxReplicas": 3,
                "taskTimeoutSeconds": 120,
                "scaling": {
                    "targetTasksPerReplica": 1, "pollingIntervalSeconds": 1,
                    "scaleDownStabilizationSeconds": 15, "source": "broker",
                },
            },
        },
        {
            "apiVersion": "berth.dev/v1alpha1", "kind": "AgentSession",
            "metadata": {"name": SESSION, "namespace": NS,
                         "annotations": {"berth.dev/delete-store": "true"}},
            "spec": {
                "prompt": PROMPT, "model": model,
                "llm": {"baseURL": base_url,
                        "apiKeySecretRef": {"name": "demo-llm", "key": "api-key"}},
                "identity": {"tenantId": "demo", "principal": "make-demo",
                             "correlationId": "issue-10"},
                "limits": {"maxToolRounds": 30, "toolTimeoutSeconds": 120},
                "lanes": {"execute": {"mode": "external",
                                      "laneWorkerRef": {"name": LANEWORKER},
                                      "timeoutSeconds": 120}},
                "passivation": {"deadlineSeconds": 60},
            },
        },
    ]  # fmt: skip
    sh("kubectl", "apply", "-f", "-", input="\n---\n".join(json.dumps(m) for m in manifests))
    say(f"applied Secret demo-llm, LaneWorker {LANEWORKER} (minReplicas 0), AgentSession {SESSION}")


@dataclass
class Timeline:
    """LaneWorker replicas sampled once a second while the demo runs."""

    samples: list[tuple[float, int, int]] = field(default_factory=list)
    stop: threading.Event = field(default_factory=threading.Event)

    def run(self) -> None:
        while not self.stop.is_set():
            try:
                lw = kubectl_json("get", "laneworker", LANEWORKER, "-n", NS)
                st = lw.get("status", {})
                self.samples.append(
                    (time.monotonic() - T0, int(st.get("replicas") or 0),
                     int(st.get("desiredReplicas") or 0))
                )  # fmt: skip
            except (RuntimeError, json.JSONDecodeError):
                pass
            self.stop.wait(1.0)

    def changes(self) -> list[tuple[float, int, int]]:
        out: list[tuple[float, int, int]] = []
        for s in self.samples:
            if not out or out[-1][1:] != s[1:]:
                out.append(s)
        return out


def session_status() -> dict[str, Any]:
    status: dict[str, Any] = kubectl_json("get", "agentsession", SESSION, "-n", NS).get(
        "status", {}
    )
    return status


def drain_when_first_round_is_durable() -> dict[str, Any]:
    st = wait(
        "the session's first durable tool round",
        lambda: (s := session_status()).get("checkpoint", {}).get("turn", 0) >= 1 and s,
        300,
    )
    node_a = st["nodeName"]
    inside = container_facts(st["podName"])
    say(f"session running on {node_a} (pod {st['podName']}, run {st.get('runId')}); "
        f"checkpoint at turn {st['checkpoint']['turn']}: draining {node_a}")  # fmt: skip
    t = time.monotonic()
    out = sh("kubectl", "drain", node_a, "--ignore-daemonsets", "--delete-emptydir-data",
             "--timeout=240s", timeout=300)  # fmt: skip
    drain_s = time.monotonic() - t
    say(f"kubectl drain {node_a} completed in {drain_s:.1f}s ({len(out.splitlines())} lines)")
    return {"node": node_a, "drain_seconds": drain_s, "inside": inside}


def container_facts(pod: str) -> dict[str, str]:
    """What the session container itself sees (kubectl exec): its uid, whether its root
    filesystem takes a write, and its effective capabilities."""
    probe = ("id -u; if touch /.berth-probe 2>/dev/null; then echo writable; else echo read-only; "
             "fi; grep CapEff /proc/self/status | cut -f2")  # fmt: skip
    out = sh("kubectl", "-n", NS, "exec", pod, "--", "sh", "-c", probe, check=False).split()
    keys = ("uid", "rootfs", "capEff")
    return dict(zip(keys, out, strict=False)) if len(out) == 3 else {"error": " ".join(out)}


def prom_query(expr: str) -> list[dict[str, Any]]:
    url = ENV.get("PROMETHEUS_URL")
    if not url:
        return []
    q = urllib.parse.urlencode({"query": expr})
    try:
        with urllib.request.urlopen(f"{url}/api/v1/query?{q}", timeout=5) as resp:
            result: list[dict[str, Any]] = json.load(resp)["data"]["result"]
            return result
    except OSError:
        return []


def tool_calls_by_lane(workspace: Path, run_id: str) -> dict[str, int]:
    """Count the tool calls of the final checkpoint's messages by lane (A3S tool → lane map).

    Read from the session store on the shared volume (a loader never claims the lease). Exact,
    unlike the pods' Prometheus counters, which can miss a pod's last increments before it exits.
    """
    from session_runtime.store import FileSessionStore
    from session_runtime.tools.base import lane_for_tool

    store_root = workspace.parents[2] / "store" / NS
    checkpoint = FileSessionStore(str(store_root), epoch=2**31 - 1).load_checkpoint(SESSION, run_id)
    messages = list(checkpoint.messages) if checkpoint else []
    # The run starts at its prompt (the last user message): a kept conversation holds earlier runs.
    starts = [i for i, m in enumerate(messages) if m.get("role") == "user"]
    counts: dict[str, int] = {}
    for message in messages[starts[-1] if starts else 0 :]:
        for call in message.get("tool_calls") or []:
            lane = lane_for_tool(call["function"]["name"])
            counts[lane] = counts.get(lane, 0) + 1
    return counts


def trace_summary() -> str:
    """``trace <id>: <N> spans from <M> services (<names>)`` and a link to it in Jaeger's UI, for
    the demo session's trace with the most spans (Jaeger's query API, ``/api/traces``, searched
    by the runs' ``gen_ai.conversation.id``); a line saying why not when the dev cluster has no
    Jaeger (hack/jaeger.sh) or it holds no trace of the session yet (spans are exported in
    batches: a few seconds are allowed)."""
    jaeger = ENV.get("JAEGER_URL", "")
    if not jaeger:
        return "trace: none (no Jaeger in the dev cluster: BERTH_DEV_JAEGER=1, hack/jaeger.sh)"
    query = urllib.parse.urlencode(
        {
            "service": "berth-session",
            "tags": json.dumps({"gen_ai.conversation.id": SESSION}),
            "lookback": "1h",
            "limit": "20",
        }
    )
    traces: list[dict[str, Any]] = []
    for _ in range(15):
        try:
            with urllib.request.urlopen(f"{jaeger}/api/traces?{query}", timeout=10) as resp:
                traces = json.load(resp).get("data") or []
        except (OSError, ValueError) as exc:
            return f"trace: n/a (Jaeger's query API at {jaeger}: {exc})"
        if traces:
            break
        time.sleep(1)
    if not traces:
        return f"trace: none found in Jaeger ({jaeger}) for session {SESSION}"
    best = max(traces, key=lambda t: len(t.get("spans") or []))
    tid = best["traceID"]
    try:  # the search result may hold only the spans that matched: read the whole trace
        with urllib.request.urlopen(f"{jaeger}/api/traces/{tid}", timeout=10) as resp:
            best = (json.load(resp).get("data") or [best])[0]
    except (OSError, ValueError):
        pass
    services = sorted({p.get("serviceName", "?") for p in (best.get("processes") or {}).values()})
    spans = len(best.get("spans") or [])
    return (
        f"trace {tid}: {spans} spans from {len(services)} services ({', '.join(services)})\n"
        f"  open it: {jaeger}/trace/{tid}"
    )


def report(drain: dict[str, Any], timeline: Timeline, workspace: Path) -> bool:
    st = session_status()
    runs = st.get("runs") or []
    conds = {c["type"]: c for c in st.get("conditions", [])}
    tests = project_tests(workspace)
    by_lane = tool_calls_by_lane(workspace, runs[-1]["runId"] if runs else "")
    window = f"{int(time.monotonic() - T0) + 30}s"  # this demo run only

    def mean(metric: str) -> list[dict[str, Any]]:
        """Mean over this run's window; the all-time mean when the window has too few samples."""
        sel = f'{{namespace="{NS}"}}'
        recent = prom_query(
            f"sum(increase({metric}_sum{sel}[{window}]))"
            f" / sum(increase({metric}_count{sel}[{window}]))"
        )
        if recent and recent[0]["value"][1] not in ("NaN", "+Inf"):
            return recent
        return prom_query(f"sum({metric}_sum{sel}) / sum({metric}_count{sel})")

    pas = mean("berth_operator_passivation_seconds")
    res = mean("berth_operator_resume_seconds")
    print("\n================ Berth demo report ================")
    print(f"session {NS}/{SESSION}: phase {st.get('phase')}, epoch {st.get('epoch')}")
    print("conditions:")
    for c in st.get("conditions", []):
        reason, message = c.get("reason", ""), c.get("message", "")[:70]
        print(f"  {c['type']:<16} {c['status']:<6} {reason:<22} {message}")
    print("lineage:")
    for r in runs:
        print(f"  {r.get('runId')} from={r.get('resumedFrom') or '-'} node={r.get('nodeName')} "
              f"outcome={r.get('outcome')} reason={r.get('reason') or '-'}")  # fmt: skip
    usage = st.get("usage") or {}
    print(f"tokens: prompt {usage.get('promptTokens')}, completion {usage.get('completionTokens')},"
          f" total {usage.get('totalTokens')}")  # fmt: skip
    print(f"tool calls by lane (final checkpoint): {by_lane}")
    print("worker replicas over time (t, replicas, desired):")
    for t, rep, des in timeline.changes():
        print(f"  +{t:6.1f}s  {rep}  {des}")
    pas_s = f"{float(pas[0]['value'][1]):.2f}s" if pas else "n/a"
    res_s = f"{float(res[0]['value'][1]):.2f}s" if res else "n/a"
    drain_s = drain["drain_seconds"]
    print(f"passivation latency {pas_s}, resume latency {res_s}, drain {drain_s:.1f}s")
    inside = drain["inside"]
    print(f"inside the session container (kubectl exec): uid {inside.get('uid')}, root filesystem "
          f"{inside.get('rootfs')}, effective capabilities {inside.get('capEff')}")  # fmt: skip
    print(f"project tests in the workspace: {tests['summary']} (rc {tests['rc']})")
    print(f"result: {((st.get('result') or {}).get('text') or '')[:300]}")
    print(trace_summary())

    replicas = [s[1] for s in timeline.samples]
    checks = {
        "session Succeeded with Completed=True": st.get("phase") == "Succeeded"
        and conds.get("Completed", {}).get("status") == "True",
        "two runs in the lineage": len(runs) >= 2,
        "a passivation with reason node_drain": any(
            r.get("outcome") == "passivated" and "node_drain" in (r.get("reason") or "")
            for r in runs
        ),
        "resumed on another node": len({r.get("nodeName") for r in runs}) >= 2
        and runs[-1].get("nodeName") != drain["node"],
        "tokens were counted": int(usage.get("totalTokens") or 0) > 0,
        "bash/edit ran on the execute lane, reads on the query lane": by_lane.get("execute", 0) > 0
        and by_lane.get("query", 0) > 0,
        "the LaneWorker scaled up from zero": bool(replicas) and max(replicas) >= 1,
        "the LaneWorker is back at zero": bool(replicas) and replicas[-1] == 0,
        "the project's tests pass after the fix": tests["rc"] == 0,
        "the session container runs as a non-root uid": inside.get("uid", "0").isdigit()
        and inside.get("uid") != "0",
        "the session container's root filesystem is read-only": inside.get("rootfs") == "read-only",
    }
    print("checks:")
    for name, ok in checks.items():
        print(f"  [{'ok' if ok else 'FAIL'}] {name}")
    print("====================================================")
    return all(checks.values())


def main() -> int:
    global ENV
    ENV = load_env()
    nodes = ENV.get("BERTH_NODES", "").split()
    if len(nodes) < 2:
        raise SystemExit("the demo needs two real nodes (BERTH_NODES)")
    node_a, node_b = nodes[0], nodes[1]
    sh("kubectl", "uncordon", node_a, node_b, check=False)
    install_berth(node_b)
    claim_dir = shared_claim_dir()
    remove_previous_run()
    workspace = seed_workspace(claim_dir)
    base_url, model, model_proc = start_model()
    timeline = Timeline()
    sampler = threading.Thread(target=timeline.run, daemon=True)
    try:
        # The session's first pod goes to node A: keep node B cordoned until it is placed.
        sh("kubectl", "cordon", node_b)
        apply_session(base_url, model)
        sampler.start()
        wait("the session pod to be placed", lambda: session_status().get("nodeName"), 120)
        sh("kubectl", "uncordon", node_b)
        drain = drain_when_first_round_is_durable()
        say("waiting for the resumed run to finish")
        wait("the session to succeed",
             lambda: session_status().get("phase") in ("Succeeded", "Failed"), 600)  # fmt: skip
        say(f"session phase {session_status().get('phase')}; waiting for the LaneWorker to "
            "scale back to zero")  # fmt: skip
        try:
            wait("LaneWorker at zero replicas",
                 lambda: timeline.samples and timeline.samples[-1][1] == 0, 120)  # fmt: skip
        except TimeoutError as exc:
            say(str(exc))
        time.sleep(6)  # one more Prometheus scrape of the last counters
    finally:
        timeline.stop.set()
        sh("kubectl", "uncordon", node_a, node_b, check=False)
        if model_proc is not None:
            model_proc.terminate()
    ok = report(drain, timeline, workspace)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
