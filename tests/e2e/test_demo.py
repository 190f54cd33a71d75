"""The main job as an e2e test: ``hack/demo.py`` against the dev cluster.

The demo prints its own report and exits 0 only when every check holds (session Succeeded after a
drain-triggered passivation and resume on the other node, the LaneWorker scaled 0 → N → 0, the
project's own test suite passes in the workspace). Berth is uninstalled afterwards.
"""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.cluster import DEV_DIR, ROOT, DevCluster

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(1200)]


def test_make_demo_job_passes(dev_cluster: DevCluster) -> None:
    ns = "berth-demo-e2e"
    env = {**dev_cluster.proc_env, "BERTH_DEV_DIR": str(DEV_DIR), "BERTH_DEMO_NAMESPACE": ns}
    env.pop("OPENAI_API_KEY", None)  # CI replays the recorded conversation
    try:
        proc = subprocess.run(
            [sys.executable, str(ROOT / "hack" / "demo.py")],
            env=env,
            capture_output=True,
            text=True,
            timeout=1100,
            check=False,
        )
        print(proc.stdout[-6000:])
        assert proc.returncode == 0, f"demo failed:\n{proc.stdout[-4000:]}\n{proc.stderr[-4000:]}"
        assert "[ok] the project's tests pass after the fix" in proc.stdout
        assert "[FAIL]" not in proc.stdout
    finally:
        dev_cluster.kubectl("-n", ns, "delete", "agentsession,laneworker", "--all", check=False)
        subprocess.run(
            ["helm", "uninstall", ns, "-n", ns, "--wait"],
            env=dev_cluster.proc_env,
            capture_output=True,
            check=False,
        )
        dev_cluster.kubectl("delete", "namespace", ns, "--wait=false", check=False)
        dev_cluster.kubectl("delete", "pv", f"pv-{ns}-berth-shared", "--wait=false", check=False)
        for node in dev_cluster.nodes:
            dev_cluster.kubectl("uncordon", node, check=False)
