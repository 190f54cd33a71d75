"""hack/release.sh refuses a VERSION that is not the project's, before building anything."""

from __future__ import annotations

import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_a_version_other_than_the_projects_is_refused(tmp_path: Path) -> None:
    proc = subprocess.run(
        ["bash", str(ROOT / "hack" / "release.sh"), "9.9.9", str(tmp_path / "out")],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode != 0
    assert "VERSION 9.9.9 is not pyproject.toml's version" in proc.stderr, proc.stderr
    assert not (tmp_path / "out").exists()  # nothing built
