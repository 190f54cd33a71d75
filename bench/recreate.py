"""Benchmark: a session deleted and applied again under the same name, against its first
placement, in one run (docs/sessions.md, "Re-creating a session of the same name").

Setup (real pieces, as in tests/integration/operator): the dev cluster, ``berth-operator`` as
a subprocess (this checkout's, or ``--src DIR``'s, e.g. a ``git worktree`` of ``main`` to see
the figure before a change), the scripted model. Each round applies an AgentSession, waits for
it to succeed, deletes it (``--wait=false``: its pods are still being removed) and at once
applies one of the same name with a new prompt. Measured: ``kubectl apply`` returned → the
session's status shows ``Running`` for *that* object (its uid), for the first object
(*first*, the baseline) and for the re-created one (*again*).

Prints each round, the medians and the ratio again / first. Nothing is asserted. Uses the
dev cluster: run it under ``flock -o /work/berth-cluster.lock`` where the cluster is shared.

    .venv/bin/python bench/recreate.py [--rounds 3] [--src DIR]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "operator")]

from tests.cluster import DevCluster  # noqa: E402
from tests.integration.operator.harness import (  # noqa: E402
    SECRET,
    OperatorProcess,
    install_crds,
    operator_kubeconfig,
    scripted_model,
    session_manifest,
)

SCRIPT: dict[str, Any] = {"turns": [{"text": "done"}], "on_exhausted": "repeat_last"}
CAP_SECONDS = 300.0


def session(dc: DevCluster, ns: str, name: str) -> dict[str, Any]:
    res = dc.kubectl("-n", ns, "get", "agentsession", name, "-o", "json", check=False)
    return json.loads(res.stdout) if res.returncode == 0 else {}


def apply_and_time(dc: DevCluster, ns: str, manifest: dict[str, Any]) -> tuple[str, float]:
    """Apply ``manifest``; (its uid, seconds until its status says Running)."""
    dc.kubectl("-n", ns, "apply", "-f", "-", input=yaml.safe_dump(manifest))
    start = time.monotonic()
    uid = ""
    while time.monotonic() - start < CAP_SECONDS:
        obj = session(dc, ns, manifest["metadata"]["name"])
        uid = (obj.get("metadata") or {}).get("uid", "")
        if (obj.get("status") or {}).get("phase") in ("Running", "Succeeded"):
            return uid, time.monotonic() - start
        time.sleep(0.2)
    raise RuntimeError(f"{manifest['metadata']['name']} not Running after {CAP_SECONDS} s")


def wait_phase(dc: DevCluster, ns: str, name: str, uid: str, phase: str) -> None:
    start = time.monotonic()
    while time.monotonic() - start < CAP_SECONDS:
        obj = session(dc, ns, name)
        if (
            obj.get("metadata", {}).get("uid") == uid
            and obj.get("status", {}).get("phase") == phase
        ):
            return
        time.sleep(0.2)
    raise RuntimeError(f"{name} not {phase} after {CAP_SECONDS} s")


def one_round(dc: DevCluster, ns: str, base_url: str, n: int) -> tuple[float, float]:
    name = f"again-{n}"
    uid, first = apply_and_time(dc, ns, session_manifest(name, base_url, f"first {n}"))
    wait_phase(dc, ns, name, uid, "Succeeded")
    dc.kubectl("-n", ns, "delete", "agentsession", name, "--wait=false")
    _, again = apply_and_time(dc, ns, session_manifest(name, base_url, f"again {n}"))
    return first, again


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--src", type=Path, default=None)
    args = parser.parse_args()
    dc = DevCluster.ensure()
    install_crds(dc)
    rows: list[tuple[float, float]] = []
    with (
        dc.namespace("bench-recreate") as ns,
        scripted_model(SCRIPT) as llm,
        tempfile.TemporaryDirectory(prefix="berth-op-") as tmp,
    ):
        op = OperatorProcess(dc, ns, operator_kubeconfig(dc, Path(tmp)), Path(tmp))
        if args.src is not None:
            op.use_checkout(args.src.resolve())
        op.start()
        try:
            dc.kubectl("-n", ns, "apply", "-f", "-", input=yaml.safe_dump(SECRET))
            for n in range(args.rounds):
                rows.append(one_round(dc, ns, llm.base_url, n))
                print(f"round {n}: first {rows[-1][0]:.1f} s, again {rows[-1][1]:.1f} s")
        finally:
            dc.kubectl("-n", ns, "delete", "agentsessions", "--all", "--timeout=60s", check=False)
            op.stop_all()
    first = statistics.median(r[0] for r in rows)
    again = statistics.median(r[1] for r in rows)
    source = args.src or "this checkout"
    print(
        f"RECREATE operator {source}: apply -> Running median first {first:.1f} s, "
        f"again {again:.1f} s, ratio again/first {again / first:.2f}"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
