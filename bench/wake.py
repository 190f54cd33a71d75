"""Benchmark: wake latency through the front door — a session at rest (cold, and adopted from a
warm pool) against a running session's reply latency, in one run.

Setup (real pieces, as in tests/e2e/test_front_door.py): the dev cluster's real nodes,
``berth-operator`` as a subprocess serving the front door, the scripted model over HTTP. Three
keepAlive AgentSessions: ``hot`` (no idle passivation: its pod stays), ``cold``
(``spec.idle.afterSeconds`` = 3: at rest between messages, woken by placing a pod) and ``warm``
(the same, with ``warmPoolRef`` to a SessionWarmPool of 2 pre-started pods: woken by adoption).

Each sample POSTs a message to ``/v1/sessions/<ns>/<name>/messages`` (the session's API token;
no CLI start in the figure) and measures:

- *first token*: POST sent → the model receives the session's chat request for it (the
  scripted model's first token follows after its own constant delay), read by polling the
  in-process server's request log every 5 ms;
- *reply*: POST sent → the front door reports the message done (``GET ...?waitSeconds``).

Prints the medians, p90 and each sample, and each at-rest row over the running one. Nothing is
asserted.

    .venv/bin/python bench/wake.py           # 5 samples each (BERTH_BENCH_N to change)
"""

from __future__ import annotations

import os
import statistics
import sys
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "operator")]

from tests.cluster import DevCluster  # noqa: E402
from tests.e2e.passivation_support import apply, condition, pods, status, wait  # noqa: E402
from tests.e2e.test_front_door import (  # noqa: E402
    at_rest,
    call,
    gateway_env,
    keep_alive_session,
    token_of,
)
from tests.integration.operator.harness import SECRET, operator, scripted_model  # noqa: E402

N = int(os.environ.get("BERTH_BENCH_N", "5"))
IDLE_AFTER_SECONDS = 3
SCRIPT: dict[str, Any] = {"turns": [{"text": "ok"}], "on_exhausted": "repeat_last"}
LLM_REF = {"name": "llm-credentials", "key": "api-key"}


def pool(base_url: str, placement: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": "berth.dev/v1alpha1",
        "kind": "SessionWarmPool",
        "metadata": {"name": "pool"},
        "spec": {
            "replicas": 2,
            "template": {
                "llm": {"baseURL": base_url, "apiKeySecretRef": LLM_REF},
                "placement": placement,
            },
        },
    }


def running(dc: DevCluster, ns: str, name: str) -> bool:
    st = status(dc, ns, name)
    return (
        st.get("phase") == "Running"
        and condition(st, "Running").get("status") == "True"
        and bool(pods(dc, ns, name))
    )


def ready_warm_pods(dc: DevCluster, ns: str) -> int:
    out = dc.kubectl(
        "-n",
        ns,
        "get",
        "pods",
        "-l",
        "berth.dev/warm-pool=pool",
        "-o",
        "jsonpath={range .items[*]}{.status.conditions[?(@.type=='Ready')].status}{' '}{end}",
    )
    return out.stdout.split().count("True")


def sample(gateway: str, ns: str, name: str, token: str, srv: Any, i: int) -> tuple[float, float]:
    """(first token, reply) seconds for one message."""
    prompt = f"sample {i} for {name}"
    base = f"{gateway}/v1/sessions/{ns}/{name}/messages"
    seen = len(srv.requests)
    started = time.monotonic()
    answer: dict[str, Any] = {}

    def post() -> None:
        answer["status"], answer["body"] = call(f"{base}?waitSeconds=0", token, {"prompt": prompt})

    poster = threading.Thread(target=post)
    poster.start()
    first = None
    while first is None:
        for req in list(srv.requests)[seen:]:
            if prompt in str(req["messages"][-1].get("content")):
                first = time.monotonic() - started
        if time.monotonic() - started > 600:
            raise RuntimeError(f"{name}: no model request after 600 s")
        time.sleep(0.005)
    poster.join()
    if answer.get("status") != 202:
        raise RuntimeError(f"{name}: the front door refused the message: {answer}")
    mid = answer["body"]["messageId"]
    status_, done = call(f"{base}/{mid}?waitSeconds=120", token, timeout=150)
    if done.get("state") != "done":
        raise RuntimeError(f"{name}: message {mid} ended {status_} {done}")
    return first, time.monotonic() - started


def row(label: str, xs: list[float], base: float | None) -> str:
    med = statistics.median(xs)
    p90 = sorted(xs)[max(0, round(0.9 * len(xs)) - 1)]
    ratio = f"  ({med / base:.1f}x running)" if base else ""
    return (
        f"  {label:<22} median {med:6.2f} s  p90 {p90:6.2f} s{ratio}  {[round(x, 2) for x in xs]}"
    )


def main() -> int:
    dc = DevCluster.ensure()
    results: dict[str, list[tuple[float, float]]] = {"hot": [], "cold": [], "warm": []}
    gateway, env = gateway_env()
    with (
        dc.namespace("bench-wake") as ns,
        scripted_model(SCRIPT) as srv,
        operator(dc, ns, **env),
    ):
        hot = keep_alive_session("hot", srv.base_url, "hello (hot)", keepAlive=True)
        placement = hot["spec"]["placement"]
        idle = {"idle": {"afterSeconds": IDLE_AFTER_SECONDS}}
        cold = keep_alive_session("cold", srv.base_url, "hello (cold)", keepAlive=True, **idle)
        warm = keep_alive_session(
            "warm",
            srv.base_url,
            "hello (warm)",
            keepAlive=True,
            warmPoolRef={"name": "pool"},
            **idle,
        )
        apply(dc, ns, [SECRET, pool(srv.base_url, placement), hot, cold, warm])
        tokens = {}
        for name in results:
            wait(
                f"{name}'s first prompt answered",
                lambda n=name: any(f"({n})" in str(r["messages"]) for r in srv.requests),
                cap=300,
            )
            tokens[name] = token_of(dc, ns, name)
        wait("hot running", lambda: running(dc, ns, "hot"), cap=300)
        print(f"[wake] {N} samples per case through the front door at {gateway}", flush=True)
        for i in range(N):
            time.sleep(1.0)  # the previous reply has finished: the pod is idle again
            results["hot"].append(sample(gateway, ns, "hot", tokens["hot"], srv, i))
        for name in ("cold", "warm"):
            for i in range(N):
                wait(f"{name} at rest", lambda n=name: at_rest(dc, ns, n), cap=300)
                if name == "warm":
                    wait("2 ready warm pods", lambda: ready_warm_pods(dc, ns) >= 2, cap=300)
                results[name].append(sample(gateway, ns, name, tokens[name], srv, i))
                print(f"[wake] {name} sample {i}: {results[name][-1][0]:.2f} s", flush=True)
    base_first = statistics.median(x for x, _ in results["hot"])
    base_reply = statistics.median(y for _, y in results["hot"])
    print(f"\nwake latency through the front door, {N} samples each")
    print("message → first token (the model receives the session's request):")
    for name, label in (
        ("hot", "running"),
        ("cold", "at rest, cold"),
        ("warm", "at rest, warm pool"),
    ):
        xs = [x for x, _ in results[name]]
        print(row(label, xs, None if name == "hot" else base_first))
    print("message → reply (the front door reports it done):")
    for name, label in (
        ("hot", "running"),
        ("cold", "at rest, cold"),
        ("warm", "at rest, warm pool"),
    ):
        ys = [y for _, y in results[name]]
        print(row(label, ys, None if name == "hot" else base_reply))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
