"""Benchmark: wake latency of a session at rest vs the reply latency of a running session.

Setup (real pieces, as in tests/e2e/test_idle.py): the dev cluster's real nodes, ``berth-operator``
as a subprocess, two keepAlive AgentSessions against the scripted model: ``hot`` (no idle
passivation: its pod stays) and ``cold`` (``spec.idle.afterSeconds`` = 3: it goes to rest between
messages). Each message is sent the way a user sends it, ``kubectl-berth send`` (the console
script, through the apiserver's pod proxy; for ``cold`` it first asks the session to wake and waits
for its new pod). The latency is from starting ``kubectl-berth send`` to the model receiving the
session's chat request (the first token follows after the model's own, constant, delay), read by
polling the in-process scripted server's request log every 5 ms.

Prints the median and each sample for both, and cold / hot. A warm pool (pre-started pods) is not
part of this branch; its row says so. Nothing is asserted.

    .venv/bin/python bench/wake.py           # 5 samples each (BERTH_BENCH_N to change)
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "operator")]

from tests.cluster import DevCluster  # noqa: E402
from tests.e2e.passivation_support import (  # noqa: E402
    REAL_NODE_LABEL,
    apply,
    condition,
    operator_env,
    pods,
    status,
    wait,
)
from tests.integration.operator.harness import SECRET, operator, scripted_model  # noqa: E402

N = int(os.environ.get("BERTH_BENCH_N", "5"))
SCRIPT: dict[str, Any] = {"turns": [{"text": "ok"}], "on_exhausted": "repeat_last"}


def doc(name: str, base_url: str, idle_after: int | None) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "prompt": f"hello ({name})",
        "model": "openai/gpt-4o-mini",
        "llm": {
            "baseURL": base_url,
            "apiKeySecretRef": {"name": "llm-credentials", "key": "api-key"},
        },
        "keepAlive": True,
        "placement": {"nodeSelector": {REAL_NODE_LABEL: "real"}},
    }
    if idle_after is not None:
        spec["idle"] = {"afterSeconds": idle_after}
    return {
        "apiVersion": "berth.dev/v1alpha1",
        "kind": "AgentSession",
        "metadata": {"name": name},
        "spec": spec,
    }


def send_and_time(dc: DevCluster, ns: str, name: str, srv: Any) -> float:
    """Seconds from starting ``kubectl-berth send`` to the model receiving the chat request."""
    before = len(srv.requests)
    started = time.monotonic()
    proc = subprocess.Popen(
        [str(Path(sys.executable).parent / "kubectl-berth"), "send", name, "next", "-n", ns],
        env=dc.proc_env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    while len(srv.requests) == before:
        if proc.poll() not in (None, 0):
            raise RuntimeError(f"send failed: {proc.stderr.read() if proc.stderr else ''}")
        if time.monotonic() - started > 600:
            raise RuntimeError("no model request after 600 s")
        time.sleep(0.005)
    took = time.monotonic() - started
    proc.wait(timeout=120)
    return took


def cli_start(dc: DevCluster) -> float:
    """Seconds for ``kubectl-berth version``: the console script's own start, in both rows."""
    started = time.monotonic()
    subprocess.run(
        [str(Path(sys.executable).parent / "kubectl-berth"), "version"],
        env=dc.proc_env,
        capture_output=True,
        check=True,
    )
    return time.monotonic() - started


def idle_pod(dc: DevCluster, ns: str, name: str) -> bool:
    st = status(dc, ns, name)
    cond = condition(st, "Running")
    return (
        st.get("phase") == "Running" and cond.get("status") == "True" and bool(pods(dc, ns, name))
    )


def at_rest(dc: DevCluster, ns: str, name: str) -> bool:
    st = status(dc, ns, name)
    return (
        bool(st.get("atRestSince")) and st.get("phase") == "Passivated" and not pods(dc, ns, name)
    )


def main() -> int:
    dc = DevCluster.ensure()
    hot: list[float] = []
    cold: list[float] = []
    with (
        dc.namespace("bench-wake", shared_pvc=True) as ns,
        scripted_model(SCRIPT) as srv,
        operator(dc, ns, **operator_env()),
    ):
        apply(dc, ns, [SECRET, doc("hot", srv.base_url, None), doc("cold", srv.base_url, 3)])
        wait("hot running", lambda: idle_pod(dc, ns, "hot"), cap=300)
        wait(
            "hot's first prompt answered",
            lambda: any("(hot)" in str(r["messages"]) for r in srv.requests),
            cap=300,
        )
        for _ in range(N):
            time.sleep(1.0)  # let the previous reply finish: the pod is idle again
            hot.append(send_and_time(dc, ns, "hot", srv))
        for _ in range(N):
            wait("cold at rest", lambda: at_rest(dc, ns, "cold"), cap=300)
            cold.append(send_and_time(dc, ns, "cold", srv))
    cli = statistics.median(cli_start(dc) for _ in range(N))
    med_hot, med_cold = statistics.median(hot), statistics.median(cold)
    print(f"wake latency (kubectl-berth send -> model request), {N} samples each")
    print(f"  running session : median {med_hot:.2f} s  samples {[round(x, 2) for x in hot]}")
    print(f"  at rest (cold)  : median {med_cold:.2f} s  samples {[round(x, 2) for x in cold]}")
    print("  at rest (warm pool): n/a (no warm pool on this branch)")
    print(f"  cold / running  : {med_cold / med_hot:.1f}x")
    print(f"  (kubectl-berth start alone, in both: median {cli:.2f} s)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
