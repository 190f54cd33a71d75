"""The CI-sized crash campaign: ``CHAOS_CI_SCENARIOS`` (default 200) seeded scenarios of kill -9,
passivation, lost placements, lost workers, Redis restarts and losses, clock skew, a slow or full
volume and a failing model, with zero violations of "no tool twice, no result lost".

Runs ``python -m tests.chaos`` (see :mod:`tests.chaos`) on two jobs, prints its report and checks
its last line. Needs Debian's ``redis-server``; no Kubernetes.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]

pytestmark = [pytest.mark.redis, pytest.mark.timeout(1200)]


def test_ci_campaign_has_no_violations(tmp_path: Path) -> None:
    if shutil.which("redis-server") is None:
        pytest.skip("redis-server is not installed")
    n = int(os.environ.get("CHAOS_CI_SCENARIOS", "200"))
    args = ["--scenarios", str(n), "--jobs", "2", "--out", str(tmp_path), "--progress", "50"]
    proc = subprocess.run(
        [sys.executable, "-m", "tests.chaos", *args],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=False,
    )
    print(proc.stdout)
    report = (tmp_path / "report.txt").read_text()
    last = report.strip().splitlines()[-1]
    match = re.search(r"(\d+) scenarios, (\d+) violations", last)
    assert match is not None, report
    assert (int(match[1]), int(match[2])) == (n, 0), report + proc.stderr[-3000:]
    assert proc.returncode == 0, proc.stderr[-3000:]
