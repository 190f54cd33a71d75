"""Benchmark: seconds from ``helm install`` to the first AgentSession ``Succeeded``, as a new user
meets it: a fresh namespace with no claim, the chart with the dev values, one session.

    .venv/bin/python bench/install_to_first_session.py

Real pieces: the chart installed by helm (two operator replicas on the real nodes), the dev
cluster's RWX provisioner (the namespace's claim is created by the operator and provisioned on
demand, its root-owned root set up by the operator's Job), a session pod on a real node, the
scripted model over HTTP. Printed: the seconds to each step (operators Ready, the claim Bound,
its set-up recorded, the session Succeeded). The release and the namespace are removed after.
Nothing is asserted.
"""

from __future__ import annotations

import json
import sys
import tempfile
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "operator")]

from tests.cluster import DevCluster  # noqa: E402
from tests.integration.chart.support import helm  # noqa: E402
from tests.integration.chart.test_helm_install import dev_values  # noqa: E402
from tests.integration.operator.harness import (  # noqa: E402
    SECRET,
    bash,
    kget,
    scripted_model,
    session_manifest,
    wait,
)
from tests.unit.chart.helm import CHART  # noqa: E402


def main() -> None:
    dc = DevCluster.ensure()
    release = f"first-{uuid.uuid4().hex[:6]}"
    script = {"turns": [{"tool_calls": [bash("echo hi > hi.txt")]}, {"text": "done"}]}
    marks: dict[str, float] = {}
    with (
        dc.namespace("first") as ns,
        scripted_model(script) as llm,
        tempfile.TemporaryDirectory() as tmp,
    ):
        values = dev_values(dc, Path(tmp))  # carries the Redis passwords: nothing made before
        session = session_manifest(
            "hello",
            llm.base_url,
            "say hi",
            placement={"nodeSelector": {"berth.dev/dev-node": "real"}},
        )
        t0 = time.monotonic()
        try:
            watch = f"operator.watchNamespaces={{{ns}}}"
            helm(dc, "install", release, str(CHART), "-n", ns, "-f", str(values),
                 "--set", watch, "--wait", "--timeout", "300s")  # fmt: skip
            marks["helm install --wait returned (operators Ready)"] = time.monotonic() - t0
            dc.kubectl("-n", ns, "apply", "-f", "-", input=json.dumps(SECRET))
            dc.kubectl("-n", ns, "apply", "-f", "-", input=json.dumps(session))

            def phase() -> str:
                obj = kget(dc, ns, "agentsession", "hello") or {}
                return str((obj.get("status") or {}).get("phase") or "")

            wait("claim bound", lambda: (kget(dc, ns, "pvc", "berth-shared") or {}).get(
                "status", {}).get("phase") == "Bound", 300, 0.2)  # fmt: skip
            marks["claim berth-shared Bound"] = time.monotonic() - t0
            wait("claim set up", lambda: "berth.dev/volume-setup" in (
                (kget(dc, ns, "pvc", "berth-shared") or {}).get("metadata", {})
                .get("annotations") or {}), 300, 0.2)  # fmt: skip
            marks["claim set up (annotation recorded)"] = time.monotonic() - t0
            wait("session Succeeded", lambda: phase() in ("Succeeded", "Failed"), 300, 0.2)
            marks[f"session {phase()}"] = time.monotonic() - t0
        finally:
            helm(dc, "uninstall", release, "-n", ns, "--wait", check=False)
    print("helm install -> first session, seconds from the start of `helm install`:")
    for what, seconds in marks.items():
        print(f"  {seconds:7.1f}  {what}")


if __name__ == "__main__":
    main()
